"""The package as users get it: every subpackage installed, light imports, unshadowed names."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from .tasks import ROOT, regression_task, write_space, SMALL

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib


def test_every_subpackage_is_listed_for_install() -> None:
    listed = set(tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])
    found = {".".join(p.parent.relative_to(ROOT).parts) for p in (ROOT / "tunekit").rglob("__init__.py")
             if "__pycache__" not in p.parts}
    assert found <= listed, f"add to pyproject.toml's packages: {sorted(found - listed)}"


def test_the_functions_are_not_shadowed_by_modules() -> None:
    import importlib

    import tunekit

    for name in ("lr_find", "probe", "search", "train"):
        importlib.import_module(f"tunekit._{name}")  # importing the module does not rebind the name
        assert callable(getattr(tunekit, name)), name


@pytest.mark.slow  # a subprocess
def test_report_and_loading_a_result_import_no_training_code(tmp_path: Path) -> None:
    from tunekit import search

    search(regression_task(), str(write_space(tmp_path, SMALL)), trials=2, max_steps=10, device="cpu", out=tmp_path / "s")
    code = ("import sys; from tunekit.cli import main; assert main(['report', sys.argv[1]]) == 0; "
            "from tunekit.results import SearchResult; SearchResult.from_json(sys.argv[1] + '/search.json').table(); "
            "print(sorted(m for m in ('torch', 'optuna', 'ray') if m in sys.modules))")
    r = subprocess.run([sys.executable, "-c", code, str(tmp_path / "s")], capture_output=True, text=True, cwd=tmp_path,
                       env={"PYTHONPATH": str(ROOT), "MPLBACKEND": "Agg", "PATH": "/usr/bin:/bin"}, timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.strip().splitlines()[-1] == "[]"
