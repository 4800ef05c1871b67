"""What tunekit's functions return: results that save to JSON, load back and plot themselves.

Nothing here imports training code (torch, optuna, ray): ``tunekit report`` and a notebook
that loads a saved result stay quick. Every result's ``plot(ax=None)`` draws on one Axes and
returns it; ``figure()`` is what a notebook shows.
"""

from ._base import Result, write_file
from ._doctor import DoctorResult, Finding
from ._lr_find import LRFindResult
from ._probe import ProbeResult
from ._search import SearchResult, write_report
from ._train import TrainResult

__all__ = ["Result", "write_file", "DoctorResult", "Finding", "LRFindResult", "ProbeResult", "SearchResult", "TrainResult", "write_report"]
