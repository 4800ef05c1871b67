"""The sampler after the design: the LR drawn near the best trial so far, early; Optuna's TPE later.

Why: after a five-trial design, TPE's estimators still carry the LR range's flat prior over four decades
or more, so its first proposals go to the range's ends and are pruned at the first rung. First, where
the best finished trial's LR is the highest (lowest) that finished and nothing was tried beyond it, the
next trial steps :data:`BRACKET` times past it: the results point that way. Then PriorBand's idea (Mallik
et al., 2023: early trials from the prior and around the incumbent, leaning on the data as it accrues) in
its smallest form: the k-th trial after the design, with chance ``1 - k / horizon``, draws its LR from a
log-normal of sd :data:`LR_PRIOR_SD` decades around the best finished trial's (the seed trial's before
any finished); otherwise, and for every other parameter, TPE proposes, and learns from these trials too.

The draw depends only on the sampler's seed, the trial's number and the trials finished before it, so a
seeded one-process search proposes the same trials twice. Imported where a sampler is made (it imports
optuna). Measured in benchmarks/data/corpus_search_report.txt.
"""

from __future__ import annotations

import math
from typing import Any, Optional, Sequence

import numpy as np
import optuna
from optuna.distributions import FloatDistribution
from optuna.trial import TrialState

from tunekit.objective import Objective

__all__ = ["LR_PRIOR_SD", "BRACKET", "GuidedSampler", "prior_share", "incumbent", "bracket_step"]

# The sd, in decades, of the LR drawn around the incumbent: the LR suggestion's own error over the
# corpus, not fitted on the search's benchmark (benchmarks/data/constants_history.md).
LR_PRIOR_SD = 0.5


# The step past an unbracketed best: the design's own (a third and three times the suggestion).
BRACKET = 3.0


def prior_share(k: int, horizon: int) -> float:
    """The chance that the k-th trial after the design (k from 0) draws its LR near the incumbent."""
    return max(0.0, 1.0 - k / max(1, horizon))


class GuidedSampler(optuna.samplers.BaseSampler):
    """``base`` (a TPESampler), with the LR parameter ``param`` drawn near the incumbent for the
    ``horizon`` trials after the ``design`` queued ones, with a share that falls from 1 to 0."""

    def __init__(self, base: Any, param: str, design: int, horizon: int, seed: int, sd: float = LR_PRIOR_SD) -> None:
        self.base, self.param, self.design, self.horizon = base, param, design, horizon
        self.seed, self.sd = int(seed), float(sd)

    # Everything but the LR draw is the base sampler's.
    def infer_relative_search_space(self, study: Any, trial: Any) -> dict[str, Any]:
        space = dict(self.base.infer_relative_search_space(study, trial))
        space.pop(self.param, None)  # the LR is always decided in sample_independent
        return space

    def sample_relative(self, study: Any, trial: Any, search_space: dict[str, Any]) -> dict[str, Any]:
        return dict(self.base.sample_relative(study, trial, search_space))

    def before_trial(self, study: Any, trial: Any) -> None:
        self.base.before_trial(study, trial)

    def after_trial(self, study: Any, trial: Any, state: Any, values: Optional[Sequence[float]]) -> None:
        self.base.after_trial(study, trial, state, values)

    def reseed_rng(self) -> None:
        self.base.reseed_rng()

    def sample_independent(self, study: Any, trial: Any, param_name: str, param_distribution: Any) -> Any:
        dist = param_distribution
        if param_name != self.param or not isinstance(dist, FloatDistribution) or not dist.log:
            return self.base.sample_independent(study, trial, param_name, dist)
        earlier = [t for t in study.get_trials(deepcopy=False) if t.number < trial.number and self.param in t.params]
        tried = [float(t.params[self.param]) for t in earlier]
        objective = Objective.of_direction(study.direction)
        done = [(float(t.params[self.param]), objective.sign * float(t.value)) for t in earlier
                if t.state == TrialState.COMPLETE and t.value is not None]
        centre = incumbent(objective.best(earlier), self.param, tried)
        if trial.number >= self.design and centre is not None:
            step = bracket_step(centre, done, tried)
            if step is not None and dist.low <= step <= dist.high:
                return step
        rng = np.random.default_rng([self.seed, trial.number])
        if centre is None or rng.random() >= prior_share(trial.number - self.design, self.horizon):
            return self.base.sample_independent(study, trial, param_name, dist)
        low, high = math.log10(dist.low), math.log10(dist.high)
        x = float(np.clip(math.log10(centre) + self.sd * rng.standard_normal(), low, high))
        return float(min(max(10**x, dist.low), dist.high))


def incumbent(best: Any, param: str, tried: list[float]) -> Optional[float]:
    """The LR ``param`` of the best finished trial (``best``: :meth:`Objective.best`'s); before any finished,
    the first LR tried (the seed trial's)."""
    if best is not None:
        return float(best.params[param])
    return tried[0] if tried else None


def bracket_step(best: float, done: list[tuple[float, float]], tried: list[float]) -> Optional[float]:
    """One :data:`BRACKET` step past ``best`` where it is the highest (lowest) LR that finished and nothing
    was tried beyond it: the results point that way, so the next trial goes there before any draw (a
    suggestion 10x off is walked to in a few trials). None with fewer than two finished."""
    if len(done) < 2:
        return None
    lrs = [lr for lr, _ in done]
    if best >= max(lrs) and not any(x > best * BRACKET**0.5 for x in tried):
        return best * BRACKET
    if best <= min(lrs) and not any(x < best / BRACKET**0.5 for x in tried):
        return best / BRACKET
    return None
