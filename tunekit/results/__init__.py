"""What tunekit's functions return: results that save to JSON, load back and plot themselves.

Nothing here imports training code (torch, optuna, ray): ``tunekit report`` and a notebook
that loads a saved result stay quick. Every result's ``plot(ax=None)`` draws on one Axes and
returns it; ``figure()`` is what a notebook shows.
"""

from tunekit.results.base import Result, write_file
from tunekit.results.doctor import DoctorResult, Finding
from tunekit.results.lr_find import LRFindResult
from tunekit.results.probe import ProbeResult
from tunekit.results.search import SearchResult, write_report
from tunekit.results.train import TrainResult

__all__ = ["Result", "write_file", "DoctorResult", "Finding", "LRFindResult", "ProbeResult", "SearchResult", "TrainResult", "write_report"]
