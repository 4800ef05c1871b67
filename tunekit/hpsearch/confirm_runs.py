"""Confirmation runs queued in the study, once, when its search trials are done (:class:`~.options.Confirm`).

Once the study holds ``trials`` finished trials of its own (confirmation runs not counted), its ``top``
best complete ones (of distinct params) are noted on the study (:data:`~tunekit.hpsearch.keys.CONFIRM_KEY`) and each is queued
``seeds`` times with its params (:mod:`.confirm` says at which seeds). The study then holds as many
trials more: a backend runs until :func:`goal` are finished. Queued trials are the study's, so a resume
goes on with those still waiting, a killed one is re-run like any interrupted trial, and any worker of a
shared study takes them; a worker that finds them queued queues none (one that raced another is told its
copies are surplus: :func:`~tunekit.hpsearch.study.excluded`).
"""

from __future__ import annotations

# Imported where used, not at the top: optuna; importing this module does not pay for them.
import json
from typing import Any

from tunekit.hpsearch.confirm import confirm_key
from tunekit.hpsearch.keys import CONFIRM_KEY, CONFIRM_OF, REPEAT
from tunekit.hpsearch.options import Confirm
from tunekit.hpsearch.study import enqueue, excluded
from tunekit.objective import Objective

__all__ = ["queue_confirmations", "goal", "expected", "search_finished"]


def search_finished(study: Any) -> int:
    """The study's finished trials that count, confirmation runs left out."""
    skip = excluded(study)
    return sum(1 for t in study.get_trials(deepcopy=False) if t.state.is_finished() and t.number not in skip
               and confirm_key(t.user_attrs) is None)


def queue_confirmations(study: Any, confirm: Confirm, trials: int) -> None:
    """Once the study's search holds ``trials`` finished trials: its ``confirm.top`` best complete ones, each
    queued ``confirm.seeds`` times (only the runs not in the study yet: a kill during the queueing, or a
    resume, queues the rest and never one twice)."""
    if confirm.top <= 0:  # off here: runs another process queued still run (goal counts them), none is added
        return
    chosen = study.user_attrs.get(CONFIRM_KEY)
    if chosen is None:
        if search_finished(study) < trials:
            return
        skip = excluded(study)
        done = [t for t in study.get_trials(deepcopy=False) if t.state.name == "COMPLETE" and t.number not in skip
                and confirm_key(t.user_attrs) is None and t.value is not None]
        sign = Objective.of_direction(study.direction).sign
        chosen, tried = [], set()
        for t in sorted(done, key=lambda t: (sign * t.value, t.number)):  # each configuration once (a categorical
            params = json.dumps(t.params, sort_keys=True, default=str)  # space draws some twice, at the same seed)
            if params not in tried and len(chosen) < confirm.top:
                chosen.append(t.number)
                tried.add(params)
        study.set_user_attr(CONFIRM_KEY, chosen)
    if not chosen:
        return
    trials_now = study.get_trials(deepcopy=False)
    have = {k for t in trials_now if (k := confirm_key(t.user_attrs)) is not None}
    params = {t.number: dict(t.params) for t in trials_now}
    for number in chosen:
        for repeat in range(confirm.seeds):
            if (number, repeat) not in have:
                enqueue(study, params[number], extra={CONFIRM_OF: number, REPEAT: repeat})


def goal(study: Any, trials: int) -> int:
    """The finished trials the study should hold: the search's ``trials`` and each confirmation run queued."""
    skip = excluded(study)
    return trials + len({k for t in study.get_trials(deepcopy=False) if t.number not in skip
                         and (k := confirm_key(t.user_attrs)) is not None})


def expected(study: Any, trials: int, confirm: Confirm) -> int:
    """What :func:`goal` will be once the confirmation runs are queued (for a progress bar's length)."""
    if CONFIRM_KEY in study.user_attrs or confirm.top <= 0:
        return goal(study, trials)
    return trials + confirm.top * confirm.seeds
