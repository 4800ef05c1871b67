"""The trials' trained weights, kept: the best trial's (``keep="best"``), every finished one's (``"all"``), or none.

A trial's weights are its model's state_dict at the evaluation that gave its value: the last one, at the end
of its run (only a COMPLETE trial has a value). They are written to ``trial-N.pt`` in the search's weights
folder, atomically (a temporary file, then ``os.replace``): a process killed during the write leaves the
files that were there as they were. The file's path goes into the trial's ``weights`` attribute before the
study is told the trial ended, so the study itself says which file is whose.

Under ``"best"``, a trial writes only when it beats the study's best at its end, and once the study
knows it (:func:`settle`), the files of every other trial are removed: one copy stays, the study's best.
Two workers that finish at once may both write; the study then says which is better, and the other's
file goes. A file is removed only once the best's own file is in place, so the best so far is never lost.

The folder: a shared study's artifact folder where it has one (every worker sees it), else the Ray run's
storage path, else the search's output folder, else a temporary folder (a notebook's search without
``out``: removed when the process ends, as nothing else names it; a shared worker's stays).
"""

from __future__ import annotations

# Imported where used, not at the top: optuna, torch; importing this module does not pay for them.
import atexit
import json
import math
import os
import shutil
import socket
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

from tunekit.hpsearch.confirm import is_confirmation, runs_of
from tunekit.hpsearch.keys import WEIGHTS
from tunekit.objective import Objective
from tunekit.results.confirmation import choose
from tunekit.processes import alive

__all__ = ["KEEP", "Keeper", "settle", "weights_folder"]

KEEP = ("best", "none", "all")
_HOST = socket.gethostname().replace(".", "-")  # in a temporary file's name: whose write it is


@dataclass(frozen=True)
class Keeper:
    """Where and which trials' weights are kept (one per search process)."""

    mode: str  # "best" or "all" ("none" keeps no Keeper at all)
    folder: str
    direction: str = "minimize"

    def path(self, number: int) -> Path:
        return Path(self.folder) / f"trial-{number}.pt"

    def wants(self, value: float, study: Any = None) -> bool:
        """Whether a trial that ended with ``value`` keeps its weights: always under "all"; under "best", when
        it beats the study's best so far (a process without the study, a Ray worker, writes and lets the
        driver settle)."""
        if not math.isfinite(value):
            return False
        if self.mode == "all" or study is None:
            return True
        objective = Objective.of_direction(self.direction)
        best = objective.best(study.get_trials(deepcopy=False, states=(_complete(),)))
        return best is None or objective.sign * value < objective.sign * best.value

    @staticmethod
    def snapshot(model: Any) -> dict[str, Any]:
        """What a kept file holds of ``model``: its weights (state_dict) on the CPU (on a CPU, the trained
        tensors themselves: the model is let go after), and for a LightningModule what ``load_from_checkpoint``
        reads besides."""
        out: dict[str, Any] = {"state_dict": {k: v.detach().to("cpu") for k, v in model.state_dict().items()}}
        out.update(_lightning_keys(model))
        return out

    def write(self, snapshot: dict[str, Any], number: int, value: float, about: dict[str, Any]) -> str:
        """Trial ``number``'s :meth:`snapshot` and what it is, written atomically as its file; the file's path.

        The file is a dict a plain ``torch.load`` reads: ``state_dict`` (what ``model.load_state_dict`` and
        Lightning's ``load_from_checkpoint`` take), and ``trial``, ``value`` and the trial's run."""
        import torch

        path = self.path(number)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.{_HOST}.{os.getpid()}.tmp")
        try:
            with open(tmp, "wb") as f:
                torch.save({**snapshot, "trial": int(number), "value": float(value), **about}, f)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, path)
        finally:
            tmp.unlink(missing_ok=True)
        return str(path)


def _lightning_keys(model: Any) -> dict[str, Any]:
    """A LightningModule's version key and hyperparameters (those plain enough for ``weights_only`` loading),
    as Lightning's own checkpoints hold them."""
    lightning = sys.modules.get("lightning") or sys.modules.get("pytorch_lightning")  # imported by the user, if at all
    module_class = getattr(getattr(lightning, "pytorch", lightning), "LightningModule", None)
    if module_class is None or not isinstance(model, module_class):
        return {}
    out: dict[str, Any] = {"pytorch-lightning_version": str(lightning.__version__)}
    try:
        hparams = json.loads(json.dumps(dict(model.hparams)))
    except (TypeError, ValueError):
        return out  # load_from_checkpoint(path, **the module's arguments) then
    if hparams:
        out["hyper_parameters"] = hparams
    return out


def weights_folder(keep: str, study_name: str, out: Optional[Path], trial_folder: Optional[str],
                   artifacts: Optional[str] = None, lasting: bool = False) -> Optional[str]:
    """Where a search keeps weights (None under "none"): a shared study's ``artifacts`` folder, else the
    backend's ``trial_folder`` (Ray's storage path), else ``out``, else a temporary folder, removed when
    the process ends unless ``lasting`` (a shared worker's: the study names its files)."""
    if keep == "none":
        return None
    if artifacts:
        return str(Path(artifacts).resolve() / "weights" / study_name)
    if trial_folder:
        return str(Path(trial_folder).resolve() / study_name / "weights")
    if out is not None:
        return str(Path(out).resolve() / "weights")
    folder = tempfile.mkdtemp(prefix="tunekit-weights-")
    if not lasting:  # this process's result is the only one that names it: gone with the process
        atexit.register(shutil.rmtree, folder, ignore_errors=True)
    return folder


def settle(study: Any, keeper: Optional[Keeper]) -> None:
    """Under "best": every kept file but the study's best trial's removed, once the best's is in place;
    and the temporary files of writes this host's dead processes left. Confirmation runs all write: once
    they have ended, the file that stays is the chosen configuration's best run's (``Confirmation.kept``)."""
    if keeper is None or keeper.mode != "best":
        return
    # The best from the same read as the files: a better trial told in between is in neither, not removed.
    trials = study.get_trials(deepcopy=False)
    done = [t for t in trials if t.state == _complete()]
    objective = Objective.of_direction(keeper.direction)
    best = objective.best(done)
    if best is None:
        return
    keep = {best.number}
    runs = runs_of(trials)
    if runs:  # confirmed: the chosen configuration's run, once every confirmation run has ended
        if any(is_confirmation(t.user_attrs) and not t.state.is_finished() for t in trials):
            keep |= {r.number for r in runs}  # which is chosen is not known yet: none of them goes
        else:
            chosen = choose(runs, objective, (best.number, best.value))
            keep = {chosen.kept} if chosen is not None and chosen.kept is not None else keep
    files = {t.number: t.user_attrs.get(WEIGHTS) for t in done}
    if not all(files.get(n) and Path(files[n]).is_file() for n in keep):
        return  # the kept file is not (yet) there: nothing goes before it is
    for number, other in files.items():
        if other and number not in keep:
            Path(other).unlink(missing_ok=True)
    _clear_stale(Path(str(files[next(iter(keep))])).parent)


def _complete() -> Any:
    import optuna

    return optuna.trial.TrialState.COMPLETE


def _clear_stale(folder: Path) -> None:
    """Temporary files of this host's writes whose process is gone (killed during a write)."""
    for tmp in folder.glob(f".trial-*.{_HOST}.*.tmp"):
        pid = tmp.name.rsplit(".", 2)[-2]
        if pid.isdigit() and not alive(int(pid)):
            tmp.unlink(missing_ok=True)
