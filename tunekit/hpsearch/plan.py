"""From a trial's sampled params to the run it trains: pure functions, no training.

A study fixes a :class:`Plan` once (budget, the LR's reference batch and
rescaling rule, the largest micro-batch that fits, the trials' seed, the
validation set); :func:`trial_config` then turns any params into the same
run on every machine and every time:

- the effective batch runs as the largest micro-batch that fits under the
  memory headroom and divides it, times accumulation: from the probe's memory
  model, never from timings, which vary with the machine's load;
- the trial runs ``budget // batch`` updates, its warmup and decay spanning them (with a
  budget in device time, as many updates as the probe's timed steps say fit in it);
- its device time is predicted from those timed steps and timed validation batch (stored with
  the study's probe: the same prices on every run of it), its evaluations paid first;
- the sampled LR is the LR at the range test's batch, rescaled to the trial's
  effective batch by the rule of the optimizer's family.
"""

from __future__ import annotations

# Imported where used, not at the top: optuna, torch; importing this module does not pay for them.
import math
from dataclasses import asdict, dataclass, field
from typing import Any, Optional

from tunekit.errors import UsageError
from tunekit.results.step_time import update_seconds
from tunekit.training.optimizers import optimizer_family, rescale_lr

__all__ = ["Plan", "TrialConfig", "split_batch", "lr_rule_for", "updates_for", "largest_batch", "evaluations",
           "off_steps_seconds", "steps_seconds",
           "trial_config", "effective_batch", "initial_design", "nearest_choice"]

# Fewer updates than this and warmup plus decay are no schedule at all: batches
# that leave a trial fewer updates are not offered.
MIN_UPDATES = 20


@dataclass(frozen=True)
class Plan:
    """What every trial of one study shares. Stored in the study, so resumed and joining runs agree."""

    budget_samples: int
    seed: int
    task_batch: int
    max_micro: int
    ref_batch: Optional[int] = None
    lr_rule: str = "none"
    evals: int = 8
    device: str = "auto"
    eval_batch_size: Optional[int] = None
    eval_batches: Optional[int] = None
    fixed: dict[str, Any] = field(default_factory=dict)
    objective: str = "loss"  # the metric trials report (tunekit.objective), and which way is better
    direction: str = "minimize"
    budget_seconds: Optional[float] = None  # a budget in device time: each trial's, whatever its batch
    step_times: list[list[float]] = field(default_factory=list)  # [micro-batch, seconds] (results.step_time)
    rung_cooldown: Optional[float] = None  # rungs compare a cooldown branch's value: its share of the updates so far
    branch_evals: list[int] = field(default_factory=list)  # the evaluations (1-based) a trial branches at
    eval_seconds: Optional[float] = None  # one evaluation's predicted seconds (None: not timed, not priced)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def steps_seconds(self) -> Optional[float]:
        """With a budget in device time, what a trial's updates may spend of it (:func:`steps_seconds`)."""
        if self.budget_seconds is None:
            return None
        return steps_seconds(self.budget_seconds, self.evals, self.eval_seconds, self.rung_cooldown, self.branch_evals)

    def update_seconds(self, micro: int, accumulation: int) -> Optional[float]:
        """Predicted seconds of one update at (``micro``, ``accumulation``); None without timed steps."""
        return update_seconds(self.step_times, micro, accumulation) if self.step_times else None


@dataclass(frozen=True)
class TrialConfig:
    """One trial's run: the training settings for :func:`tunekit.train`, and the task function's config.

    ``eval_samples`` is the budget's share per evaluation: the k-th evaluation is reported
    to the pruner at k x ``eval_samples`` samples whatever the batch (the samples it really
    saw differ by less than a batch), so trials at different batches meet at the same rungs.
    """

    train: dict[str, Any]
    task: dict[str, Any]
    eval_samples: int = 0
    objective: str = "loss"
    direction: str = "minimize"
    predicted_seconds: Optional[float] = None  # its updates priced by the probe's timed steps
    rung_cooldown: Optional[float] = None  # a cooldown branch's share of the updates so far (None: no branch)
    branch_evals: tuple[int, ...] = ()  # the evaluations (1-based) it branches at: the rungs'

    def cooldown(self) -> Any:
        """The :class:`~tunekit.training.branch.Cooldown` that ``train`` runs at its rungs, or None."""
        if self.rung_cooldown is None or not self.branch_evals:
            return None
        from tunekit.training.branch import Cooldown

        every = int(self.train["eval_every"])
        return Cooldown(float(self.rung_cooldown), frozenset(k * every for k in self.branch_evals))

    def reported(self, step: int) -> int:
        """The samples the evaluation after update ``step`` is reported at."""
        if not self.eval_samples:
            return step * self.effective_batch
        return (step // int(self.train["eval_every"])) * self.eval_samples

    @property
    def effective_batch(self) -> int:
        return int(self.train["batch_size"]) * int(self.train.get("accumulation_steps", 1))

    @property
    def samples(self) -> int:
        return self.effective_batch * int(self.train["max_steps"])


def split_batch(effective: int, max_micro: int) -> tuple[int, int]:
    """(micro-batch, accumulation): the largest micro-batch <= ``max_micro`` that divides ``effective``."""
    if effective < 1 or max_micro < 1:
        raise UsageError(f"effective batch {effective} with at most {max_micro} per micro-batch: both must be >= 1")
    for micro in range(min(effective, max_micro), 0, -1):
        if effective % micro == 0:
            return micro, effective // micro
    raise AssertionError("unreachable: 1 divides every batch")


def lr_rule_for(optimizer: Any, same: str = "samples") -> str:
    """How the best peak LR moves with the batch for this optimizer, when every batch's trial draws the
    ``same`` samples (a budget in samples, epochs, tokens or updates at the task's batch) or makes the
    same ``updates`` (a budget in device time, on a device a larger batch does not slow).

    With the same samples, linear for SGD (Goyal et al., 2017); for adaptive optimizers (Adam, AdamW,
    RMSprop...) the square root below the reference batch and unchanged above it (``sqrt_below``): a
    smaller batch's noisier steps want a lower LR, while a larger batch's fewer updates gain nothing
    from a higher one. With the same updates, the square root for adaptive ones (Malladi et al., 2022).
    The measurements: benchmarks/data/constants_history.md."""
    if optimizer_family(optimizer) == "sgd":
        return "linear"
    return "sqrt_below" if same == "samples" else "sqrt"


def updates_for(budget_samples: int, batch: int, budget_seconds: Optional[float] = None,
                seconds_per_update: Optional[float] = None) -> int:
    """Optimizer updates of a trial at effective batch ``batch`` (at least 2: a warmup and a step): the
    budget's samples over the batch, or with ``budget_seconds`` what fits in it at ``seconds_per_update``."""
    if budget_seconds is not None and seconds_per_update:
        return max(2, int(budget_seconds / seconds_per_update))
    return max(2, budget_samples // batch)


def evaluations(updates: int, evals: int) -> int:
    """How many evaluations a run of ``updates`` updates evaluated ``evals`` times takes: one every
    ``updates // evals`` updates before its end, and one at its end (:func:`tunekit.train`)."""
    every = max(1, updates // evals)
    return (updates - 1) // every + 1


def off_steps_seconds(plan: Plan, updates: int, per_update: float) -> float:
    """A trial's device seconds spent off its training steps: its evaluations (the plan's ``eval_seconds``
    each) and, where rungs compare cooldown branches, each branch's updates and evaluation."""
    every = max(1, updates // plan.evals)
    seconds = evaluations(updates, plan.evals) * (plan.eval_seconds or 0.0)
    if plan.rung_cooldown is not None:
        for k in plan.branch_evals:
            if k * every < updates:
                seconds += (plan.eval_seconds or 0.0) + max(1, round(plan.rung_cooldown * k * every)) * per_update
    return seconds


def steps_seconds(budget_seconds: float, evals: int, eval_seconds: Optional[float], rung_cooldown: Optional[float],
                  branch_evals: list[int]) -> float:
    """Of a trial's budget in device time, what its updates may spend: the rest after its evaluations
    (``evals``, and one at its end) and its rung branches (each an evaluation, and updates a
    ``rung_cooldown`` share of the updates so far, so of the steps' seconds whatever the batch)."""
    branches = branch_evals if rung_cooldown is not None else []
    fixed = (evals + 1 + len(branches)) * (eval_seconds or 0.0)
    return (budget_seconds - fixed) / (1.0 + (rung_cooldown or 0.0) * sum(branches) / evals)


def _fitting_updates(plan: Plan, per_update: float, least: int) -> int:
    """The most updates whose steps, evaluations and branches fit the budget in device time: ``least`` pays for
    one evaluation more than a run may take (a run whose updates ``evals`` divides takes ``evals``, others one
    more, :func:`evaluations`); up to one evaluation's worth more may fit."""
    assert plan.budget_seconds is not None
    most = int(steps_seconds(plan.budget_seconds, plan.evals - 1, plan.eval_seconds, plan.rung_cooldown,
                             plan.branch_evals) / per_update)
    for u in range(most, least, -1):
        if u * per_update + off_steps_seconds(plan, u, per_update) <= plan.budget_seconds:
            return u
    return least


def largest_batch(plan: Plan) -> int:
    """The largest effective batch that leaves a trial ``MIN_UPDATES`` updates of its budget."""
    if plan.budget_seconds is None or not plan.step_times:
        return max(1, plan.budget_samples // MIN_UPDATES)
    left = plan.steps_seconds()  # what the updates may spend

    def fits(b: int) -> bool:  # split as evenly as the largest micro-batch allows (a cap, not a plan)
        micro = min(b, plan.max_micro)
        return left / plan.update_seconds(micro, -(-b // micro)) >= MIN_UPDATES  # type: ignore[operator,operand]

    if not fits(1):
        return 1
    lo, hi = 1, 2
    while fits(hi) and hi < 1 << 24:
        lo, hi = hi, hi * 2
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if fits(mid) else (lo, mid)
    return lo


def effective_batch(plan: Plan, values: dict[str, Any]) -> int:
    if "batch" in values:
        return int(values["batch"])
    return int(values.get("batch_size") or plan.task_batch) * int(values.get("accumulation_steps") or 1)


def trial_config(plan: Plan, params: dict[str, Any], seed: Optional[int] = None) -> TrialConfig:
    """A trial's params (with the space's fixed entries) -> the run it trains (at ``seed``, default the plan's)."""
    values = {**plan.fixed, **params}
    task_cfg = {k[5:]: v for k, v in values.items() if k.startswith("task.")}
    train_cfg = {k: v for k, v in values.items() if not k.startswith("task.") and k not in ("batch", "batch_size",
                                                                                       "accumulation_steps")}
    batch = effective_batch(plan, values)
    if "batch" in values or int(values.get("batch_size") or plan.task_batch) > plan.max_micro:
        micro, k = split_batch(batch, plan.max_micro)
    else:
        micro, k = int(values.get("batch_size") or plan.task_batch), int(values.get("accumulation_steps") or 1)
    per_update = plan.update_seconds(micro, k)
    # A budget in device time pays for the trial's evaluations (and rung branches) first, the updates with the rest.
    updates = updates_for(plan.budget_samples, batch, plan.steps_seconds(), per_update)
    if plan.budget_seconds is not None and per_update and plan.eval_seconds:
        updates = _fitting_updates(plan, per_update, updates)
    if "lr" in train_cfg and plan.ref_batch:
        train_cfg["lr"] = rescale_lr(float(train_cfg["lr"]), plan.ref_batch, batch, plan.lr_rule)
    train_cfg.update(batch_size=micro, accumulation_steps=k, max_steps=updates,
                     eval_every=max(1, updates // plan.evals), seed=plan.seed if seed is None else seed,
                     device=plan.device,
                     eval_batch_size=plan.eval_batch_size, eval_batches=plan.eval_batches)
    return TrialConfig(train_cfg, task_cfg, eval_samples=plan.budget_samples // plan.evals, objective=plan.objective,
                       direction=plan.direction,
                       predicted_seconds=per_update * updates + off_steps_seconds(plan, updates, per_update)
                       if per_update else None,
                       rung_cooldown=plan.rung_cooldown, branch_evals=tuple(plan.branch_evals))


def _mid(dist: Any) -> Any:
    import optuna.distributions as d

    if isinstance(dist, d.FloatDistribution):
        return float(math.sqrt(dist.low * dist.high) if dist.log else (dist.low + dist.high) / 2)
    if isinstance(dist, d.IntDistribution):
        return int(dist.low + round((dist.high - dist.low) / 2 / dist.step) * dist.step)
    return dist.choices[0]


def nearest_choice(choices: Any, target: float) -> Any:
    """The choice nearest ``target`` on a log scale."""
    return min(choices, key=lambda b: abs(math.log(b) - math.log(target)))


# The design that replaces TPE's random start-up trials, as (LR, batch multiple) around the probes'
# answer. The seed trial (first) is the suggestion itself; a third and three times it bracket the
# suggestion's error, and under a fixed sample budget a smaller batch buys more updates
# (benchmarks/data/constants_history.md).
AROUND = ((1.0, 1.0), (1 / 3, 1.0), (3.0, 1.0), (1.0, 0.5), (1.0, 0.25))
# Time to quality, under a budget in device time only: where the probe's timed steps say a step of twice
# the batch costs well under twice the time (the device is not saturated), the last point tries twice the batch:
# the same samples in less device time, and below the critical batch no more samples for the same
# loss (McCandlish et al., 2018). On a saturated device the smaller batch's extra updates are the
# better bet (benchmarks/data/constants_history.md).
LARGER = (1.0, 2.0)
# A suggestion this many times from the task's own LR is not trusted alone: the design tries both.
FAR = 10.0
# Without an LR to trust (no range test, or one that saw no clear descent), around the task's
# own LR, wider: its direction is unknown.
WIDE = ((1.0, 1.0), (3.0, 1.0), (1 / 3, 1.0), (10.0, 1.0), (1 / 10, 1.0))
# Without either: points over the LR range on the log axis (0 = its low end, 1 = its high
# end), middle first.
SPREAD = ((0.5, 1.0), (0.75, 1.0), (0.25, 1.0), (0.75, 0.5), (0.9, 1.0))


def _inside(dist: Any, value: Any) -> Any:
    """``value`` clipped into ``dist`` (a choice it offers, for a categorical); None when it has no such value."""
    import optuna.distributions as d

    if value is None:
        return None
    if isinstance(dist, d.CategoricalDistribution):
        return value if value in dist.choices else None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    v = min(max(value, dist.low), dist.high)
    return int(round(v)) if isinstance(dist, d.IntDistribution) else float(v)


def initial_design(dists: dict[str, Any], lr: Optional[float], batch: Optional[float], n: int,
                   recipe: Optional[dict[str, Any]] = None, larger_batch: bool = False,
                   interval: Optional[tuple[float, float]] = None) -> list[dict[str, Any]]:
    """Up to ``n`` params: the seed trial, then steps around the range test's ``lr``.

    The seed trial is ``lr`` itself (see ``AROUND``) at ``batch`` and, elsewhere, the task's own
    ``recipe`` (its weight decay, warmup, schedule: what the user would train with; the space
    widens to hold what the user chose, so this clips only tunekit's own defaults and a warmup in
    updates), or the space's middle where the recipe says nothing. With ``lr`` None,
    the design centres on the recipe's LR, wider; without that either, it spreads over the
    space's log range. ``larger_batch``: the last point tries twice the batch (``LARGER``),
    not a quarter. ``interval``: the range test's (low, high) for the best peak LR, around ``lr``
    (:attr:`~tunekit.results.LRFindResult.interval`): the two points that bracket the suggestion's
    error are its ends, not a third and three times it. Duplicates are dropped.
    """
    recipe = recipe or {}
    steps = (*AROUND[:-1], LARGER) if larger_batch else AROUND
    if lr is not None and interval is not None and interval[0] < lr < interval[1]:
        steps = (steps[0], (interval[0] / lr, 1.0), (interval[1] / lr, 1.0), *steps[3:])
    own = float(recipe["lr"]) if recipe.get("lr") else None
    if lr is None and own:
        lr, steps = own, WIDE
    elif lr is not None and own and max(lr / own, own / lr) > FAR:
        # The range test and the task's own recipe disagree by more than the range test's usual
        # error: the last point tries the recipe's LR instead.
        steps = (*steps[:max(0, n) - 1], (own / lr, 1.0))
    out: list[dict[str, Any]] = []
    for lr_at, batch_mult in (steps if lr is not None else SPREAD)[:max(0, n)]:
        params: dict[str, Any] = {}
        for name, dist in dists.items():
            if name == "lr" and lr is not None and hasattr(dist, "choices"):  # a categorical LR: its nearest choice
                params[name] = nearest_choice(dist.choices, lr * lr_at)
            elif name == "lr" and lr is not None:
                params[name] = float(min(max(lr * lr_at, dist.low), dist.high))
            elif name == "lr" and getattr(dist, "log", False):
                params[name] = float(dist.low * (dist.high / dist.low) ** lr_at)
            elif name in ("batch", "batch_size") and batch is not None and hasattr(dist, "choices"):
                params[name] = nearest_choice(dist.choices, batch * batch_mult)
            else:
                own = _inside(dist, recipe.get(name))
                params[name] = own if own is not None else _mid(dist)
        if params not in out:
            out.append(params)
    return out
