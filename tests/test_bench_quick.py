"""Every benchmark's --quick mode: its real code path on the smallest setting, in seconds, run as the
Makefile's bench-quick runs it (python -m benchmarks.NAME from the repository's root). Each must exit 0,
print its report with the harness's header (benchmarks/harness/report.py), and leave benchmarks/data alone:
a quick run's report goes to a temporary folder."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from .tasks import ROOT

# Benchmark code, minutes of it: `make test-bench` runs this file; make test and make test-fast leave it out.
pytestmark = pytest.mark.bench

DATA = ROOT / "benchmarks" / "data"
# Quick runs that need nothing beyond their own process (and its threads).
# (probe_accuracy's children measure their own resident memory, which other processes do not move.)
QUICK = ["doctor_zoo", "step_overhead", "their_tuners", "search_efficiency", "lr_batch", "corpus_lr", "corpus_search",
         "probe_accuracy", "keep_cost", "corpus_refine", "lr_carry", "lr_spread", "rung_fairness", "lr_interval"]
# Quick runs that start a Ray instance, a PostgreSQL server and several worker processes. They would
# need the machine to themselves (tests/conftest.py marks them serial) and add a minute to CI's serial
# phase, whose Ray and shared-study tests (tests/test_ray*.py, tests/test_shared.py) already run the
# same backends and workers; so they run with `pytest -m bench_serial` and `make bench-quick`, not in
# `make test`.
QUICK_SERIAL = ["ray_overhead", "shared_study", "shared_study_load"]


def bench(*args: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, OMP_NUM_THREADS="1", MPLBACKEND="Agg")
    return subprocess.run([sys.executable, "-m", *args], capture_output=True, text=True, timeout=300, cwd=ROOT,
                          env=env)


def check_quick(name: str) -> None:
    r = bench(f"benchmarks.{name}", "--quick")
    assert r.returncode == 0, f"stdout:\n{r.stdout[-3000:]}\nstderr:\n{r.stderr[-3000:]}"
    lines = r.stdout.splitlines()
    assert f"command: python -m benchmarks.{name} --quick" in lines, r.stdout[-3000:]
    assert any(line.startswith("# ") and line.endswith("(quick mode: not a figure to quote)") for line in lines)
    written = [line for line in lines if line.startswith("(report written to ")]
    assert written, r.stdout[-3000:]
    path = Path(written[-1].removeprefix("(report written to ").removesuffix(")"))
    # Not benchmarks/data/NAME_report.txt: a quick run never replaces a full run's report.
    assert path.is_file() and DATA not in path.parents and ROOT not in path.parents, path


@pytest.mark.slow  # a subprocess that trains
@pytest.mark.parametrize("name", QUICK)
def test_bench_quick(name: str) -> None:
    check_quick(name)


@pytest.mark.bench_serial  # Ray, PostgreSQL, several processes: not in make test (above)
@pytest.mark.slow
@pytest.mark.parametrize("name", QUICK_SERIAL)
def test_bench_quick_serial(name: str) -> None:
    check_quick(name)


@pytest.mark.slow  # a subprocess
def test_corpus_list() -> None:
    r = bench("benchmarks.corpus", "--list")
    assert r.returncode == 0, r.stderr[-3000:]
    assert "tasks in" in r.stdout, r.stdout[-3000:]


@pytest.mark.slow  # the whole zoo (the benchmark's full set-ups, in this process): minutes on 2 cores
def test_the_doctor_zoo_finds_every_fault_and_passes_every_healthy_setup(capsys: pytest.CaptureFixture[str]) -> None:
    from benchmarks.doctor_zoo import SETUPS, score  # the zoo's table and score, without writing its report

    ok = score(SETUPS)
    last = capsys.readouterr().out.strip().splitlines()[-1]
    assert ok, last
    assert "0 failures" in last and "(100%)" in last


@pytest.mark.slow  # a subprocess
@pytest.mark.skipif(torch.cuda.is_available(), reason="with a GPU the script runs its checks: run it by hand")
def test_gpu_check_skips_without_cuda() -> None:
    """benchmarks/gpu_check.py skips cleanly where there is no CUDA device."""
    r = bench("benchmarks.gpu_check")
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.strip().splitlines()[-1] == "SKIP  no CUDA device: nothing to check here"
