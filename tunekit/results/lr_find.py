"""The range test's result: its curve, its suggestions and how far to trust them.

No training code here (no torch): loading and plotting a saved result is quick. The range test
writes typed records (:class:`LRFindSettings`, :class:`Refinement` and its :class:`RefineStage`,
:class:`ScoredOn`, :class:`Doubt`); a file saved by tunekit 0.1.0, with dicts, loads into them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from enum import Enum
from typing import Any, ClassVar, Optional

from tunekit.defaults import INTERVAL_COVERAGE, INTERVAL_COVERAGE_CURVE
from tunekit.plotting import new_axes
from tunekit.results.base import Record, Result

__all__ = ["LRFindResult", "LRFindSettings", "Refinement", "RefineStage", "ScoredOn", "Doubt", "Confidence"]


class ScoredOn(str, Enum):
    """What scored the refinement's short runs: the validation data, a held-out slice of the training
    data (another for each seed), or the training data they trained on (no val_data given)."""

    VAL = "val"
    HELD_OUT = "held_out"
    TRAIN = "train"


class Doubt(str, Enum):
    """Why a suggestion is not to be trusted blindly; each comes with a reason in words."""

    CURVE = "curve"  # the curve's own assessment (noisy, short, flat: lr_rules.assess)
    SPREAD = "spread"  # the repeats' suggestions span over a decade
    NO_SUGGESTION = "no_suggestion"  # no descending stretch: no rule found an LR
    NOT_REFINED = "not_refined"  # nothing to refine from
    REFINE_DIVERGED = "refine_diverged"  # every short run diverged: the curve's suggestion is kept
    AT_EDGE = "at_edge"  # the short runs' best is at the edge of the LRs they tried


class Confidence(str, Enum):
    """How far to trust the suggestion: HIGH, LOW (a number, not to be trusted blindly), NONE (no number)."""

    HIGH = "high"
    LOW = "low"
    NONE = "none"


@dataclass
class LRFindSettings(Record):
    """What one ``lr_find`` ran, as resolved (the task's recipe and the device filled in), and the run
    its suggestion is for. Every field may be None in a result built by hand or saved by an older tunekit."""

    _renamed: ClassVar[dict[str, str]] = {"steps": "sweep_steps", "from": "adapted_from",  # 0.1.0's keys
                                          "refine_plan": "refine_reason"}  # 0.2.0's

    task: Optional[str] = None
    optimizer: Optional[str] = None
    family: Optional[str] = None  # "sgd", "adaptive" or "other": how the rules read the curve
    device: Optional[str] = None
    precision: Optional[str] = None
    seed: Optional[int] = None
    min_lr: Optional[float] = None
    max_lr: Optional[float] = None
    sweep_steps: Optional[int] = None
    mode: Optional[str] = None
    repeats: Optional[int] = None
    diverge_threshold: Optional[float] = None
    loss_on: Optional[str] = None
    batch_size: Optional[int] = None
    accumulation_steps: Optional[int] = None
    clip_grad_norm: Optional[float] = None
    refine: Optional[bool] = None
    refine_steps: Optional[int] = None  # the first length of the short runs
    refine_lengths: Optional[list[int]] = None
    refine_seeds: Optional[int] = None
    refine_share: Optional[float] = None
    refine_reason: Optional[str] = None  # why the short runs are as long as they are, in words
    refine_scored_on: Optional[str] = None  # what scored them, in words (Refinement.scored_on: which kind)
    not_refined: Optional[str] = None  # why there were no short runs
    run_steps: Optional[int] = None  # the planned run's updates: the suggestion is for it
    run_steps_from: Optional[str] = None
    run_schedule: Optional[str] = None
    run_samples: Optional[int] = None
    run_passes: Optional[float] = None  # the planned run's passes over its training data (None: no known length)
    adapted_from: Optional[dict[str, Any]] = None  # a Trainer's or Lightning's objects: their kind and notes
    extra: dict[str, Any] = field(default_factory=dict)  # keys this version does not know, kept as saved


@dataclass
class RefineStage(Record):
    """The short runs at one length: their peak LRs, scores (loss after the run; inf if it diverged),
    the samples they drew, whether a worse run lies on each side of the best, and the best LR."""

    lrs: list[float] = field(default_factory=list)
    scores: list[float] = field(default_factory=list)
    samples: int = 0
    bracketed: bool = False
    best_lr: Optional[float] = None


@dataclass
class Refinement(Record):
    """The short runs that checked the curve's suggestion: where they started, each length's stage,
    where they were scored, and their cost beside the planned run's (set once carried to it)."""

    start: Optional[float] = None
    stages: list[RefineStage] = field(default_factory=list)
    samples: int = 0
    bracketed: bool = False
    curve_suggestion: Optional[float] = None
    scored_on: Optional[ScoredOn] = None
    at_steps: Optional[int] = None  # the last stage's run length
    seeds: Optional[int] = None
    updates: Optional[int] = None
    run_steps: Optional[int] = None
    run_samples: Optional[int] = None
    share: Optional[float] = None  # the short runs' samples as a share of the planned run's
    carried: Optional[str] = None  # how the short runs' best became the suggestion, in words
    capped: Optional[bool] = None  # whether the sweep's blow-up held the suggestion below their carried best
    passes_divisor: float = 1.0  # what the carried number was then divided by for the run's passes over its data

    def __post_init__(self) -> None:
        self.stages = [s for s in (RefineStage.of(s) for s in self.stages) if s is not None]
        if self.scored_on is not None:
            self.scored_on = ScoredOn(self.scored_on)

    @classmethod
    def of(cls, saved: Any) -> Optional[Refinement]:
        """From itself or a saved dict; 0.1.0's dict held the last stage's runs at its top level, and
        ``stages`` only with two lengths."""
        if isinstance(saved, dict) and not saved.get("stages"):
            stage = {k: saved[k] for k in ("lrs", "scores", "samples", "bracketed", "best_lr") if k in saved}
            saved = {**saved, "stages": [stage] if stage.get("lrs") is not None else []}
        if isinstance(saved, dict):
            saved = {k: v for k, v in saved.items() if k not in ("lrs", "scores", "best_lr")}
        return super().of(saved)

    @property
    def last(self) -> RefineStage:
        """The last stage (the longer runs, with two lengths): its best is what was carried to the run."""
        return self.stages[-1] if self.stages else RefineStage()

    @property
    def lrs(self) -> list[float]:
        return self.last.lrs

    @property
    def scores(self) -> list[float]:
        return self.last.scores

    @property
    def best_lr(self) -> Optional[float]:
        return self.last.best_lr


@dataclass
class LRFindResult(Result):
    """A range test's curve, its suggestions and how far to trust them.

    ``suggestion`` is the default rule's LR (the median over repeats when
    ``repeats > 1``), or, refined, the best of the short runs around it
    (``refinement``); ``lr_range`` is the curve's spread over the repeats;
    ``doubts`` say why it is not to be trusted blindly, ``reasons`` in words. ``interval`` (low, high) is
    where the planned run's best peak LR likely lies (:func:`tunekit.probes.lr_rules.interval`; how often it
    held that best on the task corpus: docs/concepts/lr-finder.md); None without a suggestion.
    """

    _tuple_fields = ('lr_range', 'interval')
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
    seconds: float  # the whole call's, from its arguments checked to the result
    settings: LRFindSettings
    skipped_steps: int = 0
    samples: int = 0  # training samples the sweeps drew (their compute cost)
    repeats: list[dict[str, Any]] = field(default_factory=list)
    lr_range: Optional[tuple[float, float]] = None
    # The short runs that checked the curve's suggestion (lr_find(refine=True)).
    refinement: Optional[Refinement] = None
    doubts: list[Doubt] = field(default_factory=list)
    # The loss's batch-to-batch noise at the sweep's start (the range of its first losses about their trend):
    # a rise within NOISE_MARGIN times it is not divergence (tunekit.probes.lr_rules.start_noise).
    noise: Optional[float] = None
    # Where the planned run's best peak LR likely lies, (low, high) around the suggestion (lr_rules.interval): on
    # the task corpus it held that best for INTERVAL_COVERAGE of the runs. None without a suggestion, or saved
    # by a tunekit before it.
    interval: Optional[tuple[float, float]] = None

    def __post_init__(self) -> None:  # a dict given (by hand, or from a 0.1.0 file) becomes its record
        self.settings = LRFindSettings.of(self.settings or {})  # type: ignore[assignment]
        self.refinement = Refinement.of(self.refinement)
        self.doubts = [Doubt(d) for d in self.doubts]

    def to_dict(self) -> dict[str, Any]:
        """As saved: the refinement also holds its last stage's ``lrs``, ``scores`` and ``best_lr`` at its
        top level, where 0.1.0's files held them (a reader of those files reads these)."""
        data = super().to_dict()
        if self.refinement is not None:
            ref = self.refinement
            data["refinement"].update(lrs=list(ref.lrs), scores=list(ref.scores), best_lr=ref.best_lr)
        return data

    @property
    def checked(self) -> bool:
        """Whether short runs checked the curve's number (a refinement with a best): unchecked, the interval is
        twice as wide."""
        return self.refinement is not None and self.refinement.best_lr is not None

    @property
    def level(self) -> Confidence:
        """How far to trust the suggestion, as an enum: HIGH, LOW or NONE (no suggestion)."""
        if self.suggestion is None:
            return Confidence.NONE
        return Confidence.HIGH if self.confident else Confidence.LOW

    def doubt(self, doubt: Doubt, reason: str) -> None:
        """Record a doubt and its reason in words; the suggestion is then not confident."""
        self.confident = False
        self.doubts.append(doubt)
        self.reasons.append(reason)

    def __repr__(self) -> str:  # the curves run to kilobytes: table() has the detail
        sugg = "none" if self.suggestion is None else f"{self.suggestion:.3g}"
        return (f"LRFindResult(suggestion={sugg}, confident={self.confident}, points={len(self.lrs)}, "
                f"samples={self.samples})")

    def plot(self, ax: Any = None) -> Any:
        """Loss against LR on a log axis, with the suggestions marked; returns the Axes."""
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
        if self.interval is not None:
            ax.axvspan(*self.interval, color="C3", alpha=0.06, label="likely best: "
                       f"{self.interval[0]:.2g}-{self.interval[1]:.2g}")
        self._plot_refinement_marks(ax)
        if self.suggestion is not None:
            flag = "" if self.confident else " (low confidence)"
            how = f", {self._refined_how()}" if self.refinement is not None else ""
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
        ax.set_ylabel("validation loss" if self.settings.loss_on == "val" else "training loss")
        ax.set_title("LR range test")
        ax.legend(fontsize="small")
        return ax

    def _plot_refinement_marks(self, ax: Any) -> None:
        """The curve's own suggestion and where the short runs trained, on the curve's LR axis."""
        ref = self.refinement
        if ref is None:
            return
        if ref.curve_suggestion is not None:
            ax.axvline(ref.curve_suggestion, color="C3", ls=":", lw=1.2, label=f"curve's rule: {ref.curve_suggestion:.2g}")
        for lr in ref.lrs:
            ax.axvline(lr, ymax=0.04, color="C3", lw=2)

    def plot_refinement(self, ax: Any = None) -> Any:
        """The refinement's short runs: each one's score (loss after the run) against its peak LR; returns the Axes."""
        ax = new_axes(ax)
        ref = self.refinement
        if ref is None or not ref.stages:
            ax.text(0.5, 0.5, "no refinement (lr_find(refine=False))", ha="center", va="center", transform=ax.transAxes)
            return ax
        for k, (stage, steps) in enumerate(zip(ref.stages, self._lengths())):
            finite = [(lr, v) for lr, v in zip(stage.lrs, stage.scores) if math.isfinite(v)]
            if finite:
                ax.plot(*zip(*finite), "o-", color=f"C{k}",
                        label=f"short runs ({steps} updates, mean of {self.settings.refine_seeds})")
            for lr, v in zip(stage.lrs, stage.scores):
                if not math.isfinite(v):
                    ax.axvline(lr, color="k", ls="--", lw=0.8, alpha=0.4)
        if self.suggestion is not None:
            run = self.settings.run_steps
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
        ref, carried = self.refinement, self._carried_passes()
        lines = [f"{'rule':<10} {'peak LR':>10}"]
        for name, lr in self.suggestions.items():
            moved = ref is not None or carried is not None
            mark = ("  <- the curve's rule" if moved else "  <- default") if name == self.default_rule else ""
            lines.append(f"{name:<10} {'-' if lr is None else f'{lr:.3g}':>10}{mark}")
        if ref is not None:
            got = "-" if self.suggestion is None else f"{self.suggestion:.3g}"
            lines.append(f"{'refined':<10} {got:>10}  <- suggested: {self._refined_how()} around {ref.start:.3g}")
        elif carried is not None:
            lines.append(f"{'carried':<10} {self.suggestion:>10.3g}  <- suggested: the curve's, for {carried:.1f} "
                         "passes over the data")
        return "\n".join(lines)

    def _carried_passes(self) -> Optional[float]:
        """The planned run's passes over its data where the curve's number alone was carried to them
        (:func:`tunekit.probes.short_runs.from_curve`), else None."""
        curve = self.suggestions.get(self.default_rule)
        if self.refinement is not None or self.suggestion is None or curve is None or not self.settings.run_passes:
            return None
        return None if math.isclose(self.suggestion, curve, rel_tol=1e-9) else self.settings.run_passes

    def summary(self) -> str:
        """:meth:`table`, then the suggestion, how far to trust it and what it cost (what ``tunekit lr-find`` prints)."""
        s = self.settings
        repeats, ref = int(s.repeats or 1), self.refinement
        lines = [self.table()]
        if self.suggestion is None:
            lines.append("no suggestion: " + "; ".join(self.reasons))
        else:
            spread = ""
            if self.lr_range is not None:
                spread = f" (range over {repeats} repeats: {self.lr_range[0]:.3g} .. {self.lr_range[1]:.3g})"
            carried = self._carried_passes()
            how = (self._refined_how() + (f" scored on {s.refine_scored_on}" if s.refine_scored_on else "")
                   if ref is not None else f"{self.default_rule} rule" + (
                       f", carried to {carried:.1f} passes over the data" if carried is not None else ""))
            lines.append(f"suggested peak LR: {self.suggestion:.3g}{spread}  [{how}, confidence {self.confidence:.2f}]")
            if self.interval is not None:
                lines.append(self._interval_line())
            lines += self._for_run()
            if not self.confident:
                lines.append("LOW CONFIDENCE, do not trust this number blindly: " + "; ".join(self.reasons))
        stop = f", stopped at lr {self.diverged_at_lr:.3g} (diverged)" if self.diverged_at_lr else ""
        runs = (f" over {repeats} runs ({len(self.losses)} updates in the first)" if repeats > 1
                else f" ({len(self.losses)} updates)")
        if ref is not None:  # the short runs' cost, inside the sweep's parentheses
            runs = runs[:-1] + f", then {self._runs_words()}: {ref.samples} samples)"
        lines.append(f"{self.samples} samples{runs} in {self.seconds:.1f}s{stop}")
        return "\n".join(lines + self._cost())

    def _interval_line(self) -> str:
        """``likely best peak LR: S (LOW-HIGH)``, with how often such an interval held the best on the corpus."""
        low, high = self.interval or (math.nan, math.nan)
        held = (f"{100 * INTERVAL_COVERAGE:.0f}% of the task corpus's runs, each family held out" if self.checked
                else f"{100 * INTERVAL_COVERAGE_CURVE:.0f}% of the task corpus's runs without short runs, in-sample")
        return f"likely best peak LR: {self.suggestion:.3g} ({low:.2g}-{high:.2g})  [held the planned run's best LR for {held}]"

    def _lengths(self) -> list[Optional[int]]:
        """The short runs' length at each stage (one, or H and 2H)."""
        return list(self.settings.refine_lengths or [self.settings.refine_steps])

    def _short_runs(self) -> tuple[str, str]:
        """(how many LRs the short runs tried, of what length), at each length: "5+4", "35 and 70"."""
        stages = self.refinement.stages if self.refinement is not None else []
        return "+".join(str(len(st.lrs)) for st in stages) or "0", " and ".join(str(n) for n in self._lengths())

    def _runs_words(self) -> str:
        """The short runs, counted: "3 LRs x 1 short run of 33 updates", "4+4 LRs x 2 short runs of 19 and 38 updates"."""
        lrs, steps = self._short_runs()
        seeds = int(self.settings.refine_seeds or 1)
        return f"{lrs} LRs x {seeds} short run{'' if seeds == 1 else 's'} of {steps} updates"

    def _refined_how(self) -> str:
        """How the short runs gave the suggestion, in the one wording the table, the summary and the plot share:
        "best of" them where it is their best LR, "from" them where their best was carried to the planned run
        (the line below the summary's says how: "0.75x their best")."""
        ref = self.refinement
        carried = (ref is not None and ref.best_lr is not None and self.suggestion is not None
                   and not math.isclose(self.suggestion, ref.best_lr, rel_tol=1e-9))
        return ("from " if carried else "best of ") + self._runs_words()

    def _for_run(self) -> list[str]:
        """The run the suggestion is for, and how the short runs' answer was carried to it."""
        s, ref = self.settings, self.refinement
        run_steps = s.run_steps
        if not run_steps:
            return []
        schedule = s.run_schedule or "warmup + cosine"  # an older result's: always this
        line = f"for a {schedule} run of {run_steps:,} updates ({s.run_steps_from or 'given'})"
        if ref is not None and ref.best_lr is not None and ref.at_steps and ref.at_steps < run_steps:
            lengths = s.refine_lengths or []
            moved = (f"best of the {lengths[0]}-update runs {ref.stages[0].best_lr:.3g}, "
                     if len(ref.stages) > 1 and len(lengths) > 1 else "")
            line += f"; {moved}best of the {ref.at_steps}-update runs {ref.best_lr:.3g}, carried to {run_steps:,}"
            line += f" ({ref.carried})" if ref.carried else ""
        return [line] + ([f"not refined: {s.not_refined}"] if s.not_refined else [])

    def _cost(self) -> list[str]:
        """What the test cost as a share of the planned run (samples), the short runs' share apart."""
        ref = self.refinement
        run_samples = self.settings.run_samples or (ref.run_samples if ref is not None else None)
        if not run_samples:
            return []
        line = f"cost: {100 * self.samples / run_samples:.1f}% of the planned run's {run_samples:,} samples"
        if ref is not None and ref.share is not None:
            line += f" (the short runs {100 * ref.share:.1f}%: {self.settings.refine_reason})"
        return [line]
