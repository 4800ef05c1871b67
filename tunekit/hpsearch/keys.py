"""Every attribute key tunekit stores on an Optuna study or trial, defined once.

Modules import these names; none types a key as a string (tests/test_keys.py checks it). The
values are what studies already hold: changing one would leave every stored study unreadable.
A ``*_PREFIX`` key is followed by an id (one attribute each, so concurrent writers never
overwrite each other's).
"""

from __future__ import annotations

__all__ = [
    "PLAN_KEY", "DISTS_KEY", "SPEC_KEY", "INTERRUPTED_KEY", "REQUEUED_KEY", "DESIGN_KEY", "DESIGN_BATCH_KEY",
    "WALL_SECONDS_KEY", "ARTIFACTS_KEY", "CREATOR_KEY", "WORKER_PREFIX", "STOPPED_PREFIX",
    "ENQUEUED_KEY", "RETRY_OF", "REQUEUE_REASON", "SURPLUS", "FINAL_STEP", "CONFIRM_KEY", "CONFIRM_OF", "REPEAT",
    "CONFIG", "TASK_CONFIG", "MICRO_BATCH", "ACCUMULATION_STEPS", "EFFECTIVE_BATCH", "LR_TRAINED",
    "PREDICTED_SECONDS", "CURVE", "SAMPLES", "UPDATES", "SECONDS", "VAL_LOSS", "INITIAL_LOSS", "ERROR", "REASON",
    "DIVERGED", "WORKER", "WEIGHTS", "ATTEMPTS", "RUNG_VALUES", "BRANCH_SAMPLES",
]

# --- on the study -------------------------------------------------------------------------

PLAN_KEY = "tunekit_plan"  # the StoredPlan (study.read_plan): what every trial shares, and the rungs
DISTS_KEY = "tunekit_distributions"  # the space's Optuna distributions, as JSON: a study keeps its space
SPEC_KEY = "tunekit_spec"  # a shared study's spec (shared/spec.py): what every worker must agree on
INTERRUPTED_KEY = "tunekit_interrupted"  # numbers of the trials killed or stopped with Ctrl-C (--resume re-runs them)
REQUEUED_KEY = "tunekit_requeued"  # numbers of the interrupted trials already queued again (once each)
DESIGN_KEY = "tunekit_design_queued"  # True once the initial design is queued (never twice, also after a kill)
DESIGN_BATCH_KEY = "tunekit_design_batch"  # the design's batch step (seeding.design_batch), for the result
WALL_SECONDS_KEY = "tunekit_seconds"  # a one-process study's wall seconds, over all its runs
ARTIFACTS_KEY = "tunekit_artifacts"  # the study's artifact folder, so a report or dashboard finds it
CREATOR_KEY = "tunekit_creator"  # a shared study's creator until its spec is stored: {host, pid, generation, alive}
WORKER_PREFIX = "tunekit_worker:"  # + worker id: that worker's {host, pid, seed, threads, started}
CONFIRM_KEY = "tunekit_confirmed"  # the numbers of the trials chosen to run again at fresh seeds (confirm.py), once
STOPPED_PREFIX = "tunekit_stopped:"  # + a trial number: why its worker's trial was failed ("" once re-run)

# --- on a trial: tunekit's bookkeeping --------------------------------------------------------

ENQUEUED_KEY = "tunekit_enqueued"  # a queued trial's params (a trial killed before taking them can be re-run)
RETRY_OF = "tunekit_retry_of"  # on a re-run: the number of the trial it re-runs
REQUEUE_REASON = "tunekit_reason"  # on a stopped worker's re-run: why the first run stopped
SURPLUS = "tunekit_surplus"  # True on a trial that found the study's slots taken: it did not run
CONFIRM_OF = "tunekit_confirm_of"  # on a confirmation run: the number of the trial whose params it runs again
REPEAT = "tunekit_repeat"  # on a confirmation run: which of its fresh seeds (0, 1, ...) it runs at
FINAL_STEP = "tunekit_final_step"  # the step of the final value among the intermediate ones (rungs skip it)

# --- on a trial: what it ran and how it ended (read by reports, dashboards and the pruner) ------

CONFIG = "config"  # the training settings it ran (without the device)
TASK_CONFIG = "task_config"  # the task function's config
MICRO_BATCH = "micro_batch"  # the micro-batch of each forward pass
ACCUMULATION_STEPS = "accumulation_steps"  # micro-batches per update
EFFECTIVE_BATCH = "effective_batch"  # samples per update
LR_TRAINED = "lr_trained"  # the learning rate as trained (the lr param is at the range test's batch)
PREDICTED_SECONDS = "predicted_seconds"  # device seconds its updates (and evaluations, where priced) were predicted to take
CURVE = "curve"  # [[samples, value], ...]: its evaluations (their own values, whatever a rung compared)
RUNG_VALUES = "rung_values"  # [[samples, value], ...]: a cooldown branch's value at each rung, what the pruner compared
BRANCH_SAMPLES = "branch_samples"  # of its samples, those its cooldown branches trained on
SAMPLES = "samples"  # samples it trained on
UPDATES = "updates"  # optimizer updates it made
SECONDS = "seconds"  # device seconds it took
VAL_LOSS = "val_loss"  # its last validation loss
INITIAL_LOSS = "initial_loss"  # the loss before training (the pruner's reference for a diverging trial)
ERROR = "error"  # why it failed (an exception's text, INTERRUPTED, surplus)
REASON = "reason"  # why it was pruned or failed: the one attribute a dashboard shows for both
DIVERGED = "diverged"  # True when its loss diverged
WORKER = "worker"  # the process that ran it: {host, pid, ...}
WEIGHTS = "weights"  # the path of its kept weights (keep.py)
ATTEMPTS = "attempts"  # Ray: the runs it took (retries included)
