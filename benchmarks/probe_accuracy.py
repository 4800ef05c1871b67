"""How well does the probe predict a real step's peak memory and the largest batch that fits,
whatever the process did before it?

Models: the corpus's (benchmarks/corpus) fine-tuning (a frozen pretrained CNN with a new head, the
same CNN fully fine-tuned, LoRA on a pretrained GPT), CNN (with BatchNorm, and on photo patches),
LM (a GPT-2-style character LM, an LSTM) models on their own data repeated to 65,536 samples, and
a deep residual MLP with activation checkpointing (benchmarks/probe_models.py); fp32 and bf16.
For each, the probe runs under a stated budget with headroom 0; its answer is the recommended
batch. Three ways of calling it:

* fresh: the first call in a fresh Python process, as a script runs it;
* after work: every case probed one after another in ONE process, after that process made and
  dropped tensors of 0.2-30 MiB (a notebook's earlier cells) and trained a model for 30 updates,
  as a notebook user calls it; the first case is probed a second time at the end;
* in process (v2): the same, with the real steps measured in the probe's own process, as the
  probe before issue 35 measured them.

At 3 batch sizes (1/4, 1/2 and 1 of the first arm's recommended batch) each call's predicted
peak is set against the truth: one real step in a fresh subprocess started with glibc's mmap
threshold pinned (MALLOC_MMAP_THRESHOLD_=65536, so resident memory follows live tensors), after
a warm-up step on a copy: peak resident memory during the step (VmHWM, reset just before it)
minus the resident memory before it. Memory resident before the step (parameters, buffers, the
batch) is subtracted from the predictions too. On CUDA the truth is torch.cuda.max_memory_allocated.
naive: 16 bytes a parameter (weights, gradients, AdamW's two moments) plus the activations the
forward pass saves, the rule of thumb.

A point where the truth, measured again without trimming the heap, moves by more than 5% is below
what RSS resolves: it is listed, not scored. The true largest batch is searched with the truth's
measurement (brackets of 0.3%).

    python -m benchmarks.probe_accuracy [MODEL ...]   # every case, or only these models' (deep_ckpt, ...)
    python -m benchmarks.probe_accuracy --their-objects  # a Trainer and a LightningModule, probed as held; the truth
                                                      # their own loop's step (their loss, backward, their optimizer)
    python -m benchmarks.probe_accuracy --quick       # the checkpointed MLP at fp32 only, after work, at its
                                                      # recommended batch, one search step: a smoke run

The tables are written to benchmarks/data/probe_accuracy_report.txt (a quick run's to a temporary folder).
"""

from __future__ import annotations

import argparse
import copy
import gc
import json
import math
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import torch
from torch.utils._pytree import tree_flatten

from benchmarks._common import recorded  # noqa: E402
from benchmarks.harness import report  # noqa: E402

import tunekit  # noqa: E402
from tunekit import Measurement, StepSettings  # noqa: E402
from tunekit.bytesize import parse_bytes  # noqa: E402
from tunekit.inputs.data import BatchStream  # noqa: E402
from tunekit.probes.memory_trace import MemoryModel, allocator_peak  # noqa: E402
from tunekit.training.step import TrainStep  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
# (model, precision, budget)
MODELS = [("corpus_digits_head_cnn_adam", "256MiB"), ("corpus_digits_ft_cnn_sgdm", "256MiB"),
          ("corpus_gpt_docs_lora", "512MiB"), ("corpus_digits_cnn_bn_nesterov", "256MiB"),
          ("corpus_photo_patches_cnn_adam", "256MiB"), ("corpus_gpt_docs_adamw", "512MiB"),
          ("corpus_lstm_torchsrc_adam", "256MiB"), ("deep_ckpt", "256MiB")]
CASES = [(name, precision, budget) for name, budget in MODELS for precision in ("fp32", "bf16")]
# Users' objects (--their-objects): probed as held (a Trainer, a LightningModule), the truth their own training step's.
# At fp32 only: their precision is theirs to set (TrainingArguments(bf16=True), L.Trainer(precision=...)).
THEIRS = [("hf_gpt2_trainer", "fp32", "256MiB"), ("lightning_mlp", "fp32", "256MiB")]
TARGET = 0.05
# A step that raises VmHWM by less than this is not measured: the warm-up step leaves kernel
# scratchpads and heap chunks resident that a small step reuses (the bf16 CNN reads 0 at batch 240).
MIN_MEASURABLE = 4 * 2**20
# Steps above this are large enough that the heap's slack is far below 5% of them: one reading.
RESOLVED_ABOVE = 256 * 2**20


def spec_of(name: str) -> str:
    return f"benchmarks.probe_models:{name}_task"


def _rss() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def _hwm() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM"):
                return int(line.split()[1]) * 1024
    raise RuntimeError("no VmHWM")


def measure(spec: str, batch: int, precision: str, device: str, trim: bool = True, alloc: bool = False) -> dict:
    """Run in the subprocess: one real step, its peak memory above what was resident before it
    (``alloc``: the peak of PyTorch's CPU allocator instead, as the profiler records it)."""
    torch.set_num_threads(1)
    dev = torch.device(device)
    task = tunekit.load_task(spec)
    model = task.make_model(0).to(dev)
    batches = BatchStream(task.train_data, batch, seed=0).take(1)
    # Warm-up on a copy: kernels, thread pools and allocator caches are not the step's memory.
    twin = copy.deepcopy(model)
    TrainStep(twin, task.optimizer(twin.parameters()), task.loss_computer(), device=dev, precision=precision)(batches)
    del twin
    gc.collect()
    step = TrainStep(model, task.optimizer(model.parameters()), task.loss_computer(), device=dev, precision=precision)
    if dev.type == "cuda":
        torch.cuda.synchronize()
        before = torch.cuda.memory_allocated(dev)
        torch.cuda.reset_peak_memory_stats(dev)
        step(batches)
        return {"measured": torch.cuda.max_memory_allocated(dev) - before}
    if alloc:
        return {"measured": allocator_peak(lambda: step(batches))}
    return {"measured": _resident_peak(lambda: step(batches), trim)}


def _resident_peak(step: Any, trim: bool) -> int:
    """The peak resident memory ``step()`` adds above what was resident before it (VmHWM, reset first)."""
    if trim:
        import ctypes

        ctypes.CDLL(None).malloc_trim(0)  # free heap pages go back, as the probe's own measurement does
    before = _rss()
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")  # reset VmHWM to the current RSS
    step()
    return _hwm() - before


def _their_step(obj: Any, batch: int) -> Any:
    """One training step as the user's own loop runs it, on the first ``batch`` samples: a Trainer's collator,
    ``compute_loss``, backward and the optimizer it creates; a LightningModule's ``training_step``, backward and
    the optimizer its ``configure_optimizers`` returns. (A Trainer's ``training_step`` reads state its ``train()``
    loop sets, with no public API to set it; ``compute_loss`` and backward are that step on one device.)"""
    if hasattr(obj, "compute_loss") and hasattr(obj, "create_optimizer"):  # a Hugging Face Trainer
        inputs = obj.data_collator([obj.train_dataset[i] for i in range(batch)])
        obj.model.train()
        opt = obj.create_optimizer()

        def hf_step() -> None:
            obj.compute_loss(obj.model, inputs).backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
        return hf_step
    from torch.utils.data import DataLoader

    data = next(iter(DataLoader(obj.train_dataloader().dataset, batch_size=batch)))
    opt = obj.configure_optimizers()
    obj.train()

    def lightning_step() -> None:
        obj.training_step(data, 0).backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
    return lightning_step


def measure_theirs(name: str, batch: int, trim: bool = True) -> dict:
    """Run in the subprocess: one step of the user's own loop (:func:`_their_step`), its peak memory above what was
    resident before it, after a warm-up step of another instance of the same object."""
    import warnings

    from benchmarks import probe_models

    warnings.simplefilter("ignore")  # a LightningModule's self.log() without its Trainer
    torch.set_num_threads(1)
    make = getattr(probe_models, f"{name}_task")
    twin = make()
    _their_step(twin, batch)()  # kernels, thread pools and allocator caches are not the step's memory
    del twin
    gc.collect()
    return {"measured": _resident_peak(_their_step(make(), batch), trim)}


def measured(spec: str, batch: int, precision: str, device: str, trim: bool = True, alloc: bool = False,
             theirs: bool = False) -> int:
    """One step's measured peak, in a fresh subprocess: the shared step on the task ``spec`` names, or
    (``theirs``) the user's own loop's step on the object its function returns."""
    env = dict(os.environ, MALLOC_MMAP_THRESHOLD_="65536", OMP_NUM_THREADS="1", PYTHONPATH=str(ROOT))
    args = (["--their-child", spec.rpartition(":")[2].removesuffix("_task"), str(batch), str(int(trim))] if theirs
            else ["--child", spec, str(batch), precision, device, str(int(trim)), str(int(alloc))])
    out = subprocess.run([sys.executable, __file__, *args], capture_output=True, text=True, env=env, check=True)
    return int(json.loads(out.stdout.strip().splitlines()[-1])["measured"])


def resident(task: tunekit.Task, model: torch.nn.Module, batch: int) -> int:
    """Bytes resident before the step: parameters, buffers and the batch."""
    b0 = BatchStream(task.train_data, batch, seed=0).take(1)[0]
    tensors = [t for t in tree_flatten(b0)[0] if isinstance(t, torch.Tensor)]
    return (sum(p.numel() * p.element_size() for p in model.parameters())
            + sum(b.numel() * b.element_size() for b in model.buffers()) + sum(t.numel() * t.element_size() for t in tensors))


def naive_peak(mm: MemoryModel, b: int) -> float:
    n_params = mm.static["params"] / 4  # fp32 master weights
    return 16 * n_params + mm.activations(b)


def true_largest(spec: str, precision: str, device: str, budget: int, total: Any, rec: int, half: int,
                 limit: int, max_runs: int = 8) -> tuple[int, int]:
    """(the largest batch whose measured total fits ``budget``, subprocess runs it took: at most ``max_runs``).

    ``total(b)`` is the measured peak plus the resident bytes, with the measurements at the
    recommended batch and half of it cached."""
    slope = (total(rec) - total(half)) / max(rec - half, 1)
    guess = min(limit, rec + int((budget - total(rec)) / max(slope, 1.0)))
    lo, hi, runs = 0, limit + 1, 0
    for b in (rec, guess):
        if b in (lo, hi):
            continue
        runs += b != rec
        lo, hi = (max(lo, b), hi) if total(b) <= budget else (lo, min(hi, b))
    while hi - lo > max(1, int(0.003 * lo)) and runs < max_runs:
        if lo == 0:
            b = hi // 2
        elif hi > limit:
            b = min(limit, int(lo * 1.05) + 1)
        else:
            b = (lo + hi) // 2 if runs >= 3 else min(hi - 1, lo + max(1, int(0.003 * lo)))
        runs += 1
        lo, hi = (max(lo, b), hi) if total(b) <= budget else (lo, min(hi, b))
    return lo, runs


def _probe(name: str, precision: str, budget_text: str, device: str) -> dict[str, Any]:
    t0 = time.perf_counter()
    from benchmarks import probe_models

    held = getattr(probe_models, f"{name}_task")()  # as users hold it: a Task, a Trainer, a LightningModule
    r = tunekit.probe(held, memory_budget=budget_text,
                      measure=Measurement(headroom=0.0, throughput_points=0, noise_repeats=0,
                                          cost_share=0),  # the largest batch that fits, not the planned run's
                      step=StepSettings(precision=precision, device=device), progress=False)
    return {"result": json.loads(r.to_json()), "wall": time.perf_counter() - t0}


def _earlier_work(light: bool = False) -> list[torch.Tensor]:
    """What a notebook did before the probe: tensors of 0.2-30 MiB made and half of them dropped (glibc
    serves them from its heap, whose free chunks stay), and a short training run (``light``: 40
    tensors of up to 8 MiB and 5 updates, for the smoke run)."""
    count, top = (40, 80) if light else (400, 300)
    made = [torch.ones(int((0.2 + (i * 7919 % top) / 10) * 2**18)) for i in range(count)]
    del made[::2]
    from benchmarks.probe_models import mlp_task

    tunekit.train(mlp_task(), run_steps=5 if light else 30, progress=False)
    return made


def after_work(keys: list[str], in_process: bool, device: str, light: bool = False) -> dict[str, Any]:
    """Run in the subprocess: every case probed in this one process after earlier work, the first twice
    (``light``: the smoke run's lighter earlier work, one call)."""
    torch.set_num_threads(1)
    if in_process:  # the probe before issue 35: the real steps measured in its own process
        from tunekit.probes import clean_heap

        clean_heap.available = lambda: "measured in process, as before issue 35"  # type: ignore[assignment]
    held = _earlier_work(light)
    out = {key: _probe(*key.split(":"), device) for key in keys}
    second = None if light else _probe(*keys[0].split(":"), device)
    del held
    return {"results": out, "second": second}


def probe_fresh(name: str, precision: str, budget_text: str, device: str) -> dict[str, Any]:
    return _child(["--probe", name, precision, budget_text, device])


def _child(args: list[str]) -> Any:
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=str(ROOT))
    out = subprocess.run([sys.executable, "-m", "benchmarks.probe_accuracy", *args], capture_output=True, text=True,
                         env=env, cwd=ROOT)
    if out.returncode != 0:
        raise SystemExit(f"benchmark child {args} failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


ARMS = ("fresh", "after work", "in process")


def run_case(name: str, precision: str, budget_text: str, device: str, probes: dict[str, dict[str, Any]],
             divisors: tuple[int, ...] = (4, 2, 1), max_runs: int = 8, resolved_above: int = RESOLVED_ABOVE,
             theirs: bool = False) -> dict[str, Any]:
    """Each arm's predictions at the fresh call's recommended batch over ``divisors``, against the truth,
    and each arm's largest batch against the true largest (searched in at most ``max_runs`` measurements).
    ``theirs``: the truth is the user's own training step (:func:`measure_theirs`)."""
    spec = spec_of(name)
    task = tunekit.load_task(spec)
    budget = parse_bytes(budget_text)
    results = {arm: tunekit.ProbeResult.from_json(json.dumps(got["result"])) for arm, got in probes.items()}
    model = task.make_model(0)
    cache: dict[int, int] = {}

    def meas(b: int) -> int:
        if b not in cache:
            cache[b] = measured(spec, b, precision, device, theirs=theirs)
        return cache[b]

    ref = results[next(iter(results))]  # the fresh call's, where it ran
    rec = ref.max_batch
    rows: list[dict[str, Any]] = []
    unresolved: list[dict[str, Any]] = []
    for b in sorted({max(1, rec // k) for k in divisors}):
        res = resident(task, model, b)
        m = meas(b)
        ratios = {arm: (r.predicted_peak(b) - res) / m for arm, r in results.items()}
        ratios["naive"] = (naive_peak(ref.memory_model(), b) - res) / m
        slack = (measured(spec, b, precision, device, trim=False, theirs=theirs) if device == "cpu" and m < resolved_above
                 else m)
        if m < MIN_MEASURABLE or abs(slack / m - 1) > TARGET:
            unresolved.append({"batch": b, "measured": m, "untrimmed": slack, **ratios})
            print(f"{name:<30} {precision:>5} {b:>7} {m / 2**20:>9.1f}MiB   (untrimmed {slack / 2**20:.1f}MiB: "
                  "below what RSS resolves, not scored)", flush=True)
            continue
        rows.append({"batch": b, "measured": m, **ratios})
        print(f"{name:<30} {precision:>5} {b:>7} {m / 2**20:>9.1f}MiB " + " ".join(
            f"{ratios.get(arm, math.nan):>10.3f}" for arm in (*results, "naive")), flush=True)
    limit = ref.dataset_size or rec
    true, runs = true_largest(spec, precision, device, budget, lambda b: meas(b) + resident(task, model, b),
                              rec, max(1, rec // 2), limit, max_runs)
    return {"name": name, "precision": precision, "budget": budget_text, "rows": rows, "unresolved": unresolved,
            "true": true, "runs": runs, "largest": {arm: r.max_batch for arm, r in results.items()},
            "real_steps": {arm: r.real_steps for arm, r in results.items()},
            "wall": {arm: got["wall"] for arm, got in probes.items()}, "samples": ref.samples,
            "capped": rec == limit, "measured_how": ref.memory_measured}


def summary(cases: list[dict[str, Any]], second: dict[str, Any]) -> None:
    arms = [a for a in ARMS if a in cases[0]["largest"]]
    print(f"\n{'model':<30} {'prec':>5} {'budget':>7} | worst |ratio-1|: " + " ".join(f"{a:>10}" for a in (*arms, "naive"))
          + " | true largest | largest, error: " + " ".join(f"{a:>16}" for a in arms) + " | probe s (fresh)")
    for c in cases:
        worst = {a: max(abs(row[a] - 1) for row in c["rows"]) if c["rows"] else math.nan for a in (*arms, "naive")}
        errs = {a: c["largest"][a] / c["true"] - 1 for a in arms}
        print(f"{c['name']:<30} {c['precision']:>5} {c['budget']:>7} | {'':>17} " + " ".join(f"{worst[a]:>10.3f}" for a in (*arms, "naive"))
              + f" | {c['true']:>12} | {'':>15} " + " ".join(f"{c['largest'][a]:>8} {errs[a]:>+7.3f}" for a in arms)
              + f" | {c['wall'].get('fresh', math.nan):>5.1f}" + ("  (capped by the dataset)" if c["capped"] else ""))
    print()
    for a in (*arms, "naive"):
        errs = [abs(row[a] - 1) for c in cases for row in c["rows"]]
        signed = [row[a] - 1 for c in cases for row in c["rows"]]
        print(f"peak error, {a:<10}: median {statistics.median(errs):.3f} (signed {statistics.median(signed):+.3f}), "
              f"worst {max(errs):.3f} over {len(errs)} points" + ("   (target: median <= 0.03, worst <= 0.10)" if a in arms else ""))
    for a in arms:
        errs = [c["largest"][a] / c["true"] - 1 for c in cases]
        print(f"largest batch, {a:<10}: {sum(abs(e) <= 0.10 for e in errs)} of {len(errs)} within 10% of the true largest, "
              f"{sum(e > 0 for e in errs)} above it, worst {max(abs(e) for e in errs):.3f}   (target: all within 10%, none above)")
    left = [(c["name"], c["precision"], u) for c in cases for u in c["unresolved"]]
    print(f"points below the instrument's resolution (not scored): {len(left)}" + "".join(
        f"\n  {n} {p} batch {u['batch']}: {u['measured'] / 2**20:.1f} MiB trimmed, {u['untrimmed'] / 2**20:.1f} MiB not; "
        + ", ".join(f"{a} ratio {u[a]:.3f}" for a in arms) for n, p, u in left))
    for arm, got in second.items():
        first = cases[0]
        r1 = first["largest"][arm]
        r2 = tunekit.ProbeResult.from_json(json.dumps(got["result"]))
        b = r1
        p1 = first["pred_at_rec"][arm]
        print(f"two calls in one process ({arm}), {first['name']} {first['precision']}: largest {r1} then {r2.max_batch}; "
              f"predicted peak at {b}: {p1 / 2**20:.1f} then {r2.predicted_peak(b) / 2**20:.1f} MiB "
              f"({r2.predicted_peak(b) / p1 - 1:+.3%})")
    steps = [c["real_steps"][arms[0]] for c in cases]
    print(f"real steps to calibrate and confirm ({arms[0]}): median {statistics.median(steps)}, max {max(steps)}; "
          "probe wall time: " + ", ".join(f"{a}: median {statistics.median(c['wall'][a] for c in cases):.1f}s"
                                          for a in arms))
    print(f"measured as: {cases[0]['measured_how']}")


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        print(json.dumps(measure(sys.argv[2], int(sys.argv[3]), sys.argv[4], sys.argv[5], sys.argv[6] == "1",
                                 sys.argv[7] == "1")))
        return
    if len(sys.argv) > 1 and sys.argv[1] == "--their-child":
        print(json.dumps(measure_theirs(sys.argv[2], int(sys.argv[3]), sys.argv[4] == "1")))
        return
    if len(sys.argv) > 1 and sys.argv[1] == "--probe":
        torch.set_num_threads(1)
        print(json.dumps(_probe(*sys.argv[2:6])))
        return
    if len(sys.argv) > 1 and sys.argv[1] == "--after-work":
        light = sys.argv[4] == "--light"
        print(json.dumps(after_work(sys.argv[4 + light:], sys.argv[2] == "1", sys.argv[3], light)))
        return
    ap = argparse.ArgumentParser(prog="python -m benchmarks.probe_accuracy", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("models", nargs="*", help="only these models' cases")
    ap.add_argument("--quick", action="store_true",
                    help="the checkpointed MLP at fp32 under 64 MiB only, after lighter work (no fresh call, no second "
                    "call), at its recommended "
                    "batch, one search step for the true largest: a smoke run")
    ap.add_argument("--their-objects", action="store_true",
                    help="users' objects instead (a Hugging Face Trainer, a LightningModule), probed as held, the truth "
                    "their own training step's; written to benchmarks/data/probe_accuracy_objects_report.txt")
    args = ap.parse_args()
    only = set(args.models)
    known = {n for n, _, _ in CASES + THEIRS}
    if only - known:
        print(f"unknown model(s) {', '.join(sorted(only - known))}: choose from {', '.join(sorted(known))}", file=sys.stderr)
        raise SystemExit(2)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    torch.set_num_threads(1)
    cases = [c for c in (THEIRS if args.their_objects else CASES) if not only or c[0] in only]
    kw: dict[str, Any] = {"theirs": True} if args.their_objects else {}
    arms = {"after work": "0"} if args.their_objects else {"after work": "0", "in process": "1"}
    if args.quick:
        cases = [("lightning_mlp" if args.their_objects else "deep_ckpt", "fp32", "64MiB")]
        kw, arms = {**kw, "divisors": (1,), "max_runs": 1, "resolved_above": 0}, {"after work": "0"}
    with recorded() as out:
        print(f"device: {device}; truth: VmHWM delta of one step "
              + ("of the user's own loop (a Trainer's collator, compute_loss, backward and the optimizer it creates; a "
                 "LightningModule's training_step, backward and configure_optimizers' optimizer) " if args.their_objects else "")
              + "in a fresh subprocess, MALLOC_MMAP_THRESHOLD_=65536, "
              "after a warm-up step, heap trimmed before the step; headroom 0; no cost cap (cost_share=0: the largest batch "
              "memory allows, not the planned run's); 1 thread a process\n")
        t0 = time.perf_counter()
        keys = [f"{n}:{p}:{b}" for n, p, b in cases]
        probes: dict[str, dict[str, Any]] = {k: {} if args.quick else {"fresh": probe_fresh(*k.split(":"), device)}
                                             for k in keys}
        second: dict[str, Any] = {}
        for arm, flag in arms.items():
            got = _child(["--after-work", flag, device, *(["--light"] if args.quick else []), *keys])
            for k in keys:
                probes[k][arm] = got["results"][k]
            if got["second"] is not None:
                second[arm] = got["second"]
        print(f"{'model':<30} {'prec':>5} {'batch':>7} {'truth':>12} " + " ".join(f"{a:>10}" for a in (*next(iter(probes.values())), "naive"))
              + "   (predicted / true peak above the resident state)")
        done = []
        for (n, p, b), k in zip(cases, keys):
            c = run_case(n, p, b, device, probes[k], **kw)
            c["pred_at_rec"] = {a: tunekit.ProbeResult.from_json(json.dumps(probes[k][a]["result"])).predicted_peak(
                c["largest"][a]) for a in probes[k]}
            done.append(c)
        summary(done, second)
        print(f"benchmark wall time {time.perf_counter() - t0:.0f}s")
    title = ("The probe on users' objects (a Hugging Face Trainer, a LightningModule) against their own training steps"
             if args.their_objects else "The probe's memory predictions and largest batch against measured steps, "
             "in fresh processes and after other work")
    report.write("probe_accuracy_objects" if args.their_objects else "probe_accuracy", title, out.text(), quick=args.quick)


if __name__ == "__main__":
    main()
