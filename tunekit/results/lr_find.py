"""The range test's result: its curve, its suggestions and how far to trust them.

No training code here (no torch): loading and plotting a saved result is quick.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Optional

from tunekit.results.base import Result

__all__ = ["LRFindResult"]


@dataclass
class LRFindResult(Result):
    """A range test's curve, its suggestions and how far to trust them.

    ``suggestion`` is the default rule's LR (the median over repeats when
    ``repeats > 1``), or, refined, the best of the short runs around it
    (``refinement``); ``lr_range`` is the curve's spread over the repeats.
    """

    _tuple_fields = ('lr_range',)
    _stem = "lr_find"

    lrs: list[float]
    losses: list[float]
    smoothed: list[float]
    suggestions: dict[str, Optional[float]]
    default_rule: str
    suggestion: Optional[float]
    confidence: float
    confident: bool
    reasons: list[str]
    diverged: bool
    diverged_at_lr: Optional[float]
    seconds: float
    settings: dict[str, Any]
    skipped_steps: int = 0
    samples: int = 0  # training samples the sweeps drew (their compute cost)
    repeats: list[dict[str, Any]] = field(default_factory=list)
    lr_range: Optional[tuple[float, float]] = None
    # The short runs that checked the curve's suggestion (lr_find(refine=True)): their LRs, their
    # scores (loss after the run), where they started, and the curve's own suggestion.
    refinement: Optional[dict[str, Any]] = None

    def __repr__(self) -> str:  # the curves run to kilobytes: table() has the detail
        sugg = "none" if self.suggestion is None else f"{self.suggestion:.3g}"
        return (f"LRFindResult(suggestion={sugg}, confident={self.confident}, points={len(self.lrs)}, "
                f"samples={self.samples})")

    def plot(self, ax: Any = None) -> Any:
        """Loss against LR on a log axis, with the suggestions marked; returns the Axes."""
        from tunekit.plotting import new_axes

        ax = new_axes(ax)
        for rep in self.repeats[1:]:
            ax.plot(rep["lrs"], rep["smoothed"], color="0.6", lw=0.8, alpha=0.6)
        ax.plot(self.lrs, self.losses, color="C0", lw=0.6, alpha=0.35, label="loss")
        ax.plot(self.lrs[: len(self.smoothed)], self.smoothed, color="C0", lw=2, label="smoothed (zero-lag)")
        colors = {"steepest": "C2", "valley": "C4", "min/10": "C1"}
        for name, lr in self.suggestions.items():
            if lr is None or name == self.default_rule:
                continue
            ax.axvline(lr, color=colors.get(name, "0.5"), ls=":", lw=1.2, label=f"{name}: {lr:.2g}")
        if self.lr_range is not None and self.lr_range[0] < self.lr_range[1]:
            ax.axvspan(*self.lr_range, color="C3", alpha=0.12, label="spread over repeats")
        ref = self.refinement
        if ref is not None and ref.get("curve_suggestion") is not None:
            ax.axvline(ref["curve_suggestion"], color="C3", ls=":", lw=1.2, label=f"curve's rule: {ref['curve_suggestion']:.2g}")
        if ref is not None:
            for lr in ref["lrs"]:  # where the short runs trained, on the LR axis
                ax.axvline(lr, ymax=0.04, color="C3", lw=2)
        if self.suggestion is not None:
            flag = "" if self.confident else " (low confidence)"
            how = f", best of {self._short_runs()[0]} short runs" if ref is not None else ""
            ax.axvline(self.suggestion, color="C3", lw=2, label=f"suggested: {self.suggestion:.2g}{how}{flag}")
        if self.diverged_at_lr is not None:
            ax.axvline(self.diverged_at_lr, color="k", lw=0.8, alpha=0.4, ls="--", label="stopped (diverged)")
        ax.set_xscale("log")
        finite = [v for v in self.smoothed if math.isfinite(v)]
        if finite:
            lo, hi = min(finite), max(finite)
            first = finite[0]
            ax.set_ylim(lo - 0.1 * (first - lo + 1e-12), max(first, lo) + 0.5 * (first - lo + 1e-12) if first > lo else hi)
        elif not any(math.isfinite(v) for v in self.losses):
            ax.text(0.5, 0.5, "no finite loss: the range test diverged at once", ha="center", va="center",
                    transform=ax.transAxes)
        ax.set_xlabel("learning rate")
        ax.set_ylabel("validation loss" if self.settings.get("loss_on") == "val" else "training loss")
        ax.set_title("LR range test")
        ax.legend(fontsize="small")
        return ax

    def plot_refinement(self, ax: Any = None) -> Any:
        """The refinement's short runs: each one's score (loss after the run) against its peak LR; returns the Axes."""
        from tunekit.plotting import new_axes

        ax = new_axes(ax)
        ref = self.refinement
        if not ref:
            ax.text(0.5, 0.5, "no refinement (lr_find(refine=False))", ha="center", va="center", transform=ax.transAxes)
            return ax
        lengths = self.settings.get("refine_lengths") or [self.settings.get("refine_steps")]
        for k, (stage, steps) in enumerate(zip(ref.get("stages") or [ref], lengths)):
            finite = [(lr, v) for lr, v in zip(stage["lrs"], stage["scores"]) if math.isfinite(v)]
            if finite:
                ax.plot(*zip(*finite), "o-", color=f"C{k}",
                        label=f"short runs ({steps} updates, mean of {self.settings.get('refine_seeds')})")
            for lr, v in zip(stage["lrs"], stage["scores"]):
                if not math.isfinite(v):
                    ax.axvline(lr, color="k", ls="--", lw=0.8, alpha=0.4)
        if self.suggestion is not None:
            run = self.settings.get("run_steps")
            ax.axvline(self.suggestion, color="C3", lw=2,
                       label=f"suggested: {self.suggestion:.2g}" + (f" for {run:,} updates" if run else ""))
        ax.set_xscale("log")
        ax.set_xlabel("peak learning rate")
        ax.set_ylabel("loss after the short run")
        ax.set_title("LR refinement")
        ax.legend(fontsize="small")
        return ax

    def table(self) -> str:
        """The suggestions as a short text table."""
        ref = self.refinement
        lines = [f"{'rule':<10} {'peak LR':>10}"]
        for name, lr in self.suggestions.items():
            mark = ("  <- the curve's rule" if ref is not None else "  <- default") if name == self.default_rule else ""
            lines.append(f"{name:<10} {'-' if lr is None else f'{lr:.3g}':>10}{mark}")
        if ref is not None:
            got = "-" if self.suggestion is None else f"{self.suggestion:.3g}"
            lines.append(f"{'refined':<10} {got:>10}  <- suggested: best of {self._short_runs()[0]} short runs "
                         f"from {ref['start']:.3g}")
        return "\n".join(lines)

    def summary(self) -> str:
        """:meth:`table`, then the suggestion, how far to trust it and what it cost (what ``tunekit lr-find`` prints)."""
        repeats = int(self.settings.get("repeats") or 1)
        ref, seeds, steps = self.refinement, self.settings.get("refine_seeds"), self.settings.get("refine_steps")
        lines = [self.table()]
        if self.suggestion is None:
            lines.append("no suggestion: " + "; ".join(self.reasons))
        else:
            spread = ""
            if self.lr_range is not None:
                spread = f" (range over {repeats} repeats: {self.lr_range[0]:.3g} .. {self.lr_range[1]:.3g})"
            scored = self.settings.get("refine_scored_on")
            lrs, steps = self._short_runs()
            how = (f"best of {lrs} LRs, {seeds} short runs of {steps} updates each"
                   + (f" scored on {scored}" if scored else "") if ref is not None else f"{self.default_rule} rule")
            lines.append(f"suggested peak LR: {self.suggestion:.3g}{spread}  [{how}, confidence {self.confidence:.2f}]")
            lines += self._for_run()
            if not self.confident:
                lines.append("LOW CONFIDENCE, do not trust this number blindly: " + "; ".join(self.reasons))
        stop = f", stopped at lr {self.diverged_at_lr:.3g} (diverged)" if self.diverged_at_lr else ""
        runs = (f" over {repeats} runs ({len(self.losses)} updates in the first)" if repeats > 1
                else f" ({len(self.losses)} updates)")
        if ref is not None:  # the short runs' cost, inside the sweep's parentheses
            lrs, steps = self._short_runs()
            runs = runs[:-1] + f", then {lrs} LRs x {seeds} short runs of {steps}: {ref['samples']} samples)"
        lines.append(f"{self.samples} samples{runs} in {self.seconds:.1f}s{stop}")
        return "\n".join(lines + self._cost())

    def _short_runs(self) -> tuple[str, str]:
        """(how many LRs the short runs tried, of what length), at each length: "5+4", "35 and 70"."""
        ref = self.refinement or {}
        stages = ref.get("stages") or [ref]
        lengths = self.settings.get("refine_lengths") or [self.settings.get("refine_steps")]
        return "+".join(str(len(st.get("lrs") or ())) for st in stages), " and ".join(str(n) for n in lengths)

    def _for_run(self) -> list[str]:
        """The run the suggestion is for, and how the short runs' answer was carried to it."""
        run_steps, ref = self.settings.get("run_steps"), self.refinement
        if not run_steps:
            return []
        schedule = self.settings.get("run_schedule") or "warmup + cosine"  # an older result's: always this
        line = f"for a {schedule} run of {run_steps:,} updates ({self.settings.get('run_steps_from', 'given')})"
        if ref is not None and ref.get("best_lr") is not None and ref.get("at_steps") and ref["at_steps"] < run_steps:
            stages, lengths = ref.get("stages") or [], self.settings.get("refine_lengths") or []
            moved = (f"best of the {lengths[0]}-update runs {stages[0]['best_lr']:.3g}, "
                     if len(stages) > 1 and len(lengths) > 1 else "")
            line += f"; {moved}best of the {ref['at_steps']}-update runs {ref['best_lr']:.3g}, carried to {run_steps:,}"
        not_refined = self.settings.get("not_refined")
        return [line] + ([f"not refined: {not_refined}"] if not_refined else [])

    def _cost(self) -> list[str]:
        """What the test cost as a share of the planned run (samples), the short runs' share apart."""
        ref, run_samples = self.refinement, self.settings.get("run_samples") or (self.refinement or {}).get("run_samples")
        if not run_samples:
            return []
        line = f"cost: {100 * self.samples / run_samples:.1f}% of the planned run's {run_samples:,} samples"
        if ref and ref.get("share") is not None:
            line += f" (the short runs {100 * ref['share']:.1f}%: {self.settings.get('refine_plan')})"
        return [line]
