"""The search: plan, study, rungs, one trial path, and the backends that run trials.

- :mod:`.run`: :func:`search`, the orchestration;
- :mod:`.entries`: the searches beside it: ``create_study``, ``join_study``, ``search_own``;
- :mod:`.budget`: a trial's budget in samples, tokens, epochs or updates;
- :mod:`.plan`: params to a trial's run (batch split, LR rescaling), pure;
- :mod:`.study`: storage, resume, sampler, the stored plan, reading trials back;
- :mod:`.guided`: the sampler after the design (the LR near the best trial early, TPE later);
- :mod:`.worker_study`: the study as one worker opens it (sampler seed, pruner, plan, design);
- :mod:`.keys`: every study and trial attribute key, defined once;
- :mod:`.rungs`: successive halving's rungs, in samples;
- :mod:`.trial`: one trial's run and how its outcome is recorded;
- :mod:`.backends`: where trials run (:mod:`.backends.local`, :mod:`.backends.ray`), behind one seam;
- :mod:`.shared`: one study shared by many workers;
- its result, :class:`~tunekit.results.SearchResult`, lives with the others in :mod:`tunekit.results`.
"""

from __future__ import annotations

import importlib
from typing import Any

# name -> the module that defines it, imported on first use: the CLI reads .options to build its parser
# without importing the search's machinery.
_LAZY = {
    "search": "tunekit.hpsearch.run", "search_own": "tunekit.hpsearch.entries", "SearchSettings": "tunekit.hpsearch.settings",
    "SearchResult": "tunekit.results", "write_report": "tunekit.results", "make_storage": "tunekit.hpsearch.study",
    "Budget": "tunekit.hpsearch.budget", "parse_budget": "tunekit.hpsearch.budget",
    **{name: "tunekit.hpsearch.entries" for name in ("create_study", "join_study")},
    **{name: "tunekit.hpsearch.shared.api" for name in ("reap_study", "delete_study", "study_result")},
    **{name: "tunekit.hpsearch.options" for name in ("TPE", "RandomSampler", "Halving", "NoPruning", "Local", "Ray",
                                                      "Study", "SharedStudy", "ProbeSettings")},
}
__all__ = list(_LAZY)


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'tunekit.hpsearch' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
