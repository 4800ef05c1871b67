"""One place for each default that several parts of tunekit share.

A run's recipe (its length, clipping, warmup, schedule and decay floor) is read by
``train``, ``lr_find``, ``doctor``, ``probe`` and the schedule functions; each used to
write its own copy, and the copies drifted (warmup 0.05 in training, 0 in ``lr_at``).
Every module imports these instead; ``tests/test_layout.py`` fails on a copy elsewhere.
"""

from __future__ import annotations

__all__ = ["LR", "RUN_STEPS", "RUN_EPOCHS_IN_HAND", "RUN_STEPS_IN_HAND", "SWEEP_STEPS", "INTERVAL_DECADES", "INTERVAL_COVERAGE", "INTERVAL_COVERAGE_CURVE", "DIVERGE_THRESHOLD", "REFINE_SHARE", "PROBE_FULL_RUN_UPDATES", "PROBE_SHORT_RUN_SHARE", "PROBE_LONG_RUN_SHARE",
           "CLIP_GRAD_NORM", "WARMUP", "DECAYS", "SCHEDULE", "WSD_DECAY", "MIN_LR_RATIO", "ACCUMULATION_STEPS", "GOVERNED"]

#: The peak LR of a run when nothing says otherwise (train's default).
LR = 1e-3
#: The planned run's length in optimizer updates: train's default, and a Task's when its recipe says none.
RUN_STEPS = 200
#: A model in hand comes with no recipe: its planned run, when the caller does not say, is this many
#: epochs of its data at its batch (Hugging Face's num_train_epochs default), said in the result; data
#: of no known length (an iterable) is taken as RUN_STEPS_IN_HAND updates.
RUN_EPOCHS_IN_HAND = 3
RUN_STEPS_IN_HAND = 10_000
#: lr_find's short runs may cost this share of the planned run's updates (the sweep aside), or up to SHORT_RUNS
#: runs of SHORT_STEPS updates where the share buys no useful run (tunekit.probes.short_runs).
REFINE_SHARE = 0.05
#: The range test's sweep, in updates: the curve (hence the rule's suggestion) depends on how fast the LR
#: rises; the doctor runs this same sweep, so that its number is lr_find's curve suggestion.
SWEEP_STEPS = 100
#: lr_find's interval (``LRFindResult.interval``): this many decades either side of its suggestion (twice that where
#: the finder is not confident or no short runs checked it); the share of the task corpus's runs whose planned
#: run's best LR it held (each grid LR by its odds of being the best over 10 seeds), each family left out of the
#: choice, said beside it; and (in-sample) around the curve's suggestion alone, refine=False
#: (benchmarks/data/lr_interval_report.txt).
INTERVAL_DECADES = 0.45
INTERVAL_COVERAGE = 0.91
INTERVAL_COVERAGE_CURVE = 0.88
#: The range test stops where its loss exceeds this many times its best (and its start's noise): lr_find's and
#: the CLI's.
DIVERGE_THRESHOLD = 4.0
#: The probe's cost, by default: at most PROBE_SHORT_RUN_SHARE of the planned run's samples for runs under
#: PROBE_FULL_RUN_UPDATES updates, PROBE_LONG_RUN_SHARE of them beyond (a probe dearer than the run it sizes is no
#: help to it). The promise is the run's samples AND seconds; a large batch's step costs more a sample than the
#: run's (an LSTM's at 558: 1.6x its step at 32), so the samples' share is the largest that kept every probe
#: call within its run's seconds on the corpus (benchmarks.probe_cost --shares: 0.7 on all families; left out,
#: 7 of 8 families hold at the share the others choose, the LMs do not: 0.8 from the others, 1.04x).
PROBE_FULL_RUN_UPDATES = 1000
PROBE_SHORT_RUN_SHARE = 0.7
PROBE_LONG_RUN_SHARE = 0.1
#: Gradient clipping of the global norm (None disables it): train's, lr_find's, probe's and the doctor's.
CLIP_GRAD_NORM = 1.0
#: Warmup: a fraction of the run (a float in [0, 1)) or a number of updates.
WARMUP = 0.05
#: The decays after warmup: cosine or linear to the floor, constant, or warmup-stable-decay ("wsd": the
#: peak until the last WSD_DECAY of the run, then a cosine to the floor, Hugging Face's default decay_type).
DECAYS: tuple[str, ...] = ("cosine", "linear", "constant", "wsd")
#: The decay after warmup.
SCHEDULE = "cosine"
#: A warmup-stable-decay run's decay: this share of the run, at its end (Hagele et al., 2024: 10-20%).
WSD_DECAY = 0.2
#: The LR at the last update as a fraction of the peak (the decay's floor).
MIN_LR_RATIO = 0.1
#: Micro-batches per optimizer update.
ACCUMULATION_STEPS = 1

#: What a rung of successive halving compares: "raw" (the evaluation's value) or "cooldown" (the value after
#: a short cooldown branch, tunekit.training.branch), and that branch's length as a share of the updates so far.
RUNG_VALUE = "raw"
RUNG_VALUES: tuple[str, ...] = ("raw", "cooldown")
RUNG_COOLDOWN = 0.2

#: Parameter (or field) names -> the default value they take from here. tests/test_layout.py refuses
#: a keyword or dataclass default that writes one of these values as a literal outside this module.
GOVERNED: dict[str, object] = {
    "clip_grad_norm": CLIP_GRAD_NORM, "warmup": WARMUP, "schedule": SCHEDULE, "decay": SCHEDULE,
    "min_lr_ratio": MIN_LR_RATIO, "run_steps": RUN_STEPS, "max_steps": RUN_STEPS, "sweep_steps": SWEEP_STEPS,
    "refine_share": REFINE_SHARE, "diverge_threshold": DIVERGE_THRESHOLD,
    "rung_value": RUNG_VALUE, "rung_cooldown": RUNG_COOLDOWN,
}
