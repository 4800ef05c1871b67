"""The search on the corpus, one task a family, against the searches and the LR-free optimizers users pick.

Each task's full trial (1 FTE) is its planned run: ``run_steps`` updates at its batch. Arms, each seeded
by the search seed s (every trial trains with seed s):

- ``tunekit``: ``tunekit.search(task, "from_scratch", trials=N, budget="<FTE>samples")``, its probes
  counted first;
- ``random``, ``optuna_sh`` (TPE + successive halving), ``ray_asha`` (OptunaSearch + ASHA): the peers of
  ``benchmarks/search_efficiency.py``, over its wide space, trials through ``tunekit.train``;
- ``schedulefree`` and ``prodigy``: one run of 1 FTE at their defaults (``benchmarks/harness/lr_free.py``).

Targets (``benchmarks/harness/costs.py``): ``expected`` = L* + 2% x (L_untrained - L*), L* the median final loss
over 10 seeds at the best of the ground-truth grid's best LR and its two neighbours (``grid.window``, in
benchmarks/data/corpus_search_grid/; the grid itself, ``python -m benchmarks.corpus_grid``, has 2 seeds, too few
where one run's loss varies by 15-30% from seed to seed), L_untrained the untrained model's median validation loss
at the same seeds; and ``best known`` = 1.01 x the best final loss any arm found, frozen in
benchmarks/data/corpus_search_targets.json the first time it is computed.

The headline (``--report``, and all of ``--retrain``'s report): each study's answer trained again at 5 fresh
seeds, reached where its median there is at or below the expected target; its cost, the study's whole spend,
in the budget's currency (FTE of samples) with updates and device seconds beside it
(``benchmarks/harness/retrain_report.py``). The ``tunekit_confirm`` arm runs ``Confirm(top=3, seeds=2)``; every
smaller setting is read from its studies and the default chosen leave-one-family-out
(``benchmarks/harness/confirm_choice.py``). Below the headline, per family: FTE (samples), updates and device
seconds to each target by the studies' own best values (medians over seeds; probes, pruned and failed trials
included; a study that misses counts as inf), reached k/n, anytime best loss after 2/4/8/16 FTE.

The search's constants come from benchmarks/search_tasks.py's four tasks (none used here) and the LR
corpus's leave-one-family-out fits; one change, the space holding the task's own weight decay
(2026-12-05), was found on the regression and long-horizon tasks, whose rows are in-sample for it.

    python -m benchmarks.corpus_search [--tasks a,b] [--seeds 3] [--trials 24] [--arms ...] [--shard I/N]
    python -m benchmarks.corpus_search --report      # the tables from the cached runs
    python -m benchmarks.corpus_search --quick       # one tiny synthetic task, one seed, 4 trials, in a temporary folder
    python -m benchmarks.corpus_search --seeds 5 --timing   # device seconds: the searches again, alone on the machine
    python -m benchmarks.corpus_search --seeds 5 --retrain  # each study's answer trained again at 5 fresh seeds
    python -m benchmarks.corpus_search --seeds 5 --retrain --arms tunekit_confirm  # the confirmation settings
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import tempfile
from pathlib import Path
from typing import Any, Optional

import numpy as np
import torch

import tunekit
from benchmarks import search_efficiency as se
from benchmarks.corpus import CORPUS, pick
from benchmarks.harness import confirm_choice, costs, grid, lr_free, report, retrain, retrain_report
from tunekit import Halving

#: One task a family: the cheapest real-data task of each that is not in the search's own benchmark.
SEARCH_TASKS = ("digits_mlp_sgdm", "digits_cnn_bn_nesterov", "lstm_torchsrc_adam", "photo_pixels_huber_sgdm",
                "wine_mlp_adamw", "photo_pixels_long_sgdm", "digits_ft_cnn_sgdm", "hf_digits_cls",
                "const_digits_mlp_adam")
SEARCHES = ("tunekit", "random", "optuna_sh", "ray_asha")
FREE = ("schedulefree", "prodigy")
ARMS = SEARCHES + FREE
# tunekit's variants, run on demand (--arms) and kept out of the report's tables: the search with the
# range test's short runs before it (ProbeSettings(lr_refine=True); the default until 2026-12-05).
VARIANTS: dict[str, dict[str, Any]] = {"tunekit_refined": {"lr_refine": True},
                                       # the range test's sweep a third of one trial's updates (30 to 100)
                                       "tunekit_sweep_third": {"lr_sweep_share": 1 / 3},
                                       # rungs comparing a cooldown branch's value (issue 50 item 2)
                                       "tunekit_cooldown": {"pruner": Halving(rung_value="cooldown")},
                                       # confirmation at its most: every smaller setting is read from it
                                       # (benchmarks/harness/confirm_choice.py)
                                       "tunekit_confirm": {"confirm": tunekit.Confirm(*confirm_choice.MOST)}}
CONFIRM_ARM = "tunekit_confirm"
CACHE = Path(__file__).resolve().parent / ".cache" / "corpus_search"
# --timing: the searches again, one process, each (task, seed)'s arms back to back, for device seconds.
TIMING_CACHE = Path(__file__).resolve().parent / ".cache" / "corpus_search_timing"
RETRAIN_CACHE = Path(__file__).resolve().parent / ".cache" / "corpus_search_retrain"
# The expected target's grid: the 2-seed grid's best LR and its neighbours, at this many seeds.
TARGET_SEEDS = 10
TARGET_GRIDS = Path(__file__).resolve().parent / "data" / "corpus_search_grid"
TARGETS = Path(__file__).resolve().parent / "data" / "corpus_search_targets.json"


def fte_of(name: str) -> int:
    return CORPUS[name].run_steps * CORPUS[name].batch


def run_arm(arm: str, name: str, seed: int, trials: int) -> dict[str, Any]:
    task, e = CORPUS[name].make(), CORPUS[name]
    if arm in FREE:
        return lr_free.run(arm, task, e.run_steps, e.batch, seed)
    return se.run_strategy(arm, name, task, fte_of(name), seed, trials, variants=VARIANTS)


def cached(cache: Path, arm: str, name: str, seed: int, trials: int, quiet: bool = False) -> dict[str, Any]:
    path = cache / name / f"{arm}_seed{seed}_trials{1 if arm in FREE else trials}.json"
    if path.exists():
        return json.loads(path.read_text())
    run = run_arm(arm, name, seed, trials)
    run.update(task=name, arm=arm, seed=seed, fte=fte_of(name), load_after=os.getloadavg()[0])
    se.save_json(path, run)
    if not quiet:
        print(f"  {name} seed {seed} {arm:<12} best {costs.best_value(run):.4f}  spent "
              f"{costs.spent(run) / fte_of(name):5.2f} FTE  {run.get('seconds', 0):.1f} s", flush=True)
    return run


def fmt(v: float, spec: str = ".2f") -> str:
    return "inf" if v == math.inf else ("-" if not math.isfinite(v) else format(v, spec))


def arm_stats(runs: list[dict[str, Any]], target: float, fte: int) -> dict[str, float]:
    out: dict[str, float] = {"n": len(runs), "reached": sum(math.isfinite(costs.to_target(r, target)) for r in runs)}
    for cost in costs.COSTS:
        scale = fte if cost == "samples" else 1
        vals = [costs.to_target(r, target, cost) for r in runs]
        out[cost] = costs.median([v / scale for v in vals])
        # A miss counted as what the study spent: a lower bound on its cost to the target.
        out[f"{cost}_spent"] = costs.median([(v if math.isfinite(v) else costs.spent(r, cost)) / scale
                                             for v, r in zip(vals, runs)])
    return out


def ratio(tk: dict[str, float], peer: dict[str, float], cost: str) -> tuple[float, str]:
    """tunekit's median cost over the peer's; where one missed in most studies, the bound that the
    misses-as-spent medians give ("<=" when the peer missed, ">=" when tunekit did)."""
    a, b = tk[cost], peer[cost]
    if math.isfinite(a) and math.isfinite(b):
        return a / b, f"{a / b:.2f}"
    if math.isfinite(a):
        return a / peer[f"{cost}_spent"], f"<= {a / peer[f'{cost}_spent']:.2f}"
    if math.isfinite(b):
        return tk[f"{cost}_spent"] / b, f">= {tk[f'{cost}_spent'] / b:.2f}"
    return math.nan, "both missed"


def family_block(name: str, runs: dict[str, list[dict[str, Any]]], truth: grid.Truth, anchor: grid.Truth,
                 freeze: bool) -> tuple[str, dict[str, Any]]:
    """The task's tables; ``freeze``: every arm has run the same seeds, so the best-known target is frozen now
    (a report of a partial cache uses a provisional one, and says so)."""
    e, fte = CORPUS[name], fte_of(name)
    found = min(costs.best_value(r) for rs in runs.values() for r in rs)
    goal = costs.Target.of(anchor.at_best, anchor.untrained_at)
    expected = goal.value
    stored = json.loads(TARGETS.read_text()).get(name) if TARGETS.exists() else None
    if stored is not None:
        best_known, how = float(stored), "frozen"
    elif freeze:
        best_known, how = costs.freeze(TARGETS, name, costs.BEST_KNOWN_MARGIN * found), "frozen now"
    else:
        best_known, how = costs.BEST_KNOWN_MARGIN * found, "PROVISIONAL: not every run is in"
    lines = [f"## {e.family}: {name} ({e.data}; {e.optimizer}, batch {e.batch}, {e.run_steps} updates = 1 FTE = "
             f"{fte} samples)",
             f"grid: best lr {truth.best_lr:.3g}, L* {truth.best:.4f} (mean of 2 seeds); around it, {len(anchor.at_best)} "
             f"seeds: best lr {anchor.best_lr:.3g}, median {anchor.best:.4f} (quartiles "
             f"{np.percentile(anchor.at_best, 25):.4f}-{np.percentile(anchor.at_best, 75):.4f})",
             f"targets: expected {expected:.4f} (that median + 2% x (L_untrained {goal.untrained:.4f} - it); the old "
             f"1.02 x that median would be {1.02 * goal.l_star:.4f}), best known {best_known:.4f} "
             f"(1.01 x {best_known / costs.BEST_KNOWN_MARGIN:.4f}, {how})"]
    summary: dict[str, Any] = {"family": e.family}
    for label, target in (("expected", expected), ("best known", best_known)):
        lines.append(f"  to the {label} target: FTE (samples) | updates | device s | reached")
        stats = {a: arm_stats(rs, target, fte) for a, rs in runs.items() if rs and a in SEARCHES}
        for a, st in stats.items():
            lines.append(f"    {a:<12}{fmt(st['samples']):>8} |{fmt(st['updates'], '.0f'):>7} |{fmt(st['seconds'], '.1f'):>7} |"
                         f"{int(st['reached'])}/{int(st['n'])}")
        peers = {a: st for a, st in stats.items() if a != "tunekit"}
        if "tunekit" in stats and peers:
            ratios = []
            for cost in costs.COSTS:
                best_peer = min(peers, key=lambda a: (peers[a][cost], peers[a][f"{cost}_spent"]))
                value, text = ratio(stats["tunekit"], peers[best_peer], cost)
                ratios.append(f"{cost} {text} (vs {best_peer})")
                summary[(label, cost)] = text
            summary[(label, "reached")] = (int(stats["tunekit"]["reached"]), int(stats["tunekit"]["n"]),
                                           max(int(p["reached"]) for p in peers.values()))
            lines.append("    tunekit / best peer: " + ", ".join(ratios))
    lines.append("  anytime: median best final loss after k FTE of samples (probes included)")
    lines.append("    " + f"{'':<12}" + "".join(f"{k:>9}" for k in costs.ANYTIME))
    for a, rs in runs.items():
        if rs and a in SEARCHES:
            at = costs.anytime(rs, fte)
            lines.append(f"    {a:<12}" + "".join(f"{fmt(v, '.4f'):>9}" for v in at.values()))
            summary[("anytime", a)] = at
    tk_best = costs.median([costs.best_value(r) for r in runs.get("tunekit", [])])
    tk_spent = costs.median([costs.spent(r) / fte for r in runs.get("tunekit", [])])
    for a in FREE:
        if runs.get(a):
            v = costs.median([costs.best_value(r) for r in runs[a]])
            summary[("free", a)] = (v, tk_best)
            lines.append(f"  {a} at its defaults, 1 FTE: final loss {fmt(v, '.4f')} (median over seeds); tunekit's "
                         f"best trial {fmt(tk_best, '.4f')} after {fmt(tk_spent)} FTE of search: "
                         + ("tunekit better" if tk_best < v else "tunekit NOT better"))
    return "\n".join(lines), summary


def overview(summaries: dict[str, dict[str, Any]]) -> str:
    lines = ["Overview, one task a family (tunekit's median over the best peer's median, in each cost; "
             "reached: tunekit's k/n and the best peer's k):",
             f"{'family':<13}{'expected: samples':>18}{'updates':>13}{'device s':>13}{'reached':>9}"
             f"{'best known: samples':>21}{'reached':>9}{'8 FTE <= peers 16':>19}{'beats SF':>9}{'beats Prodigy':>14}"]
    for name, s in summaries.items():
        def g(k: tuple[str, str]) -> str:
            return str(s.get(k, "-"))

        def reach(label: str) -> str:
            r = s.get((label, "reached"))
            return f"{r[0]}/{r[1]} ({r[2]})" if r else "-"

        peers16 = [s[("anytime", a)][16] for a in SEARCHES[1:] if ("anytime", a) in s]
        tk8 = s.get(("anytime", "tunekit"), {}).get(8, math.nan)
        any_ok = "yes" if peers16 and tk8 <= min(peers16) else ("no" if peers16 else "-")
        free = ["-" if ("free", a) not in s else "yes" if s[("free", a)][1] < s[("free", a)][0] else "no" for a in FREE]
        lines.append(f"{s['family']:<13}{g(('expected', 'samples')):>18}{g(('expected', 'updates')):>13}"
                     f"{g(('expected', 'seconds')):>13}{reach('expected'):>9}{g(('best known', 'samples')):>21}"
                     f"{reach('best known'):>9}{any_ok:>19}{free[0]:>9}{free[1]:>14}")
    return "\n".join(lines)


def retrained(cache: Path, name: str, runs: dict[str, list[dict[str, Any]]]) -> dict[str, list[Optional[float]]]:
    """Each study's best trial trained again at :data:`retrain.SEEDS`: arm -> its studies' medians (None where
    nothing completed)."""
    e, fte = CORPUS[name], fte_of(name)
    return {a: [retrain.retrained(cache, a, name, int(r["seed"]), e.make, r, fte, e.run_steps, e.batch) for r in rs]
            for a, rs in runs.items() if rs}


def settings_retrained(cache: Path, name: str, run: dict[str, Any]) -> dict[str, tuple[Optional[float], Optional[confirm_choice.Choice]]]:
    """Each confirmation setting's answer in ``run`` (a :data:`CONFIRM_ARM` study) trained again at
    :data:`retrain.SEEDS`: setting -> (the median, None where nothing completed; its choice)."""
    e, fte, built = CORPUS[name], fte_of(name), []
    out = {}
    for st in confirm_choice.SETTINGS:
        ch = confirm_choice.choice(run, st)
        med = None if ch is None else statistics.median(
            retrain.losses(cache, CONFIRM_ARM, name, int(run["seed"]), e.make, ch.trial, fte, e.run_steps, e.batch,
                           retrain.SEEDS, built))
        out[st.name] = (med, ch)
    return out


def task_retrains(cache: Path, name: str, runs: dict[str, list[dict[str, Any]]], anchor: grid.Truth) -> retrain_report.TaskRetrains:
    """Every arm's studies on ``name`` trained again, against the expected target; the confirmation arm as one
    row per setting."""
    fte = fte_of(name)
    t = retrain_report.TaskRetrains(name, CORPUS[name].family, costs.Target.of(anchor.at_best, anchor.untrained_at))
    for a, rs in runs.items():
        if not rs:
            continue
        if a == CONFIRM_ARM:
            per = [settings_retrained(cache, name, r) for r in rs]
            rows = {retrain_report.SETTING_PREFIX + st.name: ([p[st.name][0] for p in per], [p[st.name][1] for p in per])
                    for st in confirm_choice.SETTINGS}
        else:
            rows = {a: (retrained(cache, name, {a: rs})[a], [confirm_choice.whole(r) for r in rs])}
        for key, (meds, chs) in rows.items():
            t.outcomes[key] = confirm_choice.outcome(meds, chs, t.target.value, fte)
            t.old_outcomes[key] = confirm_choice.outcome(meds, chs, 1.02 * t.target.l_star, fte)
            t.retrained[key] = retrain_report.median_or_inf(meds)
            t.own_best[key] = costs.median([math.inf if c is None else float(c.trial["value"]) for c in chs])
    return t


def retrain_text(tasks: list[retrain_report.TaskRetrains], full: bool = True) -> str:
    """The report's body: the headline (confirmation chosen leave-one-family-out), then (``full``) the targets,
    every setting, the old peers' figures (labelled) and a block a task."""
    family_of, outs = {t.name: t.family for t in tasks}, retrain_report.by_setting(tasks)
    held = confirm_choice.held_out(outs, family_of)
    everywhere = confirm_choice.chosen_everywhere(outs, family_of)
    if not full:
        return retrain_report.headline(tasks, held, everywhere)
    parts = [retrain_report.headline(tasks, held, everywhere), retrain_report.peers_table(tasks),
             retrain_report.targets_table(tasks),
             retrain_report.settings_table(tasks), retrain_report.settings_table(tasks, old=True),
             retrain_report.old_peers(), *map(retrain_report.block, tasks)]
    return "\n\n".join(p for p in parts if p)


def timing_lines(cache: Path, names: list[str], arms: list[str], seeds: int, trials: int) -> str:
    """The machine's load after each timed study, and whether each study's trials are the main cache's
    (the same seed gives the same trials: only the seconds may differ)."""
    loads, same, total = [], 0, 0
    for name in names:
        for a in arms:
            for s in range(seeds):
                p, q = (c / name / f"{a}_seed{s}_trials{trials}.json" for c in (cache, CACHE))
                if not p.exists():
                    continue
                run = json.loads(p.read_text())
                loads += [run["load_after"]] if "load_after" in run else []
                if q.exists():
                    total += 1
                    key = [(t["params"], t["value"], t["samples"]) for t in run["trials"]]
                    same += key == [(t["params"], t["value"], t["samples"]) for t in json.loads(q.read_text())["trials"]]
    load = (f"median {np.median(loads):.2f}, max {max(loads):.2f} over {len(loads)} studies" if loads else "not recorded")
    return (f"load (1-minute average, 2 cores) after each timed study: {load}\n"
            f"trials the same as the main run's ({CACHE.name}): {same} of {total} studies")


def main() -> None:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.corpus_search", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tasks", default=",".join(SEARCH_TASKS))
    ap.add_argument("--arms", default=",".join(ARMS))
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--trials", type=int, default=24)
    ap.add_argument("--shard", default="0/1", help="I/N: run every N-th (task, seed) from the I-th")
    ap.add_argument("--report", action="store_true", help="only the tables, from the cached runs")
    ap.add_argument("--reverse", action="store_true", help="run the (task, seed) jobs last first: a second process "
                    "beside one running them in order meets it in the middle")
    ap.add_argument("--timing", action="store_true", help="run the searches again in one process, each (task, seed)'s "
                    "arms back to back (which goes first rotates), for device seconds on a quiet machine: "
                    "benchmarks/data/corpus_search_timing_report.txt")
    ap.add_argument("--retrain", action="store_true", help="train each study's best trial again at "
                    f"{len(retrain.SEEDS)} fresh seeds (and the LR-free runs): benchmarks/data/corpus_search_retrain_report.txt")
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args()
    torch.set_num_threads(1)
    names, arms = pick(args.tasks), args.arms.split(",")
    known = (*ARMS, *VARIANTS)
    if not set(arms) <= set(known):
        ap.error(f"unknown arm(s) {', '.join(sorted(set(arms) - set(known)))}: choose from {', '.join(known)}")
    cache, seeds, trials, grid_root, window_root = CACHE, args.seeds, args.trials, grid.GRIDS, TARGET_GRIDS
    if args.quick:
        tmp = Path(tempfile.mkdtemp(prefix="tk_corpus_search_"))
        names, arms, seeds, trials = ["mlp_bce_adam"], [a for a in ARMS if a != "ray_asha"], 1, 4
        cache, grid_root, window_root = tmp / "runs", tmp / "grid", tmp / "window"
    if args.timing:
        cache, arms = (cache if args.quick else TIMING_CACHE), [a for a in arms if a in SEARCHES]
    retrain_cache = (cache.parent / "retrain") if args.quick else RETRAIN_CACHE
    i, n = map(int, args.shard.split("/"))
    jobs = [(name, seed) for seed in range(seeds) for name in names]
    if args.reverse:
        jobs.reverse()
    try:
        if not args.report:
            for j, (name, seed) in enumerate(jobs[i::n]):
                # Timing: which arm runs first rotates, so no arm always meets the machine's state first.
                for arm in (arms[j % len(arms):] + arms[:j % len(arms)]) if args.timing else arms:
                    run = cached(cache, arm, name, seed, trials)
                    if args.retrain and arm == CONFIRM_ARM:
                        settings_retrained(retrain_cache, name, run)
                    elif args.retrain:
                        retrained(retrain_cache, name, {arm: [run]})
        if args.report or n == 1:
            blocks, summaries, tasks = [], {}, []
            for name in names:
                runs = {a: [json.loads(p.read_text()) for s in range(seeds)
                            if (p := cache / name / f"{a}_seed{s}_trials{1 if a in FREE else trials}.json").exists()]
                        for a in arms}
                if not any(runs.values()):
                    continue
                truth = grid.ensure(name, 1 if args.quick else 2, root=grid_root, quiet=True)
                anchor = grid.window(name, 2 if args.quick else TARGET_SEEDS, window_root, base_root=grid_root, quiet=True)
                # Frozen once every arm has run the same seeds (a task may have fewer seeds than asked).
                complete = not args.quick and len({len(rs) for rs in runs.values()}) == 1
                tasks.append(task_retrains(retrain_cache, name, runs, anchor))
                if not args.retrain:
                    block, summaries[name] = family_block(name, runs, truth, anchor, complete)
                    blocks.append(block)
            if not tasks:
                raise SystemExit("no cached run for these tasks: nothing to report (run without --report first)")
            timed = (timing_lines(cache, names, arms, seeds, trials) if args.timing else
                     "device seconds: as each run measured them, with whatever else ran beside it; alone on the "
                     "machine: benchmarks/data/corpus_search_timing_report.txt (--timing)\n"
                     "each study's best trial trained again at fresh seeds (what its configuration is worth in "
                     "expectation): benchmarks/data/corpus_search_retrain_report.txt (--retrain)")
            if args.retrain:
                body = retrain_text(tasks)
            else:  # the headline stays the answers trained again; the studies' own best values follow
                body = "\n\n".join([retrain_text(tasks, full=False), "The studies' own best values (the least of many noisy runs: not the "
                                      "headline):\n" + overview(summaries), timed, *blocks])
            what = (" (device seconds: one process, each study's arms back to back)" if args.timing else
                    " (each study's answer trained again)" if args.retrain else "")
            report.write("corpus_search_retrain" if args.retrain else "corpus_search_timing" if args.timing else "corpus_search",
                         f"The search on the corpus, one task a family ({seeds} seeds, {trials} trials){what}",
                         body, quick=args.quick)
    finally:
        import sys

        if "ray" in sys.modules:
            import ray

            ray.shutdown()


if __name__ == "__main__":
    main()
