"""The search: plan, study, rungs, one trial path, and the backends that run trials.

- :mod:`.run`: :func:`search`, the orchestration;
- :mod:`.budget`: a trial's budget in samples, tokens, epochs or updates;
- :mod:`.plan`: params to a trial's run (batch split, LR rescaling), pure;
- :mod:`.study`: storage, resume, sampler, reading trials back;
- :mod:`.rungs`: successive halving's rungs, in samples;
- :mod:`.trial`: one trial's run and how its outcome is recorded;
- :mod:`.local`, :mod:`.ray`: the backends;
- its result, :class:`~tunekit.results.SearchResult`, lives with the others in :mod:`tunekit.results`.
"""

from .budget import Budget, parse_budget
from ..results import SearchResult, write_report
from .run import search
from .study import make_storage
from .service import create_study, join_study, study_result
from .service import reap as reap_study

__all__ = ["search", "SearchResult", "write_report", "make_storage", "Budget", "parse_budget", "create_study",
           "join_study", "reap_study", "study_result"]
