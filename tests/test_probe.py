import copy
import dataclasses
import json
import math
import os
import signal
import warnings
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn
from torch.utils.data import TensorDataset

import tunekit
from tunekit import BatchTarget, Measurement, StepSettings, Task, UsageError, probe
from tunekit.inputs.data import BatchStream
from tunekit.probes.memory_trace import Trace, fit_memory_model, static_bytes, trace_step
from tunekit.probes.noise_scale import noise_scale
from tunekit.probes import clean_heap
from tunekit.probes.batch_probe import split_target
from tunekit.probes.largest_batch import find_largest_batch
from tunekit.probes.largest_batch import MEASURED_IN_CHILD, MEASURED_IN_PROCESS
from tunekit.training.optimizers import rescale_lr
from tunekit.bytesize import parse_bytes
from tunekit.training.step import TrainStep
from tunekit.inputs.task import LossComputer

from .tasks import MLP, classification_task, regression_task
from .tasks import run_cli

CPU = torch.device("cpu")


def linear_stack(dtype: torch.dtype = torch.float32) -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 10)).to(dtype)


def _trace(model: nn.Module, b: int, dtype: torch.dtype = torch.float32, k: int = 1) -> "Trace":
    data = TensorDataset(torch.randn(1024, 32).to(dtype), torch.randint(0, 10, (1024,)))
    compute = LossComputer(nn.CrossEntropyLoss(), None)
    batches = BatchStream(data, b).take(k)
    return trace_step(model, lambda p: torch.optim.AdamW(p, lr=1e-3),
                      lambda m, o: TrainStep(m, o, compute, device=CPU, accumulation_steps=k), batches, CPU)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_static_bytes_are_exact_for_a_linear_stack_under_adamw(dtype: torch.dtype) -> None:
    model = linear_stack(dtype)
    n_params = 32 * 64 + 64 + 64 * 64 + 64 + 64 * 10 + 10
    size = torch.tensor([], dtype=dtype).element_size()
    static = _trace(model, 8, dtype).static
    assert static["params"] == n_params * size
    assert static["grads"] == n_params * size
    # AdamW: exp_avg and exp_avg_sq in the parameter's dtype, and a float32 step counter per tensor.
    assert static["optimizer"] == 2 * n_params * size + 4 * 6
    assert static["buffers"] == 0
    assert static_bytes(model)["params"] == n_params * size


def test_fit_at_two_sizes_predicts_a_third_within_5_percent() -> None:
    model = linear_stack()
    mm = fit_memory_model({b: _trace(model, b) for b in (4, 16)})
    # Small batches: the optimizer phase is the peak; large ones: backward. The fit knows both.
    for b in (8, 128, 1000):
        actual = max(_trace(model, b).peaks.values())
        assert mm.peak(b) == pytest.approx(actual, rel=0.05), b
    # Activations grow with the batch, the static state does not.
    assert mm.phases["forward"].per_sample > 0
    assert mm.largest_batch(mm.peak(100)) == 100


def test_accumulation_keeps_gradients_alive_in_the_trace() -> None:
    model = linear_stack()
    one, two = _trace(model, 16, k=1), _trace(model, 16, k=2)
    # During the second micro-batch's forward the first one's gradients are alive.
    assert two.peaks["forward"] - one.peaks["forward"] >= one.static["grads"] * 0.99


def small_task(n: int = 4096) -> Task:
    g = torch.Generator().manual_seed(0)
    x = torch.randn(n, 8, generator=g)
    y = (x[:, :4]).argmax(1)
    return Task(model=lambda: MLP(8, 16, 4), train_data=TensorDataset(x, y), loss=nn.CrossEntropyLoss(), batch_size=32)


class LinearMemory:
    """A stand-in memory model: peak(b) = fixed + per_sample * b."""

    def __init__(self, fixed: float, per_sample: float) -> None:
        self.fixed, self.per_sample = fixed, per_sample

    def peak(self, b: float) -> float:
        return self.fixed + self.per_sample * b

    def largest_batch(self, budget: float, limit: int = 1 << 24) -> int:
        return max(0, min(limit, int((budget - self.fixed) // self.per_sample)))


def secant_refit(prior: LinearMemory):
    """Refit as the probe does: one point scales the per-sample part, two draw the line through them."""
    def refit(measured: dict[int, float]) -> LinearMemory:
        pts = sorted(measured.items())
        if not pts:
            return prior
        if len(pts) == 1:
            (b, p), = pts
            return LinearMemory(prior.fixed, (p - prior.fixed) / b)
        (b1, p1), (b2, p2) = pts[-2:]
        slope = (p2 - p1) / (b2 - b1)
        return LinearMemory(p1 - slope * b1, slope)
    return refit


def test_oom_path_with_a_fake_out_of_memory_error() -> None:
    """The search on a fake step: OOM above 3000 samples, the prediction far too high."""
    attempts: list[int] = []
    freed: list[int] = []

    def run_step(b: int) -> None:
        attempts.append(b)
        if b > 3000:
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB (fake)")
        return None  # unmeasured: the step ran, which is all a device without a peak counter says

    prior = LinearMemory(0.0, 1.0)
    best, tried, _ = find_largest_batch(run_step, secant_refit(prior), 4096, 4096, free=lambda: freed.append(1))
    # Predicted the whole dataset, shrank by 20% after the first OOM, then halved.
    assert [(t["batch"], t["ok"]) for t in tried] == [(4096, False), (3276, False), (1638, True)]
    assert best == 1638 and attempts == [4096, 3276, 1638] and len(freed) == 2


def test_the_search_refits_on_a_measurement_and_confirms_again() -> None:
    """A kernel workspace the prediction missed: 4x the memory per sample. The first step sees it,
    the refitted model lands on the true largest batch, and the second step confirms it."""
    true = LinearMemory(100.0, 4.0)
    best, tried, model = find_largest_batch(lambda b: true.peak(b), secant_refit(LinearMemory(100.0, 1.0)), 4100, 10**6)
    assert [t["batch"] for t in tried] == [4000, 1000] and best == 1000 == true.largest_batch(4100)
    assert not tried[0]["ok"] and tried[1]["ok"] and model.peak(1000) == pytest.approx(4100)
    # Over-predicted 2x instead: the first batch fits, the one-point refit overshoots a little
    # (measured over, so not answered), and the next try is 1.5% below that, within 0.3% of the
    # true largest; the refit after it is too little larger to be worth a step.
    half = LinearMemory(50.0, 2.0)
    best, tried, _ = find_largest_batch(half.peak, secant_refit(true), 4100, 10**6)
    assert [(t["batch"], t["ok"]) for t in tried] == [(1000, True), (2051, False), (2020, True)]
    assert best == 2020 and half.largest_batch(4100) == 2025


def test_the_search_reaches_the_dataset_when_everything_fits() -> None:
    """Over-predicted, capped by the dataset: the refit goes up to the whole dataset, not 1.5% short of it."""
    best, tried, _ = find_largest_batch(lambda b: 0.5 * b, secant_refit(LinearMemory(0.0, 1.0)), 1000, 1500)
    assert [t["batch"] for t in tried] == [1000, 1500] and best == 1500


def test_the_search_never_answers_a_batch_that_was_measured_over() -> None:
    """Memory that jumps at large batches (a kernel switching algorithms): every answer ran within the budget."""
    def peak(b: int) -> float:
        return 10.0 * b + (30_000.0 if b > 700 else 0.0)

    best, tried, _ = find_largest_batch(peak, secant_refit(LinearMemory(0.0, 10.0)), 10_000, 10**6)
    assert peak(best) <= 10_000 and best >= 0.85 * 700  # the secant steps creep up on a jump
    assert all(t["peak_bytes"] <= 10_000 for t in tried if t["ok"]) and len(tried) <= 6


class FailsAbove(MLP):
    """An MLP whose real forward fails above a batch size: with an out-of-memory error, or another one.
    The trace's fake tensors (batches 4-16) pass; the failure happens wherever the real step runs,
    in the probe's measuring child process or in this one."""

    def __init__(self, above: int, error: str) -> None:
        super().__init__(8, 16, 4)
        self.above, self.error = above, error

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.shape[0] > self.above:
            if self.error == "oom":
                raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB (fake)")
            raise RuntimeError("out of memory?  no: a bug")  # string matching would misread this
        return super().forward(x)


@pytest.mark.parametrize("where", [pytest.param("child", marks=pytest.mark.slow), "process"])  # child: a measuring process
def test_an_end_to_end_probe_with_a_fake_out_of_memory_error(where: str, monkeypatch: pytest.MonkeyPatch) -> None:
    if where == "process":  # where no child can measure (not Linux with glibc): the steps run here
        monkeypatch.setattr(clean_heap, "available", lambda: "not here")
    torch.manual_seed(0)
    model = FailsAbove(3000, "oom")
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    data = small_task().train_data
    model.eval()
    before = copy.deepcopy(model.state_dict())
    rng = torch.get_rng_state()
    # A budget the step could fill (under 8x the traced peak at the whole data's batch), so the steps are measured.
    kw = dict(memory_budget="4MiB", step=StepSettings(device="cpu"),
              measure=Measurement(throughput_points=1, noise_repeats=0))
    r1 = probe(model, data, nn.CrossEntropyLoss(), opt, **kw)
    assert [(t["batch"], t["ok"]) for t in r1.tried][:2] == [(4096, False), (3276, False)]
    # Then half, 1638, ran; measured below its prediction, the refit tries just under the OOM and stops there.
    # (Measured in this process, after whatever other tests did here, a reading may land over the budget less
    # its resolution: the answer is then a step below half, never above it, one real step more.)
    largest_ok = max(t["batch"] for t in r1.tried if t["ok"])
    assert r1.max_batch == largest_ok and r1.real_steps <= (5 if where == "child" else 6)
    assert largest_ok == 1638 if where == "child" else 0.8 * 1638 <= largest_ok <= 1638
    assert r1.memory_measured.startswith(MEASURED_IN_CHILD if where == "child" else MEASURED_IN_PROCESS)
    assert not model.training
    assert all(torch.equal(v, before[k]) for k, v in model.state_dict().items())
    assert opt.state_dict()["state"] == {}
    assert torch.equal(torch.get_rng_state(), rng)
    # Nothing leaked: a second probe in the same process gives the same answer (measured in this process, the
    # readings near the budget move with the heap the first probe left: an answer within the same bounds).
    r2 = probe(model, data, nn.CrossEntropyLoss(), opt, **kw)
    if where == "child":
        assert [t["batch"] for t in r2.tried] == [t["batch"] for t in r1.tried] and r2.max_batch == r1.max_batch
    else:
        assert [(t["batch"], t["ok"]) for t in r2.tried][:2] == [(4096, False), (3276, False)]
        assert 0.8 * 1638 <= r2.max_batch <= 1638


def test_the_cpu_allocators_out_of_memory_is_an_oom_for_the_search_as_for_the_measuring_child() -> None:
    """One answer: the CPU allocator's plain RuntimeError and MemoryError are out of memory wherever a
    step runs (the search steps back from that batch); any other RuntimeError is the user's."""
    from tunekit.training.memory import is_oom

    assert is_oom(torch.OutOfMemoryError("CUDA out of memory")) and is_oom(MemoryError())
    assert is_oom(RuntimeError("[enforce fail at alloc_cpu.cpp:117] . DefaultCPUAllocator: can't allocate memory: "
                               "you tried to allocate 4294967296 bytes."))
    assert not is_oom(RuntimeError("mat1 and mat2 shapes cannot be multiplied"))
    assert clean_heap.is_oom is is_oom

    def run_step(b: int) -> None:
        if b > 3000:
            raise RuntimeError("DefaultCPUAllocator: can't allocate memory: you tried to allocate 1 bytes.")

    best, tried, _ = find_largest_batch(run_step, secant_refit(LinearMemory(0.0, 1.0)), 4096, 4096, free=lambda: None)
    assert [t["ok"] for t in tried] == [False, False, True] and best == 1638  # 4096, 3276 (20% back), then halved


def test_other_errors_are_not_taken_for_oom() -> None:
    # The real step fails in the measuring child; it is run again here, so the error is the user's own.
    model = FailsAbove(16, "bug")
    with pytest.raises(RuntimeError, match="a bug") as info:
        probe(model, small_task().train_data, nn.CrossEntropyLoss(), memory_budget="4MiB",
              step=StepSettings(device="cpu"), measure=Measurement(noise_repeats=0))
    assert any(entry.name == "forward" for entry in info.traceback)


def test_noise_scale_estimator_on_exact_norms() -> None:
    # E|G_b|^2 = |G|^2 + tr(Sigma)/b with |G|^2 = 2, tr(Sigma) = 60: B_simple = 30.
    small = [2 + 60 / 4] * 5
    big = [2 + 60 / 64] * 5
    ns = noise_scale(small, big, 4, 64)
    assert ns.b_simple == pytest.approx(30)
    assert ns.grad_sq == pytest.approx(2) and ns.trace_sigma == pytest.approx(60)


def test_noise_scale_of_linear_regression_matches_closed_form() -> None:
    # y = x.w* + sigma*eps with x ~ N(0, I_D); at w = w* + d, the per-sample gradient of the
    # squared error is g = 2x(x.d - sigma*eps), so |G|^2 = 4|d|^2 and
    # tr(Sigma) = 4((D+1)|d|^2 + sigma^2 D): B_simple = ((D+1)|d|^2 + sigma^2 D) / |d|^2.
    D, sigma, n = 4, 1.0, 60000
    g = torch.Generator().manual_seed(0)
    x = torch.randn(n, D, generator=g)
    w_star = torch.randn(D, generator=g)
    d = torch.full((D,), 0.25)  # |d|^2 = 0.25
    y = (x @ w_star + sigma * torch.randn(n, generator=g)).unsqueeze(1)
    expected = ((D + 1) * 0.25 + sigma**2 * D) / 0.25  # 21

    def model() -> nn.Module:
        m = nn.Linear(D, 1, bias=False)
        with torch.no_grad():
            m.weight.copy_((w_star + d).unsqueeze(0))
        return m

    task = Task(model=model, train_data=TensorDataset(x, y), loss=nn.MSELoss(), batch_size=8,
                optimizer=lambda p: torch.optim.SGD(p, lr=0.1))
    r = probe(task, memory_budget="1GiB", step=StepSettings(device="cpu"),
              measure=Measurement(throughput_points=1, noise_repeats=300, noise_warmup=0))
    assert r.critical_batch == pytest.approx(expected, rel=0.25)
    lo, hi = r.critical_batch_range
    assert lo < r.critical_batch < hi


def test_splits_and_lr_scaling() -> None:
    model = linear_stack()
    mm = fit_memory_model({b: _trace(model, b) for b in (4, 16)})
    tp = [{"batch": 8, "samples_per_s": 100.0}, {"batch": 32, "samples_per_s": 400.0}, {"batch": 64, "samples_per_s": 420.0}]
    splits = split_target(128, 64, tp, mm)
    assert [(p["micro_batch"], p["accumulation_steps"]) for p in splits][:2] == [(64, 2), (32, 4)]
    assert all(p["micro_batch"] * p["accumulation_steps"] == 128 and p["micro_batch"] <= 64 for p in splits)
    assert (rescale_lr(1e-3, 64, 256, "linear"), rescale_lr(1e-3, 64, 256, "sqrt")) == pytest.approx((4e-3, 2e-3))


@pytest.mark.parametrize("text, value", [("512MiB", 512 * 2**20), ("8GiB", 8 * 2**30), ("2.5GB", 2_500_000_000), ("1e9", 10**9), (1024, 1024)])
def test_parse_size(text: object, value: int) -> None:
    assert parse_bytes(text) == value  # type: ignore[arg-type]


@pytest.mark.parametrize("bad", ["2XB", "-1GiB", "GiB", "0"])
def test_bad_sizes(bad: str) -> None:
    with pytest.raises(UsageError, match="memory size"):
        parse_bytes(bad)


def test_probe_refuses_fixed_batches_and_bad_arguments() -> None:
    batches = [(torch.randn(4, 8), torch.randint(0, 4, (4,)))] * 3
    with pytest.raises(UsageError, match="varies the batch size"):
        probe(MLP(8, 16, 4), batches, nn.CrossEntropyLoss(), step=StepSettings(device="cpu"))
    with pytest.raises(UsageError, match="does not fit even at batch 1"):
        probe(small_task(), memory_budget="1KiB", step=StepSettings(device="cpu"))
    with pytest.raises(UsageError, match="headroom"):
        probe(small_task(), measure=Measurement(headroom=1.0), step=StepSettings(device="cpu"))
    with pytest.raises(UsageError, match="lr_batch must be a positive integer, got 0"):
        probe(small_task(), target=BatchTarget(lr=1e-3, lr_batch=0), step=StepSettings(device="cpu"))


def test_plain_tensor_attributes_are_traced_without_real_copies() -> None:
    class Scaled(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.linear = nn.Linear(8, 4)
            self.scale = torch.tensor(2.0)  # neither a parameter nor a buffer

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.linear(x) * self.scale

    trace = _trace_model(Scaled(), 16)
    assert trace.static["params"] == (8 * 4 + 4) * 4


def _trace_model(model: nn.Module, b: int) -> "Trace":
    data = TensorDataset(torch.randn(64, 8), torch.randint(0, 4, (64,)))
    compute = LossComputer(nn.CrossEntropyLoss(), None)
    return trace_step(model, lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9),
                      lambda m, o: TrainStep(m, o, compute, device=CPU), BatchStream(data, b).take(1), CPU)


def test_probe_result_round_trip_and_plot(tmp_path: Path) -> None:
    r = probe(small_task(512), memory_budget="256MiB", step=StepSettings(device="cpu"),
              measure=Measurement(throughput_points=2, noise_repeats=4, cost_share=0))  # no cap on the cost
    assert r.max_batch == 512  # capped by the dataset
    # Every real update is counted (confirmation, throughput warm-up and timing, noise scale), no fake trace.
    assert r.updates >= r.real_steps + len(r.throughput) * 3 + 2 * 4
    # The knee is one of the timed batches; none where every timing was taken on a busy machine (the rule).
    assert r.knee_batch in [t["batch"] for t in r.throughput if not t.get("busy")] or (
        r.knee_batch is None and all(t.get("busy") for t in r.throughput))
    back = tunekit.ProbeResult.from_json(r.to_json())
    assert back.max_batch == r.max_batch and back.predicted_peak(64) == pytest.approx(r.predicted_peak(64))
    assert back.plot().get_xscale() == "log"
    assert r._repr_png_()[:4] == b"\x89PNG"


def test_a_probe_saved_with_its_plan_loads_and_the_old_names_warn() -> None:
    """A probe.json saved when the splits were its ``plan`` loads silently; ``.plan``/``.plan_reason`` still
    read the splits, with a DeprecationWarning (removed in 0.3.0)."""
    pairs = [{"effective_batch": 8, "micro_batch": 4, "accumulation_steps": 2, "samples_per_s": 1.0, "peak_bytes": 1}]
    r = tunekit.ProbeResult(device="cpu", precision="fp32", accumulation_steps=1, budget_bytes=1, budget_source="given",
                            headroom=0.15, usable_bytes=1, memory={}, predicted_max_batch=4, max_batch=4, tried=[],
                            throughput=[], knee_batch=None, fastest_batch=None, critical_batch=None,
                            critical_batch_range=None, noise=None, splits=pairs, splits_reason="the one asked for")
    saved = json.loads(r.to_json())
    assert "plan" not in saved and saved["splits"] == pairs
    saved["plan"], saved["plan_reason"] = saved.pop("splits"), saved.pop("splits_reason")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        back = tunekit.ProbeResult.from_json(json.dumps(saved))
    assert back.splits == pairs and back.splits_reason == "the one asked for"
    with pytest.deprecated_call(match=r"^ProbeResult\.plan is deprecated since tunekit 0\.2\.0 .*: use \.splits$"):
        assert back.plan == pairs
    with pytest.deprecated_call(match=r"^ProbeResult\.plan_reason is deprecated .*: use \.splits_reason$"):
        assert back.plan_reason == "the one asked for"


@pytest.mark.slow  # a subprocess: the console entry point of `tunekit probe`, end to end
def test_cli_probe(tmp_path: Path) -> None:
    # A small task (the built-in default's probe costs twice the CPU and proves nothing more of the entry point).
    r = run_cli("probe", "--task", "tests.tasks:classification_task", "--memory-budget", "2GiB", "--out", str(tmp_path),
                "--quiet")
    assert r.returncode == 0, r.stderr
    assert "largest batch that fits" in r.stdout and "headroom 15%" in r.stdout
    assert "evaluation: a validation batch of 32 takes" in r.stdout  # what prices a search's evaluations
    data = json.loads((tmp_path / "probe.json").read_text())
    assert data["max_batch"] >= 1 and data["throughput"]
    assert data["eval_time"]["batch"] == 32 and data["eval_time"]["batches"] == 4 and data["eval_time"]["seconds"] > 0
    assert (tmp_path / "probe.png").stat().st_size > 1000


@pytest.mark.parametrize("args, needle", [(["--memory-budget", "lots"], "memory size 'lots'"),
                                          (["--memory-budget", "1KiB"], "does not fit even at batch 1")])
def test_cli_probe_usage_errors(args: list[str], needle: str, assert_usage_error) -> None:  # type: ignore[no-untyped-def]
    assert_usage_error(["probe", "--out", "o", "--quiet", *args], needle)


@pytest.mark.gpu
def test_cuda_probe_matches_max_memory_allocated() -> None:
    task = tunekit.load_task("shapes")
    r = probe(task, step=StepSettings(device="cuda"), measure=Measurement(noise_repeats=0), memory_budget="2GiB")
    ok = [t for t in r.tried if t["ok"]]
    assert ok and ok[-1]["peak_bytes"] is not None
    assert r.predicted_peak(ok[-1]["batch"]) == pytest.approx(ok[-1]["peak_bytes"], rel=0.1)


def test_calibration_adds_what_kernels_allocate_out_of_the_traces_sight() -> None:
    # bf16 convolutions on the CPU allocate im2col buffers inside the kernel: no trace sees them.
    from tunekit.probes.memory_trace import allocator_peak, calibrate

    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(1, 8, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2), nn.Conv2d(8, 16, 3, padding=1),
                          nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(), nn.Linear(16 * 4 * 4, 10))
    data = TensorDataset(torch.randn(512, 1, 16, 16), torch.randint(0, 10, (512,)))
    compute = LossComputer(nn.CrossEntropyLoss(), None)

    def make(m: nn.Module, o: torch.optim.Optimizer) -> TrainStep:
        return TrainStep(m, o, compute, device=CPU, precision="bf16")

    opt = lambda p: torch.optim.SGD(p, lr=0.1)  # noqa: E731
    traces = {b: trace_step(model, opt, make, BatchStream(data, b).take(1), CPU) for b in (8, 16, 64, 128, 200, 256)}

    def real(b: int) -> int:  # the allocator's count: the same on every run, unlike resident memory
        twin = copy.deepcopy(model)
        step = make(twin, opt(twin.parameters()))
        batches = BatchStream(data, b).take(1)
        peak = allocator_peak(lambda: step(batches))
        assert peak is not None
        return peak

    mm = fit_memory_model({b: traces[b] for b in (8, 16)})
    actual = real(256)
    traced_only = mm.peak(256) - traces[256].resident
    # Calibrated at two batches below the one that matters, as the probe's refit is.
    calibrate(mm, traces, {b: real(b) for b in (64, 128)})
    assert mm.peak(256) - traces[256].resident == pytest.approx(actual, rel=0.05)
    assert mm.peak(256) - traces[256].resident >= traced_only
    # The extra is proportional to the batch, through the last point measured, however many there are.
    assert mm.extra is not None and mm.extra.fixed == 0.0
    calibrate(mm, traces, {8: real(8), 200: real(200), 256: actual})
    assert mm.extra.fixed == 0.0 and mm.peak(256) - traces[256].resident == pytest.approx(actual, rel=1e-6)


def test_resident_peak_counts_touched_pages_not_allocations() -> None:
    """A workspace allocated and left untouched takes no memory; the allocator counts it anyway."""
    from tunekit.probes.memory_trace import allocator_peak, resident_peak

    n = 64 * 2**20 // 4
    touched = resident_peak(lambda: torch.empty(n).fill_(1.0))
    untouched = resident_peak(lambda: torch.empty(n))
    assert touched == pytest.approx(64 * 2**20, rel=0.1)
    assert untouched < 8 * 2**20
    assert allocator_peak(lambda: torch.empty(n)) == pytest.approx(64 * 2**20, rel=0.01)


def test_split_target_never_invents_a_speed() -> None:
    """Micro-batches outside the timed range get no speed (nan) and come after the timed ones."""
    import math

    mm = fit_memory_model({b: _trace(linear_stack(), b) for b in (4, 16)})
    timed = [{"batch": 8, "samples_per_s": 100.0}, {"batch": 32, "samples_per_s": 400.0}]
    splits = split_target(64, 64, timed, mm)
    by_micro = {p["micro_batch"]: p["samples_per_s"] for p in splits}
    assert by_micro[8] == pytest.approx(100.0) and by_micro[32] == pytest.approx(400.0) and 100.0 < by_micro[16] < 400.0
    assert math.isnan(by_micro[4]) and math.isnan(by_micro[64]) and math.isnan(by_micro[1])
    # The fewest accumulation steps first: an untimed pair is not shown slower, and none is shown faster.
    assert [p["micro_batch"] for p in splits][:3] == [64, 32, 16]


def test_a_plan_takes_accumulation_only_for_a_speed_beyond_the_timings_noise() -> None:
    """On shapes the probe recommended 32 x 4 over 128 x 1 from timings that spread by 750%: a pair
    with more accumulation steps goes first only when it is faster by more than the spread."""
    mm = fit_memory_model({b: _trace(linear_stack(), b) for b in (4, 16)})
    noisy = [{"batch": 32, "samples_per_s": 500.0, "spread": 7.5}, {"batch": 128, "samples_per_s": 420.0, "spread": 0.3}]
    assert [(p["micro_batch"], p["accumulation_steps"]) for p in split_target(128, 128, noisy, mm)][0] == (128, 1)
    steady = [{"batch": 32, "samples_per_s": 900.0, "spread": 0.02}, {"batch": 128, "samples_per_s": 420.0, "spread": 0.03}]
    assert [(p["micro_batch"], p["accumulation_steps"]) for p in split_target(128, 128, steady, mm)][0] == (32, 4)


def test_without_a_noise_scale_to_trust_the_plan_is_for_the_largest_batch_and_says_why() -> None:
    """A model in hand, measured as it is (no warm-up): its noise scale at initialisation is far too small
    to plan by (the probe planned batch 2); the plan is for the largest batch that fits, and says so."""
    task = classification_task()
    model = task.make_model(0)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    r = probe(model, task.train_data, task.loss, opt, memory_budget="256MiB", step=StepSettings(device="cpu"),
              measure=Measurement(throughput_points=0, noise_repeats=4))
    assert r.splits and r.splits[0]["effective_batch"] == r.max_batch
    assert "the largest batch that fits: no noise scale to trust" in r.splits_reason
    assert "largest batch that fits" in r.table() and "nan samples/s" not in r.table()


def test_the_probe_says_when_its_answers_are_not_to_be_trusted() -> None:
    """A noise scale measured on an untrained model in hand is flagged, and so are noisy timings."""
    from tunekit.probes.batch_probe import _warnings

    task = classification_task()
    model = task.make_model(0)
    r = probe(model, task.train_data, nn.CrossEntropyLoss(), memory_budget="256MiB", step=StepSettings(device="cpu"),
              measure=Measurement(throughput_points=2, noise_repeats=4))
    assert any("without training it first" in w for w in r.warnings) and "WARNING: the noise scale" in r.table()
    assert all("spread" in t for t in r.throughput)
    fine = _warnings([{"batch": 8, "samples_per_s": 1.0, "spread": 0.05}], None, 50)
    noisy = _warnings([{"batch": 8, "samples_per_s": 1.0, "spread": 0.6}], None, 50)
    assert fine == [] and "timings spread by up to 60% (at batch 8)" in noisy[0]


def test_an_fp16_step_with_its_grad_scaler_is_traced() -> None:
    """The scaler's inf check reads a value that fake tensors cannot give: the trace steps without it,
    and fp16 holds half of fp32's activations."""
    task = small_task(512)
    fp16 = probe(task, memory_budget="256MiB", step=StepSettings(device="cpu", precision="fp16"),
                 measure=Measurement(throughput_points=0, noise_repeats=0))
    fp32 = probe(task, memory_budget="256MiB", step=StepSettings(device="cpu", precision="fp32"),
                 measure=Measurement(throughput_points=0, noise_repeats=0))
    assert fp16.precision == "fp16" and fp16.max_batch == fp32.max_batch == 512  # capped by the dataset
    assert fp16.memory_model().activations(256) < fp32.memory_model().activations(256)


def test_a_memory_measurement_leaves_glibc_where_a_training_loop_would(monkeypatch: pytest.MonkeyPatch) -> None:
    """During the measured step tensors get their own pages; afterwards the thresholds are where glibc's
    dynamic ones end (32 MiB, trim at 64 MiB), not at the static 128 KiB that made every later step of the
    process mmap and unmap its tensors (small steps ran 2.4x slower after a probe)."""
    from tunekit.probes import memory_trace as mt

    calls: list[tuple[object, ...]] = []

    class FakeLibc:
        def malloc_trim(self, pad: int) -> int:
            calls.append(("trim", pad))
            return 1

        def mallopt(self, param: int, value: int) -> int:
            calls.append((param, value))
            return 1

    monkeypatch.setattr(mt, "_libc", lambda: FakeLibc())
    assert mt.resident_peak(lambda: torch.ones(1 << 20).sum()) >= 0
    assert calls == [("trim", 0), (mt.M_MMAP_THRESHOLD, 64 * 1024),
                     (mt.M_MMAP_THRESHOLD, 32 << 20), (mt.M_TRIM_THRESHOLD, 64 << 20)]


class CheckpointedMLP(nn.Module):
    """Residual blocks recomputed in backward (activation checkpointing): its step frees and makes
    many tensors, which a fragmented heap serves from chunks that stay resident."""

    def __init__(self, dim: int = 128, depth: int = 6) -> None:
        super().__init__()
        self.blocks = nn.ModuleList(nn.Sequential(nn.LayerNorm(dim), nn.Linear(dim, dim), nn.GELU(), nn.Linear(dim, dim))
                                    for _ in range(depth))
        self.out = nn.Linear(dim, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        from torch.utils.checkpoint import checkpoint

        for block in self.blocks:
            x = x + checkpoint(block, x, use_reentrant=False)
        return self.out(x)


def _checkpointed_probe() -> tuple[Task, dict[str, Any]]:
    """A task whose steps the measuring child measures (the budget binds), and the probe's settings for it."""
    g = torch.Generator().manual_seed(0)
    task = Task(model=CheckpointedMLP, train_data=TensorDataset(torch.randn(16384, 128, generator=g),
                                                                torch.randint(0, 4, (16384,), generator=g)),
                loss=nn.CrossEntropyLoss(), batch_size=64, name="ckpt")
    return task, dict(memory_budget="48MiB", measure=Measurement(headroom=0.0, throughput_points=0, noise_repeats=0),
                      progress=False)


@pytest.mark.slow  # two probes and training between them
def test_two_probes_in_one_process_agree_after_other_work() -> None:
    task, kw = _checkpointed_probe()
    first = probe(task, **kw)
    # What a notebook does between two probes: tensors of 0.2-16 MiB made and half dropped (glibc keeps
    # their chunks in its heap), and a short training run. Measured in this process, the second probe
    # read a step's peak 2-3x higher after this and gave a largest batch a third of the first.
    made = [torch.ones(int((0.2 + (i * 7919 % 160) / 10) * 2**18)) for i in range(160)]
    del made[::2]
    tunekit.train(small_task(), run_steps=20, progress=False)
    second = probe(task, **kw)
    b = first.max_batch
    assert first.memory_measured == MEASURED_IN_CHILD
    assert second.predicted_peak(b) == pytest.approx(first.predicted_peak(b), rel=0.02)
    assert second.max_batch == pytest.approx(first.max_batch, rel=0.02)


@pytest.mark.slow  # two probes, one of whose measuring children is killed
@pytest.mark.parametrize("kills", [1, 2])
def test_a_measuring_child_killed_mid_probe_is_replaced_and_the_answer_is_the_same(
        kills: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """The kernel's OOM killer, or anyone, SIGKILLs the child at its first step: a fresh one measures that
    batch again (killed once: the answer of a probe left alone); killed again at that batch, it did not fit."""
    task, kw = _checkpointed_probe()
    alone = probe(task, **kw)
    measure, calls, killed = clean_heap.CleanHeapSteps.measure, [], []

    def killed_at_its_first_step(self: clean_heap.CleanHeapSteps, batches: list, warm_up: Any = None) -> Any:
        calls.append(sum(len(b[0]) for b in batches))
        if len(killed) < kills and calls[-1] == calls[0]:
            os.kill(self._proc.pid, signal.SIGKILL)  # noqa: SLF001 - the test plays the OOM killer
            self._proc.wait()  # noqa: SLF001
            killed.append(calls[-1])
        return measure(self, batches, warm_up)

    monkeypatch.setattr(clean_heap.CleanHeapSteps, "measure", killed_at_its_first_step)
    r = probe(task, **kw)
    assert len(killed) == kills and r.memory_measured.startswith(MEASURED_IN_CHILD)
    said = "once" if kills == 1 else "2 times"
    assert f"the child was killed {said} (as the kernel's out-of-memory killer does) and replaced" in r.memory_measured
    at_kill = next(t for t in r.tried if t["batch"] == killed[0])
    if kills == 1:  # measured again in the fresh child: a reading, and the answer of a probe left alone
        assert at_kill["peak_bytes"] is not None and r.max_batch == pytest.approx(alone.max_batch, rel=0.05)
    else:  # killed at that batch twice: it did not fit, and the probe stepped below it
        assert not at_kill["ok"] and at_kill["peak_bytes"] is None and 0 < r.max_batch < killed[0]


def test_steps_are_not_measured_where_the_budget_cannot_bind(monkeypatch: pytest.MonkeyPatch) -> None:
    # The whole data's batch is traced far under the budget: no measuring child, and the result says why.
    # Its one real step only shows the batch runs: neither read nor traced again (a tiny run's probe paid
    # both for nothing: a fifth of its seconds).
    import tunekit.probes.largest_batch as lb
    traced: list[int] = []
    read: list[object] = []
    trace_at, real_step_peak = lb.trace_at, lb.real_step_peak
    monkeypatch.setattr(lb, "trace_at", lambda run, b: traced.append(b) or trace_at(run, b))
    monkeypatch.setattr(lb, "real_step_peak", lambda *a: read.append(a) or real_step_peak(*a))
    r = probe(small_task(), memory_budget="1GiB", step=StepSettings(device="cpu"),
              measure=Measurement(throughput_points=0, noise_repeats=0, cost_share=0), progress=False)
    assert r.memory_measured.startswith("not measured: at batch 4096, the largest the data, batch_limit or the "
                                        "probe's cost cap allows")
    assert r.max_batch == 4096 and r.real_steps == 1 and r.samples == 4096
    assert traced == [] and read == []


class Unpicklable:
    """A handle that copies in process (the probe's snapshot deep-copies the model) but will not pickle."""

    def __deepcopy__(self, memo: dict) -> "Unpicklable":
        return self

    def __reduce_ex__(self, protocol: object) -> object:
        raise TypeError("this handle cannot leave its process")


class HoldsAHandle(MLP):
    """A model that does not pickle, so no child process can take a copy of it."""

    def __init__(self) -> None:
        super().__init__(8, 16, 4)
        self.handle = Unpicklable()


def test_a_model_that_does_not_pickle_is_measured_in_process_and_said() -> None:
    r = probe(HoldsAHandle(), small_task().train_data, nn.CrossEntropyLoss(), memory_budget="4MiB",
              step=StepSettings(device="cpu"), measure=Measurement(throughput_points=0, noise_repeats=0),
              progress=False)
    assert r.memory_measured.startswith(MEASURED_IN_PROCESS) and "could not be copied to a child process" in r.memory_measured
    assert any(w.startswith("memory: ") and "after other work" in w for w in r.warnings)
    assert r.max_batch >= 1


class HoldsALock(MLP):
    """A model holding a ``threading.Lock``: it neither deep-copies nor pickles."""

    def __init__(self) -> None:
        import threading

        super().__init__(8, 16, 4)
        self.lock = threading.Lock()


def test_a_model_holding_a_lock_is_traced_measured_in_process_and_said() -> None:
    # The fake-tensor trace shares the lock rather than copying it; the child cannot take the model, so the
    # real steps are measured in process, and the result says so and why. The model comes back unchanged.
    model = HoldsALock()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    lock = model.lock
    r = probe(model, small_task().train_data, nn.CrossEntropyLoss(), memory_budget="4MiB",
              step=StepSettings(device="cpu"),
              measure=Measurement(throughput_points=2, timing_steps=1, noise_repeats=2), progress=False)
    assert r.max_batch >= 1 and r.real_steps >= 1
    assert r.memory_measured.startswith(MEASURED_IN_PROCESS) and "cannot pickle '_thread.lock'" in r.memory_measured
    assert r.memory_warning is not None and "in this process" in r.memory_warning and r.memory_warning in r.table()
    assert model.lock is lock and not lock.locked()
    assert all(torch.equal(v, before[k]) for k, v in model.state_dict().items())


def test_a_model_too_big_to_copy_beside_itself_is_measured_in_process(monkeypatch: pytest.MonkeyPatch) -> None:
    from tunekit.probes import largest_batch

    monkeypatch.setattr(largest_batch, "cpu_available_bytes", lambda: 1024)  # a machine with 1 KiB free
    r = probe(MLP(8, 16, 4), small_task().train_data, nn.CrossEntropyLoss(), memory_budget="4MiB",
              step=StepSettings(device="cpu"), measure=Measurement(throughput_points=0, noise_repeats=0),
              progress=False)
    assert r.memory_measured.startswith(MEASURED_IN_PROCESS) and "would take over half the available RAM" in r.memory_measured


def test_a_cpu_probe_takes_a_runs_share_of_memory_and_never_plans_on_an_unbounded_critical_batch(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from tunekit.probes import batch_probe, probe_run

    monkeypatch.setattr(probe_run, "cpu_total_bytes", lambda: 16 * 2**30)
    monkeypatch.setattr(probe_run, "cpu_available_bytes", lambda: 15 * 2**30)
    budget, source = batch_probe.budget_bytes(None, torch.device("cpu"))
    assert budget == 4 * 2**30 and "1/4 of this machine's RAM" in source  # said, with the way to more
    monkeypatch.setattr(probe_run, "cpu_available_bytes", lambda: 2**30)  # a busy machine: what is free
    assert batch_probe.budget_bytes(None, torch.device("cpu")) == (2**30, "available RAM")
    # A measured noise scale whose interval is 0..inf: the plan is the task's batch, and says why.
    real_noise = batch_probe._noise

    def unbounded(*args: Any, **kwargs: Any) -> Any:
        return {**real_noise(*args, **kwargs), "b_simple": 1.2, "low": 0.0, "high": math.inf}

    monkeypatch.setattr(batch_probe, "_noise", unbounded)
    task = regression_task()
    r = probe(task,
              measure=Measurement(trace_sizes=(2, 4), throughput_points=2, timing_steps=1, noise_repeats=2,
                                  calibrate_steps=False),
              progress=False)
    assert "unbounded" in r.splits_reason and r.splits[0]["micro_batch"] * r.splits[0]["accumulation_steps"] == task.batch_size


def test_a_probe_dearer_than_its_planned_run_says_so_before_its_real_steps() -> None:
    import dataclasses
    import re

    from tunekit.entry_options import Measurement
    from tunekit.probes.batch_probe import ProbeCostWarning

    base = regression_task()
    task = dataclasses.replace(base, defaults={**base.defaults, "max_steps": 10})  # a 160-sample run
    with pytest.warns(ProbeCostWarning, match="the probe will draw up to") as said:
        r = probe(task, measure=Measurement(trace_sizes=(2, 4), throughput_points=3, timing_steps=3, noise_repeats=4),
                  progress=False)
    ahead = int(re.search(r"up to ([\d,]+) samples", str(said[0].message)).group(1).replace(",", ""))
    assert r.samples <= ahead <= 2 * r.samples  # an upper bound, and not a loose one
    assert said[0].filename == __file__  # shown at the caller's line, not inside tunekit's decorators
    # Its batches are held to what the 160-sample run leaves them: the settings given are what is over it.
    assert ("pass measure=Measurement(throughput_points=2) or measure=Measurement(noise_repeats=0) to spend "
            "less") in str(said[0].message)
    with warnings.catch_warnings():
        warnings.simplefilter("error", ProbeCostWarning)  # the default probe keeps within the run: nothing to say
        default = probe(task, progress=False)
    assert default.samples <= 160 and max(t["batch"] for t in default.tried) <= 160
    long_run = dataclasses.replace(base, defaults={**base.defaults, "max_steps": 100_000})
    with warnings.catch_warnings():
        warnings.simplefilter("error", ProbeCostWarning)  # a probe cheaper than its run says nothing ahead
        probe(long_run, measure=Measurement(trace_sizes=(2, 4), throughput_points=3, timing_steps=3, noise_repeats=4),
              progress=False)


def test_the_cost_warning_never_suggests_what_was_passed_and_the_cli_says_it_in_its_flags(
        tmp_path: Path, run_main, monkeypatch: pytest.MonkeyPatch) -> None:  # type: ignore[no-untyped-def]
    from tunekit.probes import batch_probe, probe_run

    task = dataclasses.replace(regression_task(), defaults={**regression_task().defaults, "max_steps": 2})  # batch 16
    with pytest.warns(batch_probe.ProbeCostWarning) as said:
        batch_probe._say_cost_ahead(task, 256, 10_000, 5, 12)
    assert said[0].message.hints == ("measure=Measurement(batch_limit=128)", "measure=Measurement(throughput_points=2)",
                                     "measure=Measurement(noise_repeats=0)")
    with pytest.warns(batch_probe.ProbeCostWarning) as said:  # batch_limit=128 given: its batches go up to 128
        batch_probe._say_cost_ahead(task, 128, 10_000, 2, 0)
    assert said[0].message.hints == () and "pass" not in str(said[0].message)
    # On the CLI: one line, when it happens, in the command's flags, with no hint it has no flag for.
    (tmp_path / "short.py").write_text(
        "import dataclasses\nfrom tests.tasks import regression_task\n\n"
        "def short(config):\n    t = regression_task()\n"
        "    return dataclasses.replace(t, defaults={**t.defaults, 'max_steps': 2})\n")
    monkeypatch.syspath_prepend(str(Path(__file__).resolve().parents[1]))
    monkeypatch.setattr(probe_run, "cpu_total_bytes", lambda: 16 * 2**30)
    monkeypatch.setattr(probe_run, "cpu_available_bytes", lambda: 15 * 2**30)
    for extra, hint in (([], "pass --batch-limit 128, --throughput-points 2 or --noise-repeats 0 to spend less"),
                        (["--batch-limit", "128"], "pass --throughput-points 2 or --noise-repeats 0 to spend less")):
        code, out, err = run_main("probe", "--task", str(tmp_path / "short.py") + ":short", "--quiet", "--device", "cpu",
                                  "--out", str(tmp_path / "o"), "--cost-share", "0", *extra)  # no cap: over the run
        assert code == 0, err
        lines = [line for line in err.splitlines() if line.strip()]
        assert len(lines) == 1 and lines[0].startswith("tunekit probe: warning: the probe will draw up to"), err
        assert "throughput_points" not in err and "noise_repeats" not in err and "Warning" not in err
        assert hint in lines[0], lines[0]
        assert "a larger --memory-budget for more" in out and "memory_budget" not in out


def test_each_batch_is_timed_as_a_run_takes_its_steps_never_right_after_another_batch_size(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A scripted clock (no timed test): a step costs 1 ms + 10 us a sample, twice that right after a step at
    another batch size (as a CPU's allocator makes it, 1.3-1.9x measured). The timed steps read the steady cost;
    only the warm-up steps pay the change. Interleaved rounds read every point at twice its cost."""
    from tunekit.probes import throughput

    last: list[int] = []

    def time_step(step: Any) -> float:
        b = int(step().samples)
        changed = bool(last) and last[-1] != b
        last.append(b)
        return (1e-3 + 1e-5 * b) * (2 if changed else 1)

    monkeypatch.setattr(throughput, "_time_step", time_step)
    task = dataclasses.replace(regression_task(), defaults={**regression_task().defaults, "max_steps": 1000})
    r = probe(task, memory_budget="1GiB", step=StepSettings(device="cpu"), progress=False,
              measure=Measurement(trace_sizes=(2, 4), throughput_points=3, timing_steps=3, noise_repeats=0,
                                  calibrate_steps=False, cost_share=0))
    assert [t["batch"] for t in r.throughput] == [2, 23, 256]
    for t in r.throughput:
        assert t["samples_per_s"] == pytest.approx(t["batch"] / (1e-3 + 1e-5 * t["batch"])) and not t["busy"]
    assert r.step_times == [[b, pytest.approx(1e-3 + 1e-5 * b)] for b in (2, 23, 256)]  # what prices a search


def test_timings_taken_while_the_machine_is_busy_are_timed_again_and_else_not_acted_on(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A scripted clock (no timed test): each step costs 1 ms + 10 us a sample, except where the script makes
    the machine busy. A point spread once is timed again and kept; one spread every time is left out of the
    fastest batch, the knee, the plan and the prices, and the table says which."""
    from collections import Counter

    from tunekit.probes import batch_probe, throughput

    calls: Counter[int] = Counter()

    def scripted(busy_once: int, busy_always: set[int]):  # type: ignore[no-untyped-def]
        def time_step(step: Any) -> float:
            b = int(step().samples)
            calls[b] += 1  # the first call at a batch is its warm-up
            slow = (b == busy_once and calls[b] == 3) or (b in busy_always and calls[b] % 2 == 0)
            return (1e-3 + 1e-5 * b) * (10 if slow else 1)
        return time_step

    task = dataclasses.replace(regression_task(), defaults={**regression_task().defaults, "max_steps": 1000})
    kw = dict(memory_budget="1GiB", step=StepSettings(device="cpu"), progress=False,
              measure=Measurement(trace_sizes=(2, 4), throughput_points=3, timing_steps=3, noise_repeats=0,
                                  calibrate_steps=False, cost_share=0))
    monkeypatch.setattr(throughput, "_time_step", scripted(23, {256}))
    r = probe(task, **kw)
    by = {t["batch"]: t for t in r.throughput}
    assert sorted(by) == [2, 23, 256]
    assert by[23]["remeasured"] == 1 and not by[23]["busy"]  # spread once, timed again, quiet: kept
    assert by[256]["remeasured"] == batch_probe.BUSY_RETRIES and by[256]["busy"] and not by[2]["busy"]
    assert r.busy_batches == [256] and r.fastest_batch == 23 and r.knee_batch == 23  # 256 would be fastest
    assert [b for b, _ in r.step_times] == [2, 23]  # what prices a search's trials
    table = r.table()
    assert "timed again (1x): the machine was busy" in table and "busy: left out" in table
    assert "batch 256 is left out of the fastest batch" in table
    # Busy throughout: nothing timed is acted on, and the planned run's seconds are not predicted.
    calls.clear()
    monkeypatch.setattr(throughput, "_time_step", scripted(0, {2, 23, 256}))
    r = probe(task, **kw)
    assert r.busy_batches == [2, 23, 256] and r.step_times == [] and r.run_seconds is None
    assert r.fastest_batch is None and r.knee_batch is None and all(math.isnan(p["samples_per_s"]) for p in r.splits)
    assert "every timing was taken while the machine was busy" in r.table()
    assert "its seconds not predicted (the machine was busy)" in r.cost()
    # Timing again replays drawn batches: the probe's samples are the same however busy the machine was.
    calls.clear()
    monkeypatch.setattr(throughput, "_time_step", scripted(0, set()))
    quiet = probe(task, **kw)
    assert quiet.busy_batches == [] and (quiet.samples, quiet.updates) == (r.samples, r.updates)


class Sequences(torch.utils.data.Dataset):
    """Token sequences of 1-128 tokens: a batch's memory follows how many tokens its draw holds."""

    def __init__(self, n: int = 4096, longest: int = 128) -> None:
        g = torch.Generator().manual_seed(0)
        self.lengths = torch.randint(1, longest + 1, (n,), generator=g).tolist()
        self.labels = torch.randint(0, 4, (n,), generator=g)

    def __len__(self) -> int:
        return len(self.lengths)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        return torch.full((self.lengths[i],), i % 50), self.labels[i]


def packed(items: list[tuple[torch.Tensor, torch.Tensor]]) -> tuple[torch.Tensor, ...]:
    """A batch's sequences end to end (no padding): (tokens, each token's sequence, lengths, labels)."""
    tokens = torch.cat([t for t, _ in items])
    seq = torch.cat([torch.full((len(t),), j) for j, (t, _) in enumerate(items)])
    return tokens, seq, torch.tensor([float(len(t)) for t, _ in items]), torch.stack([y for _, y in items])


class PooledTokens(nn.Module):
    """Each token through a wide layer, then averaged per sequence: memory per token, not per sample."""

    def __init__(self) -> None:
        super().__init__()
        self.emb, self.hidden, self.out = nn.Embedding(50, 32), nn.Linear(32, 256), nn.Linear(256, 4)

    def forward(self, tokens: torch.Tensor, seq: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        h = torch.relu(self.hidden(self.emb(tokens)))
        return self.out(torch.zeros(lengths.shape[0], h.shape[1]).index_add(0, seq, h) / lengths[:, None])


def test_a_peak_that_moves_with_the_data_gets_the_margin_its_readings_spread_by() -> None:
    """Sequences of 1-128 tokens, packed: two draws of one batch hold a few percent more or fewer tokens. The
    margin is twice the readings' spread, above the instrument's resolution, and the answer's peak with it is
    within the budget; the worst reading at a batch at or above the answer too (the fixed 0.5% of before was not)."""
    from tunekit.probes.largest_batch import RESIDENT_PAGES

    torch.manual_seed(0)
    model = PooledTokens()
    r = probe(model, torch.utils.data.DataLoader(Sequences(), batch_size=16, collate_fn=packed), nn.CrossEntropyLoss(),
              torch.optim.AdamW(model.parameters()), memory_budget="48MiB", step=StepSettings(device="cpu"),
              measure=Measurement(headroom=0.0, throughput_points=0, noise_repeats=0), progress=False)
    assert r.memory_measured == MEASURED_IN_CHILD
    read_at = r.tried[-1]["batch"]
    readings = [t["peak_bytes"] for t in r.tried if t["batch"] == read_at]
    assert r.tried[-1]["draw"] == 1 and len(readings) == 2 and r.max_batch <= read_at
    assert r.margin > RESIDENT_PAGES / r.predicted_peak_bytes and r.margin_source.startswith("2x the spread of 2 readings")
    assert r.predicted_peak_bytes * (1 + r.margin) <= r.usable_bytes
    assert max(readings) * r.max_batch / read_at * (1 + r.margin) <= r.usable_bytes


def test_where_the_trace_is_larger_than_the_measurement_the_larger_is_the_peak(monkeypatch: pytest.MonkeyPatch) -> None:
    """A measurement far below the trace (a reading that missed pages): the step's peak is the trace's, so the
    model is not refitted down to it and the answer stays where the trace puts it (before, the reading
    replaced the trace and the answer went up to the whole dataset)."""
    from tunekit.probes import largest_batch

    monkeypatch.setattr(clean_heap, "available", lambda: "not here")  # measured in process, read below
    monkeypatch.setattr(largest_batch, "real_step_peak", lambda step, dev: (step(), 1000)[1])
    task, kw = _checkpointed_probe()
    r = probe(task, **kw)
    first = r.tried[0]
    assert first["peak_bytes"] == pytest.approx(first["predicted_bytes"], rel=0.01)
    assert r.max_batch <= r.predicted_max_batch < 16384
    assert r.predicted_peak_bytes <= r.usable_bytes


def test_the_margin_and_predicted_peak_are_saved_and_said() -> None:
    r = probe(small_task(), memory_budget="4MiB", step=StepSettings(device="cpu"),  # no cost cap: the budget binds
              measure=Measurement(throughput_points=0, noise_repeats=0, cost_share=0), progress=False)
    assert r.predicted_peak_bytes and r.margin > 0 and r.margin_source
    back = tunekit.ProbeResult.from_json(r.to_json())
    assert (back.predicted_peak_bytes, back.margin, back.margin_source) == (r.predicted_peak_bytes, r.margin, r.margin_source)
    assert f"margin {r.margin:.1%}: {r.margin_source}" in str(r.summary()).splitlines()[5]
    old = {k: v for k, v in json.loads(r.to_json()).items() if k not in ("predicted_peak_bytes", "margin", "margin_source")}
    loaded = tunekit.ProbeResult.from_json(json.dumps(old))  # a file saved before they were recorded
    assert loaded.predicted_peak_bytes is None and loaded.margin == 0.0 and "margin" not in loaded.table()


def test_the_margin_rule_and_the_step_down_it_takes() -> None:
    from tunekit.probes.safety_margin import peak_margin, settle

    spread = peak_margin([100.0, 90.0], 200.0, 4.0, 50, "resident memory")
    assert spread.fraction == pytest.approx(0.1) and spread.source.startswith("2x the spread of 2 readings at batch 50")
    same = peak_margin([100.0, 99.0], 200.0, 4.0, 50, "resident memory")  # 2x their spread is below 4 bytes
    assert same.fraction == pytest.approx(0.02) and same.source.startswith("resident memory's resolution, 4 B")
    assert peak_margin([100.0, 100.0], 200.0, 0.0, 50, "max_memory_allocated").fraction == 0.0
    # The worst reading 5% over the model at batch 1000 and a 10% margin: below it, the model scaled by 1.05.
    model = LinearMemory(100.0, 1.0)
    settled = settle(1000, model, 1155.0, spread, 1200.0)
    assert settled.batch == model.largest_batch(1200.0 / (1.05 * 1.1)) < 1000
    assert settled.peak_bytes * 1.1 <= 1200.0
    assert settle(1000, model, None, spread, 1210.0).batch == 1000  # 1100 x 1.1 fits
    assert settle(1, model, 1155.0, spread, 10.0).batch == 1  # never below 1
