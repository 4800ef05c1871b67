"""Confirmation runs as the study holds them: which trial each repeats, at which seed, and their runs read back.

A confirmation run is an enqueued trial with the params of the trial it confirms and two attributes,
:data:`~tunekit.hpsearch.keys.CONFIRM_OF` and :data:`~tunekit.hpsearch.keys.REPEAT`; its seed comes from
the study's and the repeat (:func:`repeat_seed`), so it differs from the study's and between repeats, and
the same study seed gives the same runs. Pure: the queueing is :mod:`.confirm_runs`'s.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, Optional

from tunekit.hpsearch.keys import CONFIRM_OF, DIVERGED, REPEAT, WEIGHTS
from tunekit.results.confirmation import Run

__all__ = ["SEED_STEP", "repeat_seed", "seed_of", "is_confirmation", "confirm_key", "rerun_attrs", "runs_of"]

SEED_STEP = 1000  # repeat k trains at the study's seed + SEED_STEP * (k + 1): never the study's own


def repeat_seed(seed: int, repeat: int) -> int:
    """The seed of a configuration's ``repeat``-th confirmation run in a study seeded ``seed``."""
    return int(seed) + SEED_STEP * (int(repeat) + 1)


def seed_of(seed: int, attrs: Optional[Mapping[str, Any]]) -> Optional[int]:
    """The seed a trial with these user attributes trains at instead of the study's, or None (not a repeat)."""
    if not attrs or attrs.get(CONFIRM_OF) is None:
        return None
    return repeat_seed(seed, int(attrs.get(REPEAT) or 0))


def is_confirmation(attrs: Mapping[str, Any]) -> bool:
    return attrs.get(CONFIRM_OF) is not None


def confirm_key(attrs: Mapping[str, Any]) -> Optional[tuple[int, int]]:
    """(the trial it confirms, the repeat), or None for a trial of the search itself."""
    return (int(attrs[CONFIRM_OF]), int(attrs.get(REPEAT) or 0)) if is_confirmation(attrs) else None


def rerun_attrs(attrs: Mapping[str, Any]) -> dict[str, Any]:
    """What a re-run of a trial (interrupted, or its worker stopped) carries over: its confirmation, if it is one."""
    return {k: attrs[k] for k in (CONFIRM_OF, REPEAT) if k in attrs}


def runs_of(trials: Iterable[Any], skip: frozenset[int] | set[int] = frozenset()) -> list[Run]:
    """The finished runs of the confirmed configurations among Optuna ``trials`` (COMPLETE or diverged), the
    originals included; ``skip``: trials that do not count (interrupted, stopped, surplus, duplicates)."""
    trials = [t for t in trials if t.number not in skip]
    of = {int(t.user_attrs[CONFIRM_OF]) for t in trials if is_confirmation(t.user_attrs)}
    out = []
    for t in trials:
        origin = int(t.user_attrs[CONFIRM_OF]) if is_confirmation(t.user_attrs) else t.number
        done = t.state.name == "COMPLETE" and t.value is not None
        if origin in of and (done or t.user_attrs.get(DIVERGED)):
            out.append(Run(t.number, origin, float(t.value) if done else None, bool(t.user_attrs.get(DIVERGED)),
                           t.user_attrs.get(WEIGHTS)))
    return out
