"""A self-check of tunekit's CUDA paths, for when a GPU is at hand.

Each check prints PASS or FAIL with its figures; the script exits 1 if any
fails, and 0 with one SKIP line where there is no CUDA device.

1. fp16 with a GradScaler: a step the scaler skips is not counted as an update,
   and the range test still gives a finite, confident-or-not suggestion.
2. A real out-of-memory error in the largest-batch search: caught by its type,
   the next try smaller, and the allocated memory back to its baseline.
3. The probe's predicted peak against torch.cuda.max_memory_allocated of one
   real step, at 3 batch sizes, within 5%.
4. A fractional-GPU packing that the real GPU's memory cannot hold is refused.
5. Ray trials on 2 logical slices of one GPU: each trial trains on CUDA.
6. The probe's promises (issue 52) under a 512 MiB budget the GPU enforces: the largest batch never over the
   true largest (max_memory_allocated of one real step, searched), within 10% of it; its predicted peak within
   3%; and its default cost at most the planned run's samples and seconds.

    python -m benchmarks.gpu_check
"""

from __future__ import annotations

import sys
import tempfile
import traceback
from collections.abc import Callable

import torch

from benchmarks._common import hardware  # noqa: E402

import tunekit  # noqa: E402
from tunekit import Measurement, StepSettings, Sweep  # noqa: E402


def check_fp16_scaler() -> str:
    task = tunekit.load_task("shapes")
    r = tunekit.train(task, lr=3e-3, run_steps=30, precision="fp16", device="cuda")
    # A scale of 2**40 overflows fp16 gradients at once: the first steps are skipped, and retried
    # at the same LR without being counted as points of the sweep.
    scaler = torch.amp.GradScaler("cuda", init_scale=2.0**40)
    lf = tunekit.lr_find(task, sweep=Sweep(sweep_steps=50),
                         step=StepSettings(precision="fp16", device="cuda", scaler=scaler))
    ok = r.updates == 30 and lf.skipped_steps > 0 and 10 < len(lf.losses) <= 51
    return _verdict(ok, f"train: {r.updates} of 30 updates, {r.skipped_steps} skipped; range test: {len(lf.losses)} "
                        f"points, {lf.skipped_steps} skipped, suggestion {lf.suggestion}")


def check_real_oom() -> str:
    from tunekit.probes.largest_batch import cuda_budget, find_largest_batch  # the search itself, with a step that really allocates

    dev = torch.device("cuda")
    free, total = torch.cuda.mem_get_info(dev)
    base = torch.cuda.memory_allocated(dev)
    per_sample = 64 * 2**20  # 64 MiB a sample: 0.5 GiB of budget holds 7
    budget = base + 512 * 2**20

    def run_step(n: int) -> float:
        torch.cuda.reset_peak_memory_stats(dev)
        x = torch.empty(n * per_sample // 4, dtype=torch.float32, device=dev)
        del x
        return float(torch.cuda.max_memory_allocated(dev))

    class Predicts16:  # a memory model that is far off: 16 samples fit, it says
        def largest_batch(self, budget: float, limit: int = 1 << 24) -> int:
            return 16

        def peak(self, b: float) -> float:
            return budget * b / 16

    with cuda_budget(dev, budget):
        confirmed, tried, _ = find_largest_batch(run_step, lambda measured: Predicts16(), budget, 64,
                                                 free=torch.cuda.empty_cache)
    after = torch.cuda.memory_allocated(dev)
    ok = confirmed >= 1 and any(not t["ok"] for t in tried) and after == base
    return _verdict(ok, f"tried {[(t['batch'], t['ok']) for t in tried]}, confirmed {confirmed}; allocated "
                        f"{base} before, {after} after ({free / 2**30:.1f} of {total / 2**30:.1f} GiB free)")


def check_memory_model() -> str:
    from benchmarks.probe_accuracy import measure

    pr = tunekit.probe(tunekit.load_task("shapes"), step=StepSettings(device="cuda"),
                       measure=Measurement(throughput_points=0, noise_repeats=0))
    ratios = {}
    for batch in (64, 256, 1024):
        measured = measure("shapes", batch, "fp32", "cuda")["measured"]
        ratios[batch] = pr.predicted_peak(batch) / measured
    ok = all(abs(r - 1) <= 0.05 for r in ratios.values())
    return _verdict(ok, "predicted / measured peak: " + ", ".join(f"batch {b}: {r:.3f}" for b, r in ratios.items()))


def check_packing_refused() -> str:
    task = tunekit.load_task("shapes")
    pr = tunekit.probe(task, step=StepSettings(device="cuda"),
                       measure=Measurement(throughput_points=0, noise_repeats=0))
    need = pr.predicted_peak(pr.max_batch)  # the largest batch that fits: one trial fills the GPU
    from tunekit.hpsearch.backends.ray import check_packing

    try:
        check_packing(0.25, need, pr.usable_bytes, f"micro-batch {pr.max_batch}")
    except tunekit.UsageError as exc:
        return _verdict(True, f"refused: {exc}")
    return _verdict(False, f"4 trials of {need / 2**30:.2f} GiB were let onto {pr.usable_bytes / 2**30:.2f} GiB")


def check_ray_slices() -> str:
    import ray

    with tempfile.TemporaryDirectory() as out:
        r = tunekit.search("shapes", "from_scratch", trials=4, budget="40updates", out=out,
                           backend=tunekit.Ray(gpus_per_trial=0.5, cpus_per_trial=1, ray_init={"num_gpus": 1, "num_cpus": 4}))
    if ray.is_initialized():
        ray.shutdown()
    devices = [t.get("worker", {}).get("device") for t in r.trials]
    gpus = [tuple(t.get("worker", {}).get("gpu_ids") or ()) for t in r.trials]
    ok = len(r.trials) == 4 and all(d == "cuda" for d in devices) and all(g == ("0",) for g in gpus)
    return _verdict(ok, f"trials on {devices}, GPU ids {gpus}, states {[t['state'] for t in r.trials]}")


def check_probe_promises(device: str = "cuda") -> str:
    """benchmarks.probe_accuracy's cases on this device (its truth: max_memory_allocated of one real step in a
    fresh process), and benchmarks.probe_cost's promise on one corpus task."""
    import time

    from benchmarks import probe_accuracy as pa
    from benchmarks.corpus import build

    figures, ok = [], True
    for name in ("gpt", "mlp"):
        key = (name, "fp32", "512MiB")
        case = pa.run_case(*key, device, {"fresh": pa.probe_fresh(*key, device)}, divisors=(1,), max_runs=6)
        got, true = case["largest"]["fresh"], case["true"]
        errors = [abs(r["fresh"] - 1) for r in case["rows"]]
        ok &= 0 < got <= true and got >= 0.9 * true and all(e <= 0.03 for e in errors)
        figures.append(f"{name}: largest {got} (true {true}), peak error "
                       f"{', '.join(f'{e:.1%}' for e in errors) or 'not measured'}")
    probe_s, run_s = [], []
    for _ in range(3):  # interleaved: probe, run
        t0 = time.perf_counter()
        r = tunekit.probe(build("gpt_docs_adamw"), step=StepSettings(device=device), progress=False)
        probe_s.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        tunekit.train(build("gpt_docs_adamw"), device=device, progress=False)
        run_s.append(time.perf_counter() - t0)
    ps, rs = sorted(probe_s)[1], sorted(run_s)[1]
    ok &= r.samples <= (r.run_samples or 0) and ps <= rs
    figures.append(f"gpt_docs_adamw: probe {r.samples:,} samples, {ps:.2f} s against the run's {r.run_samples:,}, "
                   f"{rs:.2f} s (medians of 3, interleaved)")
    return _verdict(ok, "; ".join(figures))


def _verdict(ok: bool, figures: str) -> str:
    return f"{'PASS' if ok else 'FAIL'}  {figures}"


CHECKS: dict[str, Callable[[], str]] = {
    "fp16 GradScaler: skipped steps not counted": check_fp16_scaler,
    "a real OOM in the largest-batch search": check_real_oom,
    "memory model against max_memory_allocated": check_memory_model,
    "packing refused against real GPU memory": check_packing_refused,
    "Ray trials on 2 slices of one GPU": check_ray_slices,
    "the probe never over the budget, cheaper than its run": check_probe_promises,
}


def main() -> int:
    print(f"hardware: {hardware()}")
    if not torch.cuda.is_available():
        print("SKIP  no CUDA device: nothing to check here")
        return 0
    failed = 0
    for name, check in CHECKS.items():
        try:
            line = check()
        except Exception as exc:  # a check that crashes is a failure, with its reason
            line = f"FAIL  {type(exc).__name__}: {exc}\n{traceback.format_exc(limit=3)}"
        failed += line.startswith("FAIL")
        print(f"{name}: {line}", flush=True)
    print(f"{len(CHECKS) - failed}/{len(CHECKS)} checks passed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
