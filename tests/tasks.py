"""Tiny seeded tasks shared by the tests (after pytorch-lr-finder's tests/task.py), and the
helpers that several test modules use: the CLI in a subprocess, spaces, kill and resume."""

from __future__ import annotations

import contextlib
import os
import random
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import torch
from torch import nn
from torch.utils.data import TensorDataset

from tunekit import Task


def regression_data(n: int = 256, dim: int = 8, noise: float = 0.1, seed: int = 0) -> TensorDataset:
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, dim, generator=g)
    w = torch.randn(dim, 1, generator=g)
    y = x @ w + noise * torch.randn(n, 1, generator=g)
    return TensorDataset(x, y)


def classification_data(n: int = 256, dim: int = 8, classes: int = 4, seed: int = 0) -> TensorDataset:
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, dim, generator=g)
    y = (x[:, :classes]).argmax(1)
    return TensorDataset(x, y)


class MLP(nn.Module):
    def __init__(self, dim: int = 8, hidden: int = 16, out: int = 1, dropout: float = 0.0) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Linear(dim, hidden), nn.ReLU(), nn.Dropout(dropout), nn.Linear(hidden, out))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)


def regression_task(config: dict[str, Any] | None = None) -> Task:
    config = config or {}
    hidden = int(config.get("hidden", 16))
    return Task(
        model=lambda: MLP(8, hidden, 1),
        train_data=regression_data(256),
        val_data=regression_data(64, seed=1),
        loss=nn.MSELoss(),
        batch_size=16,
        name="regression",
    )


def classification_task() -> Task:
    return Task(
        model=lambda: MLP(8, 16, 4),
        train_data=classification_data(256),
        val_data=classification_data(128, seed=1),
        loss=nn.CrossEntropyLoss(),
        batch_size=32,
        name="classification",
    )


class HFStyleModel(nn.Module):
    """Returns an object with .loss and .logits, like a Hugging Face model given labels."""

    def __init__(self, dim: int = 8, classes: int = 4) -> None:
        super().__init__()
        self.linear = nn.Linear(dim, classes)

    def forward(self, input_values: torch.Tensor, labels: torch.Tensor | None = None) -> SimpleNamespace:
        logits = self.linear(input_values)
        loss = nn.functional.cross_entropy(logits, labels) if labels is not None else None
        return SimpleNamespace(loss=loss, logits=logits)


class PlainDictModel(nn.Module):
    """Takes dict batches' inputs as keywords and returns bare logits (no .loss)."""

    def __init__(self, dim: int = 8, classes: int = 4) -> None:
        super().__init__()
        self.linear = nn.Linear(dim, classes)

    def forward(self, input_values: torch.Tensor) -> torch.Tensor:
        return self.linear(input_values)


def dict_batches(n_batches: int = 8, batch: int = 16, seed: int = 0) -> list[dict[str, torch.Tensor]]:
    data = classification_data(n_batches * batch, seed=seed)
    x, y = data.tensors
    return [{"input_values": x[i : i + batch], "labels": y[i : i + batch]} for i in range(0, len(x), batch)]


def hf_task() -> Task:
    return Task(model=lambda: HFStyleModel(), train_data=dict_batches(), val_data=dict_batches(2, seed=1), name="hf")


def broken_model_task() -> Task:
    """A model whose forward raises: an internal error, not a usage error."""

    class Broken(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.w = nn.Parameter(torch.zeros(1))

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            raise RuntimeError("boom in forward")

    return Task(model=Broken, train_data=regression_data(32), loss=nn.MSELoss(), batch_size=8)


def not_a_task() -> int:
    return 3


def slow_regression_task(config: dict[str, Any] | None = None) -> Task:
    """Regression whose every step sleeps a little: a trial lasts long enough to be killed mid-way."""
    import time

    task = regression_task(config)

    def compute(model: nn.Module, batch: Any) -> torch.Tensor:
        time.sleep(0.02)
        return nn.functional.mse_loss(model(batch[0]), batch[1])

    task.loss, task.compute_loss = None, compute
    return task


def picky_regression_task(config: dict[str, Any] | None = None) -> Task:
    """Raises for one value of a task hyperparameter: a failing trial."""
    config = config or {}
    if int(config.get("hidden", 16)) == 13:
        raise RuntimeError("hidden=13 is unlucky")
    return regression_task(config)


# --- helpers shared by the test modules -----------------------------------------------

ROOT = Path(__file__).resolve().parents[1]


def run_cli(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    """`python -m tunekit ARGS`, in a temporary folder (where its default tunekit_runs/ lands) unless told,
    with the repo on the path for tests.tasks."""
    import tempfile

    env = dict(os.environ, OMP_NUM_THREADS="1", MPLBACKEND="Agg",
               PYTHONPATH=os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p))
    with tempfile.TemporaryDirectory(prefix="tunekit-cli-") as tmp:
        return subprocess.run([sys.executable, "-m", "tunekit", *args], capture_output=True, text=True,
                              cwd=cwd or tmp, env=env, timeout=300)


def write_space(tmp_path: Path, text: str, name: str = "space.toml") -> Path:
    p = tmp_path / name
    p.write_text(textwrap.dedent(text))
    return p


SMALL = """
[lr]
type = "float"
log = true
low = 1e-3
high = 1e-1

[warmup]
type = "fixed"
value = 0.1
"""


# lr 1e12 diverges at once; 1e-2 trains.
DIVERGING = """
[lr]
type = "categorical"
choices = [1e12, 1e-2]

[clip_grad_norm]
type = "fixed"
value = 1e9
"""

# tests.tasks:picky_regression_task raises for hidden = 13.
FAILING = """
[lr]
type = "fixed"
value = 1e-2

[task.hidden]
type = "categorical"
choices = [13, 16]
"""


def fingerprint(r: Any) -> list[tuple[Any, ...]]:
    """What must be the same in two searches of one seed."""
    return [(t["number"], t["state"], t["value"], t["params"], t["samples"], t["micro_batch"], t["accumulation_steps"])
            for t in r.trials]



def _trials(storage: str, name: str) -> list[Any] | None:
    """The study's trials, or None while it does not exist. Only while no search runs: opening an
    Optuna storage may create its tables, which would race the search's own creating them."""
    import optuna

    if not Path(storage.removeprefix("sqlite:///")).is_file():
        return None
    try:
        return list(optuna.load_study(study_name=name, storage=storage).trials)
    except KeyError:  # the database, but no study in it yet
        return None


def _trial_count(storage: str) -> int:
    """How many trials the database holds, read without writing anything (while a search runs)."""
    import sqlite3

    path = Path(storage.removeprefix("sqlite:///"))
    if not path.is_file():
        return 0
    try:
        with contextlib.closing(sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=5)) as db:
            return int(db.execute("SELECT COUNT(*) FROM trials").fetchone()[0])
    except sqlite3.OperationalError:  # no tables yet, or locked past the timeout
        return 0


def _kill_at_random(proc: subprocess.Popen[bytes], rng: random.Random, storage: str, name: str,
                    window_s: float, deadline: float) -> bool:
    """SIGKILL the search's process group at a random point of this life: while it starts (one time
    in five), else a random time after its first new trial. False if it ended first."""
    start, before = time.time(), _trial_count(storage)
    at = start + rng.uniform(0, 3 * window_s) if rng.random() < 0.2 else None
    while proc.poll() is None and time.time() < deadline:
        if at is None and _trial_count(storage) > before:
            at = time.time() + rng.uniform(0, window_s)
        if at is not None and time.time() >= at:
            os.killpg(proc.pid, signal.SIGKILL)  # no cleanup: its trials stay RUNNING; Ray's processes die too
            proc.wait()
            return True
        time.sleep(0.05)
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGKILL)
        raise AssertionError("the search made no progress before the deadline")
    return False


def kill_and_resume(tmp_path: Path, extra: list[str], kills: int = 5, seed: int = 0, trials: int = 10,
                    window_s: float = 1.5, deadline_s: float = 600) -> list[Any]:
    """Run `tunekit search`, SIGKILL it at ``kills`` random points, resuming each time, then let it
    finish. After every kill and at the end: no completed trial lost or changed. At the end: the
    requested count finished, none twice, and each interrupted trial re-run with its parameters.
    Returns the study's trials."""
    import optuna

    space = write_space(tmp_path, SMALL)
    out = tmp_path / "run"
    args = ["search", "--task", "tests.tasks:slow_regression_task", "--space", str(space), "--trials", str(trials),
            "--max-steps", "30", "--no-prune", "--device", "cpu", "--out", str(out), "--quiet", *extra]
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=str(ROOT))
    storage, name = f"sqlite:///{out / 'study.db'}", "tunekit-regression-space"  # tunekit-TASK-SPACE
    rng, deadline = random.Random(seed), time.time() + deadline_s
    done: dict[int, tuple[Any, Any]] = {}
    interrupted: dict[int, dict[str, Any]] = {}
    for k in range(kills):
        resume = ["--resume"] if _trials(storage, name) is not None else []
        proc = subprocess.Popen([sys.executable, "-m", "tunekit", *args, *resume], cwd=tmp_path, env=env,
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
        assert _kill_at_random(proc, rng, storage, name, window_s, deadline), f"the search ended before kill {k + 1}"
        now = _trials(storage, name) or []
        _check_kept(done, now, f"after kill {k + 1}")
        done.update({t.number: (t.value, t.params) for t in now if t.state.name == "COMPLETE"})
        interrupted.update({t.number: t.params for t in now if t.state.name == "RUNNING"})
    r = run_cli(*args, "--resume", cwd=tmp_path)
    assert r.returncode == 0, r.stderr[-3000:]
    after = optuna.load_study(study_name=name, storage=storage).trials
    _check_kept(done, after, "at the end")
    marked = set(optuna.load_study(study_name=name, storage=storage).user_attrs.get("tunekit_interrupted", []))
    assert set(interrupted) <= marked
    finished = [t for t in after if t.state.name in ("COMPLETE", "PRUNED")
                or (t.state.name == "FAIL" and t.number not in marked)]
    assert len(finished) == trials, [(t.number, t.state.name) for t in after]  # none missing, none extra
    for number, params in interrupted.items():  # re-run with its parameters (a kill between a trial's
        if params:                              # creation and its sampling leaves none: sampled anew)
            again = [u for u in finished if u.number > number and u.params == params]
            assert len(again) == 1, (number, params, [(u.number, u.params) for u in after])
    return after


def _check_kept(done: dict[int, tuple[Any, Any]], trials: list[Any], when: str) -> None:
    by_number = {t.number: t for t in trials}
    assert len(by_number) == len(trials), when
    for n, (value, params) in done.items():
        t = by_number.get(n)
        assert t is not None and t.state.name == "COMPLETE" and t.value == value and t.params == params, (when, n)
def softmax_task() -> Task:
    """A classifier with a softmax before CrossEntropyLoss: tunekit doctor fails it."""
    return Task(
        model=lambda: nn.Sequential(MLP(8, 16, 4), nn.Softmax(dim=1)),
        train_data=classification_data(256),
        val_data=classification_data(128, seed=1),
        loss=nn.CrossEntropyLoss(),
        batch_size=32,
        name="softmax",
    )


# --- tasks with a bad loss or bad labels: each a one-line usage error (issue 22) ------------------

def nonscalar_loss_task() -> Task:
    """A criterion that returns one loss per sample (reduction='none')."""
    task = classification_task()
    task.loss, task.name = nn.CrossEntropyLoss(reduction="none"), "nonscalar"
    return task


def float_loss_task() -> Task:
    """A compute_loss that returns a Python float (loss.item()), which cannot be backpropagated."""
    task = classification_task()
    task.loss, task.name = None, "float_loss"
    task.compute_loss = lambda model, batch: nn.functional.cross_entropy(model(batch[0]), batch[1]).item()
    return task


def labels_out_of_range_task() -> Task:
    """Labels 2..5 for a model with 4 outputs."""
    x, y = classification_data(256).tensors
    return Task(model=lambda: MLP(8, 16, 4), train_data=TensorDataset(x, y + 2), loss=nn.CrossEntropyLoss(),
                batch_size=32, name="bad_labels")


def foreign_optimizer_task() -> Task:
    """An optimizer factory that ignores the params it is given and takes another model's."""
    other = MLP(8, 16, 4)
    task = classification_task()
    task.optimizer, task.name = (lambda params: torch.optim.AdamW(other.parameters(), lr=1e-3)), "foreign_optimizer"
    return task


# On classification_task, 40 updates: lr 3 ends at accuracy 0.62 with validation loss 5.8, lr 0.003 at
# accuracy 0.52 with loss 1.2: ranked by accuracy and by loss, the two disagree.
TWO_LRS = """
[lr]
type = "categorical"
choices = [0.003, 3.0]

[warmup]
type = "fixed"
value = 0.1
"""
