"""Time tunekit's shared training step against a minimal hand-written PyTorch loop.

Both loops do the same work on the same model, data order, accumulation and
precision: set the LR from the same warmup + cosine schedule, zero the grads,
K forward/backward passes under autocast with the loss scaled by 1/K, read the
loss once, clip the global grad norm, step AdamW. The runs are interleaved and
repeated, and the median time per optimizer update is compared.

    python -m benchmarks.step_overhead [--repeats 7] [--steps 60] [--task NAME]
    python -m benchmarks.step_overhead --quick   # shapes fp32 only, 2 repeats of 10 updates, 1 thread: a smoke run

Prints per-configuration median times and the median of the paired ratios
tunekit / hand-written (1.00 = no overhead), and writes them to
benchmarks/data/step_overhead_report.txt (a quick run's to a temporary folder).
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import time

import torch
from torch import nn

from benchmarks._common import median, recorded  # noqa: E402
from benchmarks.harness import report  # noqa: E402

import tunekit  # noqa: E402
from tunekit.training.schedule import lr_schedule  # noqa: E402


def handwritten(task: tunekit.Task, steps: int, batch_size: int, k: int, precision: str, seed: int = 0) -> float:
    """The loop a careful user would write by hand. Returns seconds per update."""
    torch.manual_seed(seed)
    model = task.model()
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.01)
    params = list(model.parameters())
    x_all, y_all = task.train_data.tensors
    gen = torch.Generator().manual_seed(seed)
    n = len(x_all)
    order, pos = torch.randperm(n, generator=gen), 0
    lrs = lr_schedule(steps, 1e-3, warmup=max(1, steps // 20), decay="cosine", min_lr_ratio=0.1)
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(precision)
    loss_fn = task.loss
    start = time.perf_counter()
    for step in range(steps):
        for g in opt.param_groups:
            g["lr"] = float(lrs[step])
        opt.zero_grad(set_to_none=True)
        total = None
        for _ in range(k):
            if pos + batch_size > n:
                order, pos = torch.randperm(n, generator=gen), 0
            idx = order[pos : pos + batch_size]
            pos += batch_size
            xb, yb = x_all[idx], y_all[idx]
            with torch.autocast("cpu", dtype=dtype, enabled=dtype is not None):
                loss = loss_fn(model(xb), yb)
            (loss.float() / k).backward()
            total = loss.detach().float() if total is None else total + loss.detach().float()
        loss_value = float(total) / k
        if not math.isfinite(loss_value):
            break
        nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
    return (time.perf_counter() - start) / steps


def with_tunekit(task: tunekit.Task, steps: int, batch_size: int, k: int, precision: str, seed: int = 0) -> float:
    quiet = dataclasses.replace(task, val_data=None)  # time training, not evaluation
    result = tunekit.train(quiet, lr=1e-3, run_steps=steps, batch_size=batch_size, accumulation_steps=k,
                           precision=precision, warmup=max(1, steps // 20), seed=seed, device="cpu")
    return result.seconds / result.updates


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--steps", type=int, default=60)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--task", help="only this task's configurations")
    ap.add_argument("--quick", action="store_true",
                    help="the first configuration only (shapes, 64 x 1, fp32), 2 repeats of 10 updates on 1 thread: "
                    "a smoke run")
    args = ap.parse_args()
    if args.quick:
        args.repeats, args.steps, args.threads = 2, 10, 1
    torch.set_num_threads(args.threads)

    # (task, micro-batch, accumulation K, precision, share of --steps): bf16 matmuls
    # are slow on CPUs without AMX, so the bf16 LM runs fewer updates.
    configs = [
        ("shapes", 64, 1, "fp32", 1.0),
        ("shapes", 32, 4, "bf16", 1.0),
        ("charlm", 32, 1, "fp32", 1.0),
        ("charlm", 16, 2, "bf16", 0.3),
    ]
    if args.quick:
        configs = configs[:1]
    with recorded() as out:
        table(args, configs)
    report.write("step_overhead", "tunekit's training step against a hand-written loop", out.text(), quick=args.quick)


def table(args: argparse.Namespace, configs: list[tuple[str, int, int, str, float]]) -> None:
    print(f"up to {args.steps} updates per run, {args.repeats} interleaved repeats; median time per update, "
          "median of paired ratios\n")
    print(f"{'task':<8} {'batch x K':>10} {'prec':>5} {'hand-written':>13} {'tunekit':>10} {'ratio':>7}")
    ratios = []
    for name, bs, k, prec, share in configs:
        if args.task and name != args.task:
            continue
        task = tunekit.load_task(name)
        steps = max(5, int(args.steps * share))
        for fn in (handwritten, with_tunekit):  # warm-up: allocator, autocast caches, thread pool
            fn(task, 5, bs, k, prec)
        base, ours = [], []
        for r in range(args.repeats):
            base.append(handwritten(task, steps, bs, k, prec, seed=r))
            ours.append(with_tunekit(task, steps, bs, k, prec, seed=r))
        # Each repeat runs both loops back to back: the median of the paired
        # ratios cancels the machine's drift better than a ratio of medians.
        ratio = median([o / b for o, b in zip(ours, base)])
        ratios.append(ratio)
        print(f"{name:<8} {f'{bs} x {k}':>10} {prec:>5} {median(base) * 1e3:>11.2f}ms {median(ours) * 1e3:>8.2f}ms {ratio:>7.3f}")
    print(f"\nworst ratio tunekit / hand-written: {max(ratios):.3f} (target <= 1.05); "
          f"geometric mean {math.exp(sum(map(math.log, ratios)) / len(ratios)):.3f}")


if __name__ == "__main__":
    main()
