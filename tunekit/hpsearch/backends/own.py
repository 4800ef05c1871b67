"""The user's own training loop as a backend: each trial runs in their ``trainer.train()`` or ``trainer.fit()``.

The search is the same (probes, seeded space, sampler, rungs); only who trains differs. The user's
function gets an :class:`OwnTrial`: the trial's run (its config, and in Hugging Face's or Lightning's
terms), and ``report(updates, value)``, which the callbacks of :mod:`tunekit.integrations.callbacks`
call at each evaluation and which says when tunekit's rungs stop the trial. Between trials the
memory the last one left is collected (transformers issue 13019: one process's trials grew GPU
memory until it ran out).
"""

from __future__ import annotations

# Imported where used, not at the top: torch, tqdm; importing this module does not pay for them.
import math
import time
from collections.abc import Callable
from typing import Any, Optional

from tunekit.errors import SetupError
from tunekit.hpsearch.backends.base import Work
from tunekit.hpsearch.backends.local import run_local
from tunekit.hpsearch.keep import Keeper
from tunekit.hpsearch.plan import Plan, TrialConfig
from tunekit.hpsearch.resilient import StorageUnreachable
from tunekit.hpsearch.settings import SearchSettings
from tunekit.hpsearch.confirm import is_confirmation
from tunekit.hpsearch.trial import Outcome, final_step, keep_weights
from tunekit.objective import objective_of
from tunekit.training.memory import collecting_young, free_memory

__all__ = ["OwnLoop", "OwnTrial"]


class OwnTrial:
    """One trial, trained by the user's code: what to run, and where to report its evaluations."""

    def __init__(self, trial: Any, cfg: TrialConfig, prune: bool, keeps: bool = False) -> None:
        self.number = int(trial.number)
        self.params: dict[str, Any] = dict(trial.params)
        self.config: dict[str, Any] = {k: v for k, v in cfg.train.items() if k != "device"}
        self.objective = cfg.objective  # what the evaluations report: "loss", "accuracy", a metric's name
        self._trial, self._cfg, self._prune = trial, cfg, prune
        self.curve: list[list[float]] = []
        self.updates = 0
        self.stopped: Optional[str] = None  # why tunekit's rungs stopped it
        self.trained: dict[str, Any] = {}  # the model's weights at the final evaluation (kept if the trial is the best)
        self._keeps = keeps  # whether the search keeps weights at all

    @property
    def eval_every(self) -> int:
        """Updates between evaluations: the rungs compare trials at these points."""
        return int(self.config.get("eval_every") or self.config["max_steps"])

    def training_arguments(self) -> dict[str, Any]:
        """The trial's run as ``TrainingArguments`` keywords, evaluations included (``eval_strategy``,
        ``eval_steps``): ``dataclasses.replace(args, **trial.training_arguments())``."""
        from tunekit.integrations.hf import training_arguments

        keys = ("lr", "batch_size", "accumulation_steps", "warmup", "weight_decay", "max_steps", "schedule",
                "min_lr_ratio", "clip_grad_norm")
        out = training_arguments({k: self.config[k] for k in keys if k in self.config})
        out.update(eval_strategy="steps", eval_steps=self.eval_every)
        return out

    def lightning_arguments(self) -> dict[str, Any]:
        """The trial's run as ``lightning.Trainer`` keywords (validation every ``eval_every`` updates)."""
        k = int(self.config.get("accumulation_steps", 1))
        return {"max_steps": int(self.config["max_steps"]), "accumulate_grad_batches": k,
                "val_check_interval": self.eval_every * k, "check_val_every_n_epoch": None,
                "gradient_clip_val": self.config.get("clip_grad_norm")}

    def report(self, updates: int, value: float, model: Any = None) -> bool:
        """An evaluation after ``updates`` optimizer updates; True when the trial should stop (pruned).
        ``model``: the model evaluated; at the final evaluation its state_dict is the trial's weights."""
        value = float(value)
        self.updates = int(updates)
        self.curve.append([self.updates * self._cfg.effective_batch, value])
        if self.updates >= int(self.config["max_steps"]) or self.stopped:
            if model is not None and not self.stopped and self._keeps:
                # A copy: the user's loop may go on with the model after its final evaluation.
                self.trained.clear()
                self.trained.update(Keeper.snapshot(model))
                self.trained["state_dict"] = {k: v.clone() for k, v in self.trained["state_dict"].items()}
            return bool(self.stopped)  # the final value is the trial's own
        if math.isfinite(value):
            self._trial.report(value, self._cfg.reported(self.updates))
        if self._prune and self._trial.should_prune():
            self.stopped = (f"pruned at {self._cfg.reported(self.updates)} samples with "
                            f"{objective_of(self._cfg).label} {value:.4f}")
        return bool(self.stopped)

    def outcome(self, seconds: float) -> Outcome:
        samples = self.updates * self._cfg.effective_batch
        if self.stopped:
            return Outcome("PRUNED", curve=self.curve, samples=samples, updates=self.updates, seconds=seconds,
                           reason=self.stopped)
        if not self.curve:
            return Outcome("FAIL", seconds=seconds, error="the trial reported no evaluation: give the Trainer "
                           "evaluation data and the trial's callback (trial.hf_callback() or trial.lightning_callback())")
        value = self.curve[-1][1]
        if not math.isfinite(value):
            return Outcome("FAIL", curve=self.curve, samples=samples, updates=self.updates, seconds=seconds,
                           error=f"diverged: {objective_of(self._cfg).label} {value}", diverged=True)
        done = self.updates >= int(self.config["max_steps"])
        return Outcome("COMPLETE", value, self.curve, samples, self.updates, seconds,
                       final_step=final_step(self._cfg) if done else None)

    def hf_callback(self, metric: Optional[str] = None) -> Any:
        """A ``transformers.TrainerCallback`` that reports this trial's evaluations (``eval_<metric>``)."""
        from tunekit.integrations.callbacks import hf_callback

        return hf_callback(self, metric)

    def lightning_callback(self, metric: str = "val_loss") -> Any:
        """A ``lightning.pytorch.Callback`` that reports ``trainer.callback_metrics[metric]`` after each validation."""
        from tunekit.integrations.callbacks import lightning_callback

        return lightning_callback(self, metric)


class OwnLoop:
    """Trials one after another in this process, each trained by ``run(trial)``: the user's own loop."""

    concurrent = False

    def __init__(self, run: Callable[[OwnTrial], Any]) -> None:
        self.user_run = run

    def check(self, settings: SearchSettings) -> None:
        """Nothing to refuse: the user's loop runs where they run it."""

    def check_plan(self, settings: SearchSettings, plan: Plan, dists: dict[str, Any], probe: Optional[Any]) -> None:
        """Nothing to refuse."""

    def run(self, work: Work) -> None:
        run_local(work, run=self.trial)

    def trial(self, task: Any, trial: Any, cfg: TrialConfig, *, prune: bool, cache: Any = None,
              keeper: Optional[Keeper] = None) -> Outcome:
        """One trial through the user's function; an error of theirs fails the trial, and the search goes on."""
        own = OwnTrial(trial, cfg, prune, keeps=keeper is not None)
        start = time.perf_counter()
        with collecting_young():  # the collection after their loop walks what it made, not the process
            try:
                self.user_run(own)
            except (SetupError, StorageUnreachable, KeyboardInterrupt):
                raise
            except Exception as exc:
                outcome = own.outcome(time.perf_counter() - start)
                outcome.state, outcome.error = "FAIL", f"{type(exc).__name__}: {exc}"
                return outcome
            finally:
                free_memory()
        outcome = own.outcome(time.perf_counter() - start)
        keep_weights(keeper, own.trained, outcome, own.number, cfg, trial.study, always=is_confirmation(trial.user_attrs))
        own.trained.clear()
        return outcome
