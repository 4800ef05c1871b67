"""The probe's default cost against the run it plans for, on the corpus's tasks and a tiny Hugging Face Trainer.

For each: ``tunekit.probe`` with its defaults (its samples and seconds), and the planned run itself
timed with ``tunekit.train`` (or ``trainer.train()``), the two interleaved so that a change in the
machine's load falls on both; the ratios printed. The default cap: the planned run's samples under
1,000 updates, 10% of them beyond.

    python -m benchmarks.probe_cost --quick          # 4 corpus tasks and the Trainer
    python -m benchmarks.probe_cost                  # every corpus task and the Trainer
    python -m benchmarks.probe_cost --tasks a,b      # these corpus tasks
    python -m benchmarks.probe_cost --shares 1,0.8,0.6,0.5   # the short runs' cap, chosen leave-one-family-out

``--shares``: each short-run task's probe at each ``cost_share``, interleaved with its run, and the default
share for runs under 1,000 updates chosen leave-one-family-out: for each family, the largest share whose probe
took at most the run's seconds in every repeat on every task of the other families, scored on the family
left out. Each repeat's probe is set against the runs timed just before and after it, and a share is
judged by its worst repeat: the promise holds call by call, not on the median.
"""

from __future__ import annotations

import argparse
import math
import statistics
import tempfile
import time
import warnings
from collections.abc import Callable
from typing import Any

from tunekit.defaults import PROBE_FULL_RUN_UPDATES, PROBE_LONG_RUN_SHARE

# One task of four families, a long run among them; none needs scikit-learn.
QUICK = ("mlp_sgdm_ce", "cnn_bn_nesterov_ls", "tiny_lm", "long_adam")
# The tiny Trainer: a 2-layer GPT-2 of width 32 on 16-token sequences, 150 updates at batch 16.
HF_STEPS, HF_BATCH, HF_DATA = 150, 16, 4096


def hf_trainer(out: str) -> Any:
    """A tiny Trainer on the CPU whose run is 150 updates at batch 16: a 2-layer GPT-2 of width 32 over a
    48-token vocabulary, on 16-token sequences with a pattern to learn (every second token follows the one
    before it), as the tests' Trainer (tests/their_objects.py) is built; built here, since no benchmark
    imports the test suite."""
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainingArguments
    from transformers.utils import logging

    logging.set_verbosity_error()
    vocab, seq = 48, 16

    def tokens(n: int, seed: int) -> list[dict[str, torch.Tensor]]:
        g = torch.Generator().manual_seed(seed)
        out = []
        for _ in range(n):
            ids = torch.randint(0, vocab, (seq,), generator=g)
            ids[1::2] = (ids[0::2] + 1) % vocab
            out.append({"input_ids": ids, "labels": ids.clone()})
        return out

    torch.manual_seed(0)
    model = GPT2LMHeadModel(GPT2Config(n_layer=2, n_embd=32, n_head=2, vocab_size=vocab, n_positions=seq,
                                       bos_token_id=0, eos_token_id=0, use_cache=False))
    args = TrainingArguments(output_dir=out, per_device_train_batch_size=HF_BATCH, per_device_eval_batch_size=16,
                             learning_rate=2e-3, warmup_steps=2, lr_scheduler_type="cosine", max_grad_norm=0.5,
                             max_steps=HF_STEPS, report_to=[], use_cpu=True, save_strategy="no", disable_tqdm=True,
                             log_level="error", logging_strategy="no")
    return Trainer(model=model, args=args, train_dataset=tokens(HF_DATA, 1), eval_dataset=tokens(32, 2))


def _timed(fn: Callable[[], Any]) -> tuple[Any, float]:
    t0 = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - t0


# Each task's probe and run are timed REPEATS times each, in the order probe, run, run, probe, probe, run (ABBA),
# so a change in the machine's load falls on both alike; the medians are compared. Both are called once before
# (the first call in a process pays imports and first-use costs: reported for the first task, not compared).
REPEATS = 3


def measure(name: str, make_probe_input: Callable[[], Any], train_run: Callable[[], Callable[[], Any]]) -> dict[str, Any]:
    """The probe's default cost and the planned run's: a first call of each, then REPEATS of each, interleaved
    (``train_run()`` builds the run's objects and returns what runs it, which alone is timed)."""
    import tunekit

    def probe_once() -> tuple[Any, float]:
        probed = make_probe_input()  # built outside the clock, as the run's objects are
        return _timed(lambda: tunekit.probe(probed, progress=False))

    def run_once() -> float:
        return _timed(train_run())[1]

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        result, first_probe = probe_once()
        first_run = run_once()
        probe_s: list[float] = []
        run_s: list[float] = []
        for i in range(REPEATS):
            for arm in (("probe", "run") if i % 2 == 0 else ("run", "probe")):
                if arm == "probe":
                    result, s = probe_once()
                    probe_s.append(s)
                else:
                    run_s.append(run_once())
    run_samples = result.run_samples or 0
    return {"task": name, "run": f"{result.run_steps}x{(result.run_batch or 0) * result.accumulation_steps}",
            "run_samples": run_samples, "run_s": statistics.median(run_s), "run_est_s": result.run_seconds,
            "probe_samples": result.samples, "probe_s": statistics.median(probe_s),
            "ratios": sorted(p / r for p, r in zip(probe_s, run_s)), "first": (first_probe, first_run),
            "long": (result.run_steps or 0) >= PROBE_FULL_RUN_UPDATES,
            "max_batch": result.max_batch, "noise": "yes" if result.noise else "no", "plan": result.cost_plan}


def corpus_row(name: str) -> dict[str, Any]:
    import tunekit
    from benchmarks.corpus import build

    def run() -> Callable[[], Any]:
        task = build(name)
        return lambda: tunekit.train(task, progress=False)

    return measure(name, lambda: build(name), run)


def hf_row() -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        return measure(f"hf_trainer_gpt2 ({HF_STEPS}x{HF_BATCH})", lambda: hf_trainer(tmp),
                       lambda: hf_trainer(tmp).train)


def table(rows: list[dict[str, Any]]) -> str:
    lines = [f"{'task':<34} {'run':>9} {'run samples':>11} {'run s':>6} {'est s':>6} {'probe samples':>13} "
             f"{'x run':>6} {'probe s':>7} {'x run':>6} {'(range)':>11} {'x est':>6} {'max batch':>9} {'noise':>5}"]
    for r in rows:
        est = r["run_est_s"]
        lo, hi = r["ratios"][0], r["ratios"][-1]
        lines.append(f"{r['task']:<34} {r['run']:>9} {r['run_samples']:>11,} {r['run_s']:>6.2f} "
                     f"{est if est is not None else math.nan:>6.2f} "
                     f"{r['probe_samples']:>13,} {r['probe_samples'] / max(r['run_samples'], 1):>6.2f} "
                     f"{r['probe_s']:>7.2f} {r['probe_s'] / max(r['run_s'], 1e-9):>6.2f} {f'{lo:.2f}-{hi:.2f}':>11} "
                     f"{r['probe_s'] / est if est else math.nan:>6.2f} {r['max_batch']:>9} {r['noise']:>5}")

    def bound(r: dict[str, Any]) -> float:  # the promise: one run under PROBE_FULL_RUN_UPDATES updates, a share beyond
        return PROBE_LONG_RUN_SHARE if r["long"] else 1.0
    over = [r["task"] for r in rows if r["probe_samples"] > bound(r) * r["run_samples"]]
    lines.append(f"probes over their bound in samples: {', '.join(over) if over else 'none'}")
    slow = [f"{r['task']} ({r['probe_s'] / r['run_s']:.2f}x)" for r in rows if r["probe_s"] > bound(r) * r["run_s"]]
    lines.append(f"probes over their bound in seconds (medians as timed): {', '.join(slow) if slow else 'none'}")
    lines.append(f"bound: the planned run under {PROBE_FULL_RUN_UPDATES:,} updates, {PROBE_LONG_RUN_SHARE:.0%} of it "
                 f"beyond. run s, probe s: medians of {REPEATS} each, interleaved (probe, run, run, probe, probe, run), "
                 "after a first call of each; (range): the lowest and highest of the repeats' probe/run ratios; est s: "
                 "the run's seconds at the speed the probe measured at its batch (its steps alone, no evaluation)")
    if rows:
        fp, fr = rows[0]["first"]
        lines.append(f"first calls in this process ({rows[0]['task']}, imports and first-use costs included, not "
                     f"compared): probe {fp:.2f} s, run {fr:.2f} s")
    return "\n".join(lines)


def share_row(name: str, shares: list[float]) -> dict[str, Any]:
    """One short-run task's probe at each of ``shares`` and its run, REPEATS times each, interleaved (the
    shares in turn, reversed on every other repeat, a run before and after), after a first call of each."""
    import tunekit
    from benchmarks.corpus import build
    from tunekit import Measurement

    def probe_at(share: float) -> tuple[Any, float]:
        task = build(name)
        return _timed(lambda: tunekit.probe(task, measure=Measurement(cost_share=share), progress=False))

    def run_once() -> float:
        task = build(name)
        return _timed(lambda: tunekit.train(task, progress=False))[1]

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        probe_at(shares[0])
        run_once()
        seconds: dict[float, list[float]] = {s: [] for s in shares}
        results: dict[float, Any] = {}
        run_s: list[float] = []
        for i in range(REPEATS):
            run_s.append(run_once())
            for share in (shares if i % 2 == 0 else shares[::-1]):
                results[share], t = probe_at(share)
                seconds[share].append(t)
            run_s.append(run_once())
    run = statistics.median(run_s)
    # Each repeat's probes against the runs just before and after them: the promise holds call by call.
    beside = [(run_s[2 * i] + run_s[2 * i + 1]) / 2 for i in range(REPEATS)]
    return {"task": name, "run_s": run, "run_samples": results[shares[0]].run_samples,
            "ratio": {s: statistics.median(seconds[s]) / run for s in shares},
            "worst": {s: max(t / b for t, b in zip(seconds[s], beside)) for s in shares},
            "samples": {s: results[s].samples for s in shares}, "max_batch": {s: results[s].max_batch for s in shares}}


def share_tables(rows: list[dict[str, Any]], shares: list[float]) -> str:
    """Per task, the probe's seconds over the run's at each share (the medians, and the worst repeat); then the share
    chosen for each family on the others (the largest at which no repeat of any task took over its run's seconds)
    and its figures on the family left out."""
    from benchmarks.corpus import CORPUS

    fam = {r["task"]: CORPUS[r["task"]].family for r in rows}
    head = f"{'task':<26} {'family':<12} {'run s':>6} " + " ".join(f"{f'x{s:g}':>6}" for s in shares)
    lines = ["probe seconds / run seconds, at each cost_share", head]
    for r in rows:
        lines.append(f"{r['task']:<26} {fam[r['task']]:<12} {r['run_s']:>6.2f} "
                     + " ".join(f"{r['ratio'][s]:>6.2f}" for s in shares))
    lines += ["", "the worst repeat: a probe's seconds over the mean of the runs timed just before and after it",
              head]
    for r in rows:
        lines.append(f"{r['task']:<26} {fam[r['task']]:<12} {r['run_s']:>6.2f} "
                     + " ".join(f"{r['worst'][s]:>6.2f}" for s in shares))
    lines += ["", "largest batch answered (where the cap, not memory or the data, binds, it falls with the share)",
              f"{'task':<26} " + " ".join(f"{f's={s:g}':>7}" for s in shares)]
    for r in rows:
        lines.append(f"{r['task']:<26} " + " ".join(f"{r['max_batch'][s]:>7}" for s in shares))
    lines += ["", "held out: the share chosen on the other families (the largest at which no repeat of any task's probe "
              "took over its run's seconds), scored on the family left out (worst: of the repeats; median: of each "
              "task's medians, the worst task)",
              f"{'family':<12} {'share':>5} {'worst x run':>11} {'over 1x':>7} {'median':>7}  samples x run"]
    chosen = []
    for f in dict.fromkeys(fam.values()):
        train = [r for r in rows if fam[r["task"]] != f]
        test = [r for r in rows if fam[r["task"]] == f]
        ok = [s for s in shares if all(r["worst"][s] <= 1.0 for r in train)]
        share = max(ok) if ok else min(shares)
        chosen.append(share)
        worst = max(r["worst"][share] for r in test)
        over = sum(r["worst"][share] > 1.0 for r in test)
        median = max(r["ratio"][share] for r in test)
        samp = [r["samples"][share] / r["run_samples"] for r in test]
        lines.append(f"{f:<12} {share:>5g} {worst:>11.2f} {over:>3} of {len(test)} {median:>7.2f}  "
                     f"{min(samp):.2f}-{max(samp):.2f}")
    every = [s for s in shares if all(r["worst"][s] <= 1.0 for r in rows)]
    lines.append(f"on every family (in-sample): {max(every) if every else 'none'} ; held-out choices: "
                 f"{', '.join(f'{s:g}' for s in chosen)}")
    return "\n".join(lines)


def main() -> None:
    from benchmarks._common import recorded
    from benchmarks.corpus import CORPUS, pick
    from benchmarks.harness import report

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help=f"the corpus tasks {', '.join(QUICK)} and the Trainer")
    ap.add_argument("--tasks", help="comma-separated corpus tasks (default: all, or the quick ones)")
    ap.add_argument("--no-hf", action="store_true", help="leave out the Hugging Face Trainer")
    ap.add_argument("--shares", help="comma-separated cost_share values: the short runs' default chosen "
                    "leave-one-family-out (runs under 1,000 updates only)")
    args = ap.parse_args()
    names = pick(args.tasks) if args.tasks else list(QUICK if args.quick else CORPUS)
    if args.shares:
        shares = sorted({float(x) for x in args.shares.split(",")}, reverse=True)
        short = [n for n in names if CORPUS[n].run_steps < PROBE_FULL_RUN_UPDATES]
        with recorded() as out:
            rows = []
            for name in short:
                try:
                    rows.append(share_row(name, shares))
                except ImportError as exc:
                    print(f"{name:<34} not run: {exc}", flush=True)
                    continue
                r = rows[-1]
                print(f"{name:<26} run {r['run_s']:.2f} s  " + " ".join(f"{s:g}:{r['ratio'][s]:.2f}" for s in shares),
                      flush=True)
            print()
            print(share_tables(rows, shares))
        report.write("probe_cost_share", "The short runs' default cost share, chosen leave-one-family-out", out.text(),
                     quick=args.quick)
        return
    with recorded() as out:
        rows = []
        for name in names:
            try:
                rows.append(corpus_row(name))
            except ImportError as exc:  # a corpus task whose data needs a package this environment lacks
                print(f"{name:<34} not run: {exc}", flush=True)
                continue
            print(table(rows[-1:]).splitlines()[1], flush=True)
        if not args.no_hf:
            rows.append(hf_row())
            print(table(rows[-1:]).splitlines()[1], flush=True)
        print()
        print(table(rows))
    report.write("probe_cost", "The probe's default cost against its planned run", out.text(), quick=args.quick)


if __name__ == "__main__":
    main()
