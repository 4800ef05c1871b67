import os

import secrets

os.environ.setdefault("MPLBACKEND", "Agg")
# Ray (2.60) with token auth writes ~/.ray/auth_token unless a token is given: the tests'
# Ray instances (and the `ray start` they run) share one of their own, and write nothing.
os.environ.setdefault("RAY_AUTH_TOKEN", secrets.token_hex(32))

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
