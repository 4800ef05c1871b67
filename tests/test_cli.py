import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # each test runs the CLI in a subprocess

from .tasks import ROOT  # noqa: E402
from .tasks import run_cli as tunekit  # noqa: E402


def test_train_runs_and_writes_files(tmp_path: Path) -> None:
    r = tunekit("train", "--steps", "20", "--eval-every", "10", "--out", str(tmp_path), "--quiet")
    assert r.returncode == 0, r.stderr
    assert "final val loss" in r.stdout
    data = json.loads((tmp_path / "train.json").read_text())
    assert data["updates"] == 20 and len(data["losses"]) == 20
    assert [e["step"] for e in data["evals"]] == [10, 20]
    assert (tmp_path / "train.png").stat().st_size > 1000


def test_help_shows_examples() -> None:
    for args in (["--help"], ["train", "--help"], ["tasks", "--help"]):
        r = tunekit(*args)
        assert r.returncode == 0 and "examples:" in r.stdout


def test_tasks_lists_builtins() -> None:
    r = tunekit("tasks")
    assert r.returncode == 0
    assert "shapes" in r.stdout and "charlm" in r.stdout


@pytest.mark.parametrize(
    "args, needle",
    [
        (["train", "--task", "nope"], "unknown task 'nope'"),
        (["train", "--lr", "abc"], "'abc' is not a number"),
        (["train", "--lr", "-1"], "'-1' must be > 0"),
        (["train", "--steps", "0"], "--steps must be a positive integer, got 0: pass e.g. --steps 200"),
        (["train", "--precision", "fp8"], "invalid choice: 'fp8'"),
        (["train", "--task", "missing/file.py:f"], "does not exist"),
        (["train", "--task", "no_such_module_xyz:f"], "module 'no_such_module_xyz'"),
        (["train", "--set", "width"], "--set 'width' is not KEY=VALUE"),
        (["train", "--warmup", "1.5"], "warmup 1.5"),
        (["train", "--device", "cuda:0"] if not __import__("torch").cuda.is_available() else ["train", "--device", "tpu"], "device"),
        (["frobnicate"], "invalid choice: 'frobnicate'"),
    ],
)
def test_usage_errors_exit_2_with_one_line(args: list[str], needle: str) -> None:
    r = tunekit(*args)
    assert r.returncode == 2, (r.stdout, r.stderr)
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1, r.stderr
    assert needle in lines[0]
    assert "Traceback" not in r.stderr


def test_a_negative_value_reaches_its_own_check() -> None:
    r = tunekit("probe", "--memory-budget", "-5GB", "--quiet")
    assert r.returncode == 2 and r.stderr.strip().splitlines() == [
        "tunekit probe: error: memory size '-5GB' is not a size: write it like 512MiB, 8GiB or 2.5GB"]


def test_module_that_fails_to_import_is_a_usage_error(tmp_path: Path) -> None:
    (tmp_path / "badmod.py").write_text("raise RuntimeError('broken at import')\n")
    r = tunekit("train", "--task", "badmod:make", cwd=tmp_path)
    assert r.returncode == 2
    assert r.stderr.strip().splitlines() == [
        "tunekit train: error: module 'badmod' (from task 'badmod:make') failed to import: RuntimeError: broken at import"
    ]


def test_an_error_in_the_users_model_is_shown_as_theirs() -> None:
    """Not "internal error": the user's frames, and the task spec that loaded their code."""
    r = tunekit("train", "--task", "tests.tasks:broken_model_task", "--steps", "2", "--quiet")
    assert r.returncode == 1
    last = r.stderr.strip().splitlines()[-1]
    assert last == "tunekit train: error in your code (task 'tests.tasks:broken_model_task'): RuntimeError: boom in forward"
    assert "internal error" not in r.stderr and "tests/tasks.py" in r.stderr
    frames = [ln for ln in r.stderr.splitlines() if ln.strip().startswith('File "')]
    assert frames and "tests/tasks.py" in frames[0]  # tunekit's own frames are left out
    assert not any("/tunekit/" in ln for ln in frames)


def test_no_command_prints_help_and_exits_2() -> None:
    r = tunekit()
    assert r.returncode == 2 and "COMMAND" in r.stdout


def test_import_is_light() -> None:
    code = "import sys, tunekit; print(sorted(m for m in ('matplotlib', 'ray', 'optuna', 'torch') if m in sys.modules))"
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "[]"
    # The first name that needs torch imports it; Ray and matplotlib wait until a search or a plot needs them.
    code = "import sys, tunekit; tunekit.probe; print(sorted(m for m in ('matplotlib', 'ray', 'torch') if m in sys.modules))"
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert r.returncode == 0 and r.stdout.strip() == "['torch']", (r.stdout, r.stderr)


@pytest.mark.parametrize(
    "args, needle",
    [
        (["--set", "width=abc"], "width='abc' is not of type int"),
        (["--set", "dropout=2"], "dropout=2 is out of range"),
        (["--set", "wdth=3"], "has no setting 'wdth'"),
        (["--task", "charlm", "--set", "heads=3"], "dim=64 is not divisible by heads=3"),
        (["--seed", "18446744073709551616"], "must be in [0, 2**62)"),
        (["--out", "/proc/version/x"], "cannot be created"),
    ],
)
def test_bad_task_settings_and_paths_exit_2(args: list[str], needle: str) -> None:
    r = tunekit("train", "--steps", "1", "--quiet", *args)
    assert r.returncode == 2, r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and needle in lines[0]


def test_spaces_name_shows_the_entries_and_the_file() -> None:
    r = tunekit("spaces", "from_scratch")
    assert r.returncode == 0
    lines = r.stdout.strip().splitlines()
    assert lines[0].startswith("from_scratch: ") and lines[-1].endswith("from_scratch.toml")
    assert any(ln.split()[0] == "lr" and "range test" in ln for ln in lines[1:])
    assert any(ln.split()[0] == "min_lr_ratio" and "fixed at 0.1" in ln for ln in lines[1:])
    bad = tunekit("spaces", "nope")
    assert bad.returncode == 2 and "unknown space 'nope'" in bad.stderr


def test_a_failed_command_leaves_no_empty_output_folder(tmp_path: Path) -> None:
    r = tunekit("train", "--task", "nope", "--out", str(tmp_path / "new" / "out"))
    assert r.returncode == 2 and not (tmp_path / "new").exists()
    (tmp_path / "kept").mkdir()
    r = tunekit("train", "--task", "nope", "--out", str(tmp_path / "kept"))
    assert r.returncode == 2 and (tmp_path / "kept").is_dir()  # a folder that was there stays
