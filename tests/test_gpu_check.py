"""benchmarks/gpu_check.py skips cleanly where there is no CUDA device."""

import subprocess
import sys

import pytest
import torch

from .tasks import ROOT


@pytest.mark.slow  # a subprocess
@pytest.mark.skipif(torch.cuda.is_available(), reason="with a GPU the script runs its checks: run it by hand")
def test_gpu_check_skips_without_cuda() -> None:
    r = subprocess.run([sys.executable, "-m", "benchmarks.gpu_check"], capture_output=True, text=True,
                       timeout=300, cwd=ROOT)
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.strip().splitlines()[-1] == "SKIP  no CUDA device: nothing to check here"
