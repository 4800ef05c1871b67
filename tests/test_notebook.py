"""tunekit in a real Jupyter kernel: a result ending a cell shows its findings with its figure,
and a search shows its progress bar (nbclient runs the notebook, as Jupyter would)."""

from __future__ import annotations

import json
import os
import re
import sys
from pathlib import Path
from typing import Any

import pytest

from .tasks import ROOT

nbformat = pytest.importorskip("nbformat", reason="the notebook test needs nbformat (the test extra)")
nbclient = pytest.importorskip("nbclient", reason="the notebook test needs nbclient (the test extra)")
pytest.importorskip("ipykernel", reason="the notebook test needs ipykernel (the test extra)")

KERNEL = "tunekit-test"

SETUP = f"""
import sys
sys.path.insert(0, {str(ROOT)!r})  # tunekit and tests.tasks from this checkout
import torch
torch.set_num_threads(1)
from pathlib import Path
from torch import nn
import tunekit
from tests.tasks import SMALL, classification_task, regression_task, softmax_task, write_space
"""
DOCTOR = 'tunekit.doctor(softmax_task(), device="cpu", lr=3e-3)'
# A model in hand, measured untrained: the probe warns that its critical batch is likely too small.
PROBE = """
task = classification_task()
tunekit.probe(task.make_model(0), task.train_data, nn.CrossEntropyLoss(), memory_budget="256MiB", device="cpu",
              throughput_points=2, noise_repeats=4)
"""
SEARCH = """
tunekit.search(regression_task(), str(write_space(Path.cwd(), SMALL)), trials=2, budget="10updates",
               backend=tunekit.Local(device="cpu"))
"""
# What tqdm draws for the search's bar: "search:  50%|#####     | 1/2 [00:01<00:01, 1.2s/trial]".
SEARCH_BAR = re.compile(r"search:\s+\d+%\|[^|\n\r]*\|\s*\d/2 \[")
WIDGET = "application/vnd.jupyter.widget-view+json"


def _kernel_spec(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A kernel of this Python, found before any python3 kernel the machine has installed."""
    spec = tmp_path / "jupyter" / "kernels" / KERNEL
    spec.mkdir(parents=True)
    argv = [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"]
    (spec / "kernel.json").write_text(json.dumps({"argv": argv, "display_name": KERNEL, "language": "python"}))
    monkeypatch.setenv("JUPYTER_PATH", str(tmp_path / "jupyter"))
    monkeypatch.setenv("JUPYTER_RUNTIME_DIR", str(tmp_path / "runtime"))


def _kernel_env(tmp_path: Path) -> dict[str, str]:
    """A person's notebook: the inline backend (not the tests' Agg), no CI, IPython's files in tmp_path."""
    env = {k: v for k, v in os.environ.items() if k not in ("MPLBACKEND", "CI")}
    env["IPYTHONDIR"] = str(tmp_path / "ipython")
    return env


def _run(cells: list[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> list[list[dict[str, Any]]]:
    """Each cell's outputs, after a kernel has run them all in ``tmp_path``."""
    _kernel_spec(tmp_path, monkeypatch)
    work = tmp_path / "work"
    work.mkdir()
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c.strip()) for c in cells])
    client = nbclient.NotebookClient(nb, timeout=120, kernel_name=KERNEL, resources={"metadata": {"path": str(work)}})
    client.execute(env=_kernel_env(tmp_path))
    return [cell["outputs"] for cell in nb.cells]


def _result(outputs: list[dict[str, Any]]) -> dict[str, Any]:
    """The cell's value as Jupyter displays it (its execute_result's bundle)."""
    found = [o["data"] for o in outputs if o["output_type"] == "execute_result"]
    assert len(found) == 1, outputs
    return found[0]


def _bar_text(outputs: list[dict[str, Any]]) -> str:
    """What progress bars left in a cell: tqdm's text bar on stderr, or a widget bar's text/plain."""
    text = [o["text"] for o in outputs if o["output_type"] == "stream" and o["name"] == "stderr"]
    text += [o["data"].get("text/plain", "") for o in outputs
             if o["output_type"] == "display_data" and WIDGET in o["data"]]
    return "\n".join(text)


@pytest.mark.slow  # a Jupyter kernel, and a doctor, a probe and a search in it
def test_a_notebook_shows_the_findings_the_warnings_and_the_search_progress(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    setup, doctor, probe, search = _run([SETUP, DOCTOR, PROBE, SEARCH], tmp_path, monkeypatch)
    for outputs in (setup, doctor, probe, search):
        assert not [o for o in outputs if o["output_type"] == "error"], outputs

    shown = _result(doctor)
    assert "[FAIL] loss" in shown["text/html"] and "softmax" in shown["text/html"]
    assert '<img src="data:image/png;base64,' in shown["text/html"]
    assert shown["text/plain"].startswith("DoctorResult(task='softmax', fail=")  # consoles keep the short repr
    # The inline backend did not show the figure again beside the result.
    assert not [o for o in doctor if o["output_type"] == "display_data" and "image/png" in o["data"]], doctor

    shown = _result(probe)
    assert "WARNING: the noise scale was measured on the model as given" in shown["text/html"]
    assert shown["text/plain"].startswith("ProbeResult(")

    assert SEARCH_BAR.search(_bar_text(search)), search
    assert "best loss" in _result(search)["text/html"]


EXAMPLE = ROOT / "examples" / "hf_and_lightning.ipynb"
# The example as written, at a test's budget: one thread (two, on a CI machine's busy cores, spin more than they
# gain), shorter refine runs, fewer and shorter trials. Every call still runs and shows its result; what a larger
# search would find is not what this test checks. Each text must be in the notebook once (else the test says so).
CHEAPER = {"torch.set_num_threads(2)": "torch.set_num_threads(1)",
           "refine=Refine(steps=30, seeds=1)": "refine=Refine(steps=10, seeds=1)",
           'trials=4, budget="60updates"': 'trials=2, budget="20updates"',
           'trials=3, budget="60updates"': 'trials=2, budget="20updates"',
           '"from_scratch", trials=4,': '"from_scratch", trials=2,'}


def _cheaper(nb: Any) -> None:
    """``CHEAPER``'s replacements in the notebook's code cells, each text found as often as the notebook has it."""
    code = [c for c in nb.cells if c.cell_type == "code"]
    for old, new in CHEAPER.items():
        assert sum(c.source.count(old) for c in code), f"{old!r} is no longer in {EXAMPLE.name}: update CHEAPER"
        for c in code:
            c.source = c.source.replace(old, new)


@pytest.mark.slow  # a Jupyter kernel, transformers and lightning imported, every call on tiny models
def test_the_hf_and_lightning_notebook_runs_end_to_end(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("transformers")
    pytest.importorskip("lightning")
    _kernel_spec(tmp_path, monkeypatch)
    work = tmp_path / "work"
    work.mkdir()
    nb = nbformat.read(EXAMPLE, as_version=4)
    _cheaper(nb)
    nb.cells.insert(0, nbformat.v4.new_code_cell(f"import sys; sys.path.insert(0, {str(ROOT)!r})"))  # this checkout
    client = nbclient.NotebookClient(nb, timeout=300, kernel_name=KERNEL, resources={"metadata": {"path": str(work)}})
    client.execute(env={**_kernel_env(tmp_path), "CI": "true"})  # no progress bars: the outputs are the results
    results = [_result(c["outputs"]) for c in nb.cells if c.cell_type == "code"
               and any(o["output_type"] == "execute_result" for o in c["outputs"])]
    shown = "\n".join(r["text/plain"] for r in results)
    assert "LRFindResult(suggestion=" in shown and "DoctorResult(task='GPT2LMHeadModel'" in shown
    assert "ProbeResult(" in shown and "'learning_rate':" in shown  # the best as TrainingArguments
    assert "DoctorResult(task='Classifier', fail=0, warn=0" in shown  # a healthy LightningModule: no alarm
    assert "'COMPLETE'" in shown  # the user's own trainer.train() trials
    assert not list(work.glob("**/ray_results")) and not (Path.home() / "hf_out").exists()
