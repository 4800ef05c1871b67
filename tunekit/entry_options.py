"""The objects ``lr_find``, ``probe`` and ``doctor`` take, one per concept, as ``search`` takes a sampler and a pruner.

``lr_find(task, sweep=Sweep(max_lr=1), refine=Refine(share=0.1), step=StepSettings(precision="bf16"))``;
``probe(task, step=StepSettings(...), measure=Measurement(...), target=BatchTarget(target_batch=256))``;
``doctor(task, run=PlannedRun(lr=3e-3), checks=DoctorChecks(anomaly=True))``.
Each is frozen; its fields are the only list of its settings: the CLI's flags are generated from them
(:mod:`tunekit.option_fields`). The entry point checks their values, resolved against the task's recipe.
This module imports nothing heavy (it lies below every folder): the CLI reads it to build its parser.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional, Union

from tunekit.defaults import (DIVERGE_THRESHOLD, PROBE_FULL_RUN_UPDATES, PROBE_LONG_RUN_SHARE, PROBE_SHORT_RUN_SHARE,
                              REFINE_SHARE, SCHEDULE, SWEEP_STEPS, DECAYS)
from tunekit.errors import UsageError, check_int, is_int_at_least, shown
from tunekit.option_fields import opt
from tunekit.precision import PRECISIONS

__all__ = ["Sweep", "Refine", "StepSettings", "Measurement", "BatchTarget", "PlannedRun", "DoctorChecks", "NOISE_REPEATS",
           "TASK_DEFAULT"]

NOISE_REPEATS = 12  # gradients at each of the noise scale's two batches


class _TaskDefault:
    """The default of a setting that ``train`` takes from the task: the task's, else train's own."""

    def __repr__(self) -> str:
        return "TASK_DEFAULT"


#: ``clip_grad_norm``'s default: the task's ``defaults["clip_grad_norm"]``, else ``defaults.CLIP_GRAD_NORM``,
#: as ``train`` resolves it.
TASK_DEFAULT: Any = _TaskDefault()


@dataclass(frozen=True)
class StepSettings:
    """The training step a probe runs, as ``train`` runs it: unset, each is the task's recipe, else train's."""

    batch_size: Optional[int] = opt(None, "micro-batch size (default: the task's)", kind="int", metavar="N")
    accumulation_steps: Optional[int] = opt(None, "micro-batches per optimizer update (default: the task's, else 1)",
                                            kind="int", metavar="N")
    precision: Optional[str] = opt(None, "fp32, bf16, or fp16 with a GradScaler (default: the task's)",
                                   choices=PRECISIONS)
    clip_grad_norm: Any = opt(TASK_DEFAULT, "clip the global grad norm at this value; 'none' to disable (default: "
                              "the task's, else 1, as in train)", flag="--clip", kind="clip", metavar="NORM")
    device: str = opt("auto", "cpu, cuda, cuda:N or auto (default)")
    scaler: Any = opt(None, "the fp16 GradScaler to step with (default: a fresh one)", cli=False)

    def refuse(self, *fields: tuple[str, str], caller: str) -> None:
        """A field ``caller`` has no use for, when set, refused in one line with why (``(name, why)``), not ignored."""
        for name, why in fields:
            if getattr(self, name) is not None:
                raise UsageError(f"{caller}() takes no StepSettings({name}=...), got {shown(getattr(self, name))}: "
                                 f"{why}")


@dataclass(frozen=True)
class Sweep:
    """The range test's sweep: the LR rises from ``min_lr`` to ``max_lr`` over ``sweep_steps`` updates."""

    min_lr: float = opt(1e-7, "first LR of the sweep (default 1e-7)", kind="positive", metavar="LR")
    max_lr: float = opt(10.0, "last LR of the sweep (default 10)", kind="positive", metavar="LR")
    sweep_steps: int = opt(SWEEP_STEPS, f"optimizer updates in the sweep, at least 10 (default {SWEEP_STEPS})",
                           kind="int", metavar="N", older="steps")
    mode: str = opt("exp", "LR spacing (default exp)", choices=("exp", "linear"))
    repeats: Optional[int] = opt(None, "sweeps with other data orders, their median taken and their spread reported "
                                 "(default 1; 2 where no short runs can check the curve)", kind="int", metavar="N")
    diverge_threshold: float = opt(DIVERGE_THRESHOLD, "stop where the loss is X times its best and far above its "
                                   f"start's noise (default {DIVERGE_THRESHOLD:g})", kind="float", metavar="X")
    loss_on: str = opt("train", "each point's loss: the batch trained on, or the first --val-batches batches of the "
                       "validation data (default train)", choices=("train", "val"))
    val_batches: int = opt(4, "validation batches per point with --loss-on val (default 4)", kind="int", metavar="N")

    def __post_init__(self) -> None:
        # lr_find checks the sweep's range and length; what it reads only with loss_on="val" is checked here.
        check_int("val_batches", self.val_batches, hint="pass e.g. val_batches=4")


@dataclass(frozen=True)
class Refine:
    """The short real runs of the planned schedule around the curve's suggestion that check it."""

    enabled: bool = opt(True, "the short runs that check the curve's suggestion (default; --no-refine: the curve "
                        "alone)", flag="--refine", kind="bool", old="refine")
    share: float = opt(REFINE_SHARE, "the short runs' cost as a share of the planned run's updates, or a few short "
                       f"runs where that share buys no useful run (default {REFINE_SHARE:g})",
                       flag="--refine-share", kind="positive", metavar="F", old="refine_share")
    steps: Optional[int] = opt(None, "updates of each short run of the planned schedule, whatever it costs "
                               "(default: what the budget buys)", flag="--refine-steps", kind="int", metavar="N",
                               old="refine_steps")
    seeds: Optional[int] = opt(None, "short runs per LR, with other data orders, their scores averaged (default: 1, "
                               "2 for runs of 200 updates or more; 2 with --refine-steps)", flag="--refine-seeds",
                               kind="int", metavar="S", old="refine_seeds")
    hold_out_share: Optional[float] = opt(None, "without validation data, score each short run on this share of the "
                                          "training data held out of it (default: on the samples it trained on)",
                                          kind="positive", metavar="F")
    schedule: Optional[str] = opt(None, "decay after warmup of the run you plan: the short runs train on it, the "
                                  f"suggestion is for it (default: the task's recipe, else {SCHEDULE})",
                                  choices=DECAYS, metavar="DECAY")

    def __post_init__(self) -> None:
        if self.schedule is not None and self.schedule not in DECAYS:
            raise UsageError(f"schedule {self.schedule!r} is unknown: pass one of {', '.join(DECAYS)} (the planned "
                             "run's decay), e.g. Refine(schedule='constant')")


@dataclass(frozen=True)
class Measurement:
    """What the probe measures and how much: the batches it tries, its timings, the noise scale's gradients."""

    headroom: float = opt(0.15, "fraction of the memory budget kept free (default 0.15)", kind="float", metavar="F")
    batch_limit: Optional[int] = opt(None, "the largest batch to try (default: the dataset's size)", kind="int",
                                     metavar="N", older="max_batch")
    trace_sizes: tuple[int, ...] = opt((4, 8, 16), "batches traced on fake tensors for the memory model "
                                       "(default 4,8,16)", kind="sizes", metavar="B,B,...")
    throughput_points: int = opt(5, "batches timed up to the largest (default 5; 0: none)", kind="count",
                                 metavar="N")
    timing_steps: int = opt(5, "consecutive timed steps per batch (default 5; at least 3, fewer where a batch's "
                            "steps would take over 2 s)", kind="int", metavar="N")
    noise_repeats: int = opt(NOISE_REPEATS, f"gradients at each of the noise scale's two batches (default "
                             f"{NOISE_REPEATS}; under 2: not measured)", kind="count", metavar="N")
    noise_warmup: Optional[int] = opt(None, "updates before the noise scale is measured (default 50 for a task's fresh "
                                      "model, 0 for a model in hand)", kind="count", metavar="N")
    calibrate_steps: bool = opt(True, "measure the real steps that confirm the largest batch, refitting the memory "
                                "model where they disagree (default; --no-calibrate-steps: the trace alone)",
                                kind="bool")
    cost_share: Optional[float] = opt(None, "the probe's samples at most this share of the planned run's (default: "
                                      f"{PROBE_SHORT_RUN_SHARE:g} for runs under {PROBE_FULL_RUN_UPDATES:,} updates, {PROBE_LONG_RUN_SHARE:g} "
                                      "beyond; 0: no cap); settings given away from their defaults are obeyed",
                                      kind="float", metavar="F")

    def __post_init__(self) -> None:
        # The probe checks the rest (headroom, batch_limit) beside the step's settings it resolves.
        sizes = self.trace_sizes
        if not isinstance(sizes, (tuple, list)) or not sizes or not all(is_int_at_least(b) for b in sizes):
            raise UsageError(f"trace_sizes must be positive batch sizes, got {shown(sizes)}: pass e.g. "
                             "trace_sizes=(4, 8, 16)")
        object.__setattr__(self, "trace_sizes", tuple(sizes))  # frozen, and hashable as such
        check_int("throughput_points", self.throughput_points, minimum=0, hint="0 times no batch: pass e.g. throughput_points=5")
        check_int("timing_steps", self.timing_steps, hint="pass e.g. timing_steps=5")
        check_int("noise_repeats", self.noise_repeats, minimum=0, hint="under 2 measures no noise scale: pass e.g. noise_repeats=12")
        if self.noise_warmup is not None:
            check_int("noise_warmup", self.noise_warmup, minimum=0, hint="pass e.g. noise_warmup=50")


@dataclass(frozen=True)
class BatchTarget:
    """The run the probe plans for: its effective batch, and an LR found at another batch to rescale to it."""

    target_batch: Optional[int] = opt(None, "effective batch to plan for (default: the critical batch)", kind="int",
                                      metavar="N")
    lr: Optional[float] = opt(None, "an LR found at --lr-batch, to rescale to the target batch", kind="positive",
                              metavar="LR")
    lr_batch: Optional[int] = opt(None, "the effective batch at which --lr was found", kind="int", metavar="N")


@dataclass(frozen=True)
class PlannedRun:
    """The run you intend: its peak LR, warmup and updates; unset, a Task's own recipe."""

    lr: Optional[float] = opt(None, "the peak LR you intend, compared with a quick range test (default: the task's)",
                              kind="positive", metavar="LR")
    warmup: Optional[Union[int, float]] = opt(None, "the warmup you intend: a fraction (0.05) or updates (20) "
                                              "(default: the task's)", kind="warmup", metavar="W")
    run_steps: Optional[int] = opt(None, "the updates of the run you intend, for the warmup check (default: the "
                                   "task's)", kind="int", metavar="N", older="steps")


@dataclass(frozen=True)
class DoctorChecks:
    """How the checks run, and a saved range test to compare the LR with."""

    anomaly: bool = opt(False, "also run the backward under autograd's anomaly mode (slow)", kind="bool")
    overfit_floor: Optional[float] = opt(None, "the lowest loss the tiny batch can reach, for a loss with terms that "
                                         "do not vanish (default 0, or label smoothing's floor)", flag="--loss-floor",
                                         kind="nonnegative", metavar="LOSS")
    lr_find_result: Any = opt(None, "a saved lr_find.json to compare --lr with, instead of the quick range test",
                              flag="--lr-find", metavar="FILE")
