"""The search: plan, study, rungs, one trial path, and the backends that run trials.

- :mod:`.run`: :func:`search`, the orchestration;
- :mod:`.budget`: a trial's budget in samples, tokens, epochs or updates;
- :mod:`.plan`: params to a trial's run (batch split, LR rescaling), pure;
- :mod:`.study`: storage, resume, sampler, reading trials back;
- :mod:`.rungs`: successive halving's rungs, in samples;
- :mod:`.trial`: one trial's run and how its outcome is recorded;
- :mod:`.backends`: where trials run (:mod:`.backends.local`, :mod:`.backends.ray`), behind one seam;
- :mod:`.shared`: one study shared by many workers;
- its result, :class:`~tunekit.results.SearchResult`, lives with the others in :mod:`tunekit.results`.
"""

from tunekit.hpsearch.budget import Budget, parse_budget
from tunekit.results import SearchResult, write_report
from tunekit.hpsearch.run import search
from tunekit.hpsearch.study import make_storage
from tunekit.hpsearch.settings import SearchSettings
from tunekit.hpsearch.shared.api import create_study, delete_study, join_study, reap_study, study_result

__all__ = ["search", "SearchSettings", "SearchResult", "write_report", "make_storage", "Budget", "parse_budget", "create_study",
           "join_study", "reap_study", "delete_study", "study_result"]
