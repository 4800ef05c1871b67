import os

os.environ.setdefault("MPLBACKEND", "Agg")

import pytest
import torch

# Small models, fixed seeds, one thread: fast and deterministic on 2 cores.
torch.set_num_threads(1)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)
