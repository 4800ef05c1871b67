"""The plots of a :class:`~tunekit.results.SearchResult`, drawn from its record alone: the best value
against compute spent, the trials' curves, their values against the LR, the parameters' importances.

Each takes ``ax=None`` and returns what it drew on; matplotlib is imported only when one draws.
"""

from __future__ import annotations

# Imported where used, not at the top: matplotlib, numpy; importing this module does not pay for them.
import math
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Optional

from tunekit.errors import UsageError
from tunekit.objective import objective_of
from tunekit.plotting import new_axes, new_figure

if TYPE_CHECKING:
    from tunekit.results.confirmation import Confirmation

__all__ = ["SearchPlots", "trial_kind", "trained_lr"]


class SearchPlots:
    """The plots of a search's record (a mixin of :class:`~tunekit.results.SearchResult`, whose fields they read)."""

    trials: list[dict[str, Any]]
    study_name: str
    objective: str
    best_value: Optional[float]
    probe_samples: int
    probe_seconds: float
    confirmation: Optional[Confirmation]

    unit: str
    device_seconds: float
    _timed: bool

    def in_unit(self, samples: float) -> float: ...

    def importances(self) -> dict[str, float]: ...

    def plot_best(self, ax: Any = None, by: Optional[str] = None) -> Any:
        """Best value so far against compute spent, probes included: ``by="samples"`` (in the budget's
        unit), with the device seconds spent by then on a second axis above where trials measured them
        (the same points, relabelled: a step sits at its samples below and its seconds above), or
        ``by="seconds"`` alone (the default for a budget in device time). Returns the main Axes."""
        by = by or ("seconds" if self._timed else "samples")
        if by not in ("samples", "seconds"):
            raise UsageError(f"plot_best(by={by!r}): use by='samples' or by='seconds'")
        ax = new_axes(ax)
        start, xs, ys = self._best_so_far(by)
        if start:
            ax.axvline(start, color="0.6", ls=":", label="probes' cost")
        ax.step(xs, ys, where="post", color="C3", label="best so far")
        c = self.confirmation
        if c is not None:  # the answer's value, the mean over its runs: what the best single value overstated
            ax.axhline(c.mean, color="C3", ls="--", lw=1.0, label=f"chosen by its mean (trial {c.chosen})")
        ax.set_xlabel("device seconds spent" if by == "seconds" else f"{self.unit} spent")
        ax.set_ylabel(f"best {objective_of(self).label}")
        ax.legend(fontsize="small")
        if by == "samples" and self.device_seconds > 0:
            top = ax.secondary_xaxis("top", functions=self.seconds_at_samples())
            top.set_xlabel("device seconds spent by then")
        return ax

    def _in_finishing_order(self) -> list[dict[str, Any]]:
        """The trials in the order they finished; one still running (no finish time) last."""
        return sorted(self.trials, key=lambda t: math.inf if t.get("finished") is None else float(t["finished"]))

    def _spending(self) -> tuple[list[float], list[float]]:
        """Compute spent after the probes and after each trial, in finishing order: (samples in the budget's
        unit, device seconds)."""
        samples, seconds = [self.in_unit(self.probe_samples)], [float(self.probe_seconds)]
        for t in self._in_finishing_order():
            samples.append(samples[-1] + self.in_unit(int(t.get("samples") or 0)))
            seconds.append(seconds[-1] + float(t.get("seconds") or 0.0))
        return samples, seconds

    def seconds_at_samples(self) -> tuple[Callable[[Any], Any], Callable[[Any], Any]]:
        """(samples spent -> device seconds spent by then, its inverse): piecewise linear through the
        search's own (samples, seconds) after each trial, and at the mean rate past the last; what the
        best-so-far plot's top axis reads."""
        import numpy as np

        xs, ys = [0.0], [0.0]
        for x, y in zip(*self._spending()):
            if x > xs[-1] and y > ys[-1]:  # a trial of no samples, or no seconds, is no point of the map
                xs.append(x)
                ys.append(y)
        rate = ys[-1] / xs[-1] if len(xs) > 1 else 1.0

        def through(v: Any, a: list[float], b: list[float], slope: float) -> Any:
            v = np.asarray(v, dtype=float)
            return np.where(v > a[-1], b[-1] + (v - a[-1]) * slope,
                            np.where(v < 0, v * slope, np.interp(v, a, b)))

        return (lambda v: through(v, xs, ys, rate)), (lambda v: through(v, ys, xs, 1.0 / rate))

    def _best_so_far(self, by: str) -> tuple[float, list[float], list[float]]:
        """(the probes' cost, compute spent after each trial, the best value by then), in samples or seconds."""
        samples, seconds = self._spending()
        spent = seconds if by == "seconds" else samples
        sign = objective_of(self).sign
        best, xs, ys = math.inf, [], []  # best: sign * value, lower better
        for t, x in zip(self._in_finishing_order(), spent[1:]):
            if t["state"] == "COMPLETE" and t["value"] is not None:
                best = min(best, sign * t["value"])
            if math.isfinite(best):
                xs.append(x)
                ys.append(sign * best)
        return spent[0], xs, ys

    def _answer_runs(self) -> tuple[list[int], str]:
        """The trials the answer stands on, and their label: the best trial, or with confirmation every run of
        the configuration its mean chose (the luckiest single run is then one curve among the others)."""
        c = self.confirmation
        if c is not None:
            runs = next((x.runs for x in c.configurations if x.trial == c.chosen), [c.chosen])
            return list(runs), f"chosen by its mean (trial {c.chosen}, {len(runs)} runs)"
        best = objective_of(self).best(self.trials)
        return ([best["number"]], f"best (trial {best['number']})") if best is not None else ([], "")

    def plot_curves(self, ax: Any = None) -> Any:
        """Validation curves of every trial against its samples; pruned ones faded, the answer's bold (the best
        trial, or with confirmation each run of the chosen configuration), diverged or failed ones red,
        interrupted ones dashed orange (as far as they ran)."""
        ax = new_axes(ax)
        answer, label = self._answer_runs()
        shown: set[str] = set()
        for t in self.trials:
            curve = t.get("curve") or []
            if not curve:
                continue
            xs = [self.in_unit(s) for s, _ in curve]
            ys = [v for _, v in curve]
            kind = trial_kind(t)
            if t["number"] in answer:
                first = t["number"] == answer[0]
                ax.plot(xs, ys, "o-", color="C3", lw=2.2, ms=3, label=label if first else None, zorder=3)
                continue
            shown.add(kind)
            ax.plot(xs, ys, **_CURVE_STYLES[kind])
        for kind in ("complete", "pruned", *(k for k in ("diverged", "failed", "interrupted") if k in shown)):
            ax.plot([], [], **_CURVE_STYLES[kind], label=kind)
        self._value_scale(ax)
        ax.set_xlabel(f"{self.unit} seen by the trial")
        ax.set_ylabel(objective_of(self).label)
        ax.legend(fontsize="small")
        return ax

    def _value_scale(self, ax: Any) -> None:
        """Losses span decades (a log axis); other metrics (accuracy, F1) are read on a linear one."""
        if self.objective in ("loss", "perplexity"):
            ax.set_yscale("log")

    def plot_lr(self, ax: Any = None) -> Any:
        """Final (or last) value against the LR each trial trained with: diverged and failed trials at the
        worst value seen, an interrupted one at its last value (or the worst, before its first), each
        with its own marker."""
        from matplotlib.ticker import NullFormatter

        ax = new_axes(ax)
        values = [t["value"] for t in self.trials if t["value"] is not None and math.isfinite(t["value"])]
        top = max(values + [1.0]) if objective_of(self).sign > 0 else min(values + [0.0])
        points: dict[str, list[tuple[float, float]]] = {kind: [] for kind in _POINT_STYLES}
        for t in self.trials:
            lr, kind = trained_lr(t), trial_kind(t)
            last = t["curve"][-1][1] if t.get("curve") else None
            y = top if kind in ("diverged", "failed") or (kind == "interrupted" and last is None) else last
            if lr and y is not None and math.isfinite(y):
                points[kind].append((lr, y))
        for kind, pts in points.items():
            if pts:
                ax.scatter(*zip(*pts), **_POINT_STYLES[kind])  # type: ignore[arg-type]
        ax.set_xscale("log")
        self._value_scale(ax)
        ax.xaxis.set_minor_formatter(NullFormatter())
        ax.set_xlabel("learning rate (as trained)")
        ax.set_ylabel(objective_of(self).label)
        if ax.get_legend_handles_labels()[0]:  # a study with no trial yet (study create) draws none
            ax.legend(fontsize="small")
        return ax

    def plot_importances(self, ax: Any = None) -> Any:
        ax = new_axes(ax)
        imp = self.importances()
        n = sum(t["state"] == "COMPLETE" and t["value"] is not None for t in self.trials)
        if imp:
            names = list(imp)[::-1]
            ax.barh(names, [imp[n] for n in names], color="C2")
        else:
            ax.text(0.5, 0.5, "too few completed trials", ha="center", va="center", transform=ax.transAxes)
        # A forest fitted to a handful of points says little: say so where it is read.
        ax.set_xlabel(f"importance (Optuna, {n} complete trials{': a rough guess' if n < 10 else ''})")
        return ax

    def plot(self, ax: Any = None) -> Any:
        """The headline: best value against compute spent (:meth:`plot_best`); returns the Axes.

        :meth:`plot_overview` draws it with the curves, the LRs and the importances.
        """
        return self.plot_best(ax)

    def plot_overview(self, fig: Any = None) -> Any:
        """All four plots on ``fig`` (a new figure if None); returns the Figure."""
        fig = fig if fig is not None else new_figure((11, 7.5))
        axes = fig.subplots(2, 2)
        self.plot_best(axes[0, 0])
        self.plot_curves(axes[0, 1])
        self.plot_lr(axes[1, 0])
        self.plot_importances(axes[1, 1])
        best = "none" if self.best_value is None else f"{self.best_value:.4f}"
        fig.suptitle(f"search {self.study_name}: best {best}")
        return fig

    def figure(self) -> Any:
        return self.plot_overview()


def trial_kind(trial: dict[str, Any]) -> str:
    """How a trial of search.json ended, as the plots draw it: complete, pruned, diverged, failed, or
    interrupted (still running, killed, stopped with Ctrl-C, or its worker stopped: Optuna holds these
    as RUNNING or FAIL, and --resume re-runs them)."""
    state = trial["state"]
    # search.json notes an interrupted trial in its error ("interrupted; re-run ..."), a stopped one with "stopped".
    if state == "RUNNING" or trial.get("stopped") or str(trial.get("error") or "").startswith("interrupted"):
        return "interrupted"
    if state in ("COMPLETE", "PRUNED"):
        return state.lower()
    return "diverged" if trial.get("diverged") else "failed"


_CURVE_STYLES: dict[str, dict[str, Any]] = {
    "complete": dict(marker="o", color="C0", lw=1.0, ms=3, alpha=0.8),
    "pruned": dict(marker="o", color="0.5", lw=0.8, ms=3, alpha=0.4),
    "diverged": dict(marker="x", color="C3", lw=0.8, ms=4, alpha=0.6),
    "failed": dict(marker="x", color="C3", lw=0.8, ms=4, alpha=0.6, ls=":"),
    "interrupted": dict(marker="s", color="C1", lw=1.0, ms=3, ls="--", mfc="none"),
}
_POINT_STYLES: dict[str, dict[str, Any]] = {
    "complete": dict(color="C0", label="complete"),
    "pruned": dict(color="0.6", label="pruned (last value)"),
    "diverged": dict(color="C3", marker="x", label="diverged"),
    "failed": dict(color="k", marker="X", label="failed (an error)"),
    "interrupted": dict(facecolors="none", edgecolors="C1", marker="s", label="interrupted (last value)"),
}


def trained_lr(trial: dict[str, Any]) -> Any:
    """The LR a trial trained at (its ``lr`` param is the LR at the range test's batch)."""
    return trial.get("lr") or trial.get("config", {}).get("lr")
