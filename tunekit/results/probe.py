"""What the probe found: the memory model, the largest batch that ran, throughput, the critical batch.

No training code here (no torch): loading and plotting a saved probe is quick.
"""

from __future__ import annotations

# Imported where used, not at the top: matplotlib; importing this module does not pay for them.
import math
import textwrap
from dataclasses import dataclass, field
from typing import Any, ClassVar, Optional, Union

import numpy as np

from tunekit.bytesize import format_bytes
from tunekit.errors import deprecated
from tunekit.plotting import new_axes
from tunekit.results.base import Record, Result
from tunekit.results.memory_model import MemoryModel, PhaseFit
from tunekit.results.step_time import format_seconds, step_curve, update_seconds

__all__ = ["ProbeResult", "ProbeRunSettings", "MEMORY_WARNING"]

# The start of the warning a probe gives where its real steps' memory was measured in its own process
# (the model did not pickle, or is too big to copy): a search repeats it.
MEMORY_WARNING = "memory: "

# A probe's (micro-batch, accumulation) pairs were its ``plan`` before 0.2.0 named them ``splits`` (the search's
# Plan is the only plan): read by the old name, they warn (removed in 0.3.0); a saved probe.json loads silently.
_OLD_SPLITS = deprecated("ProbeResult.plan", "use .splits")
_OLD_SPLITS_REASON = deprecated("ProbeResult.plan_reason", "use .splits_reason")


@dataclass
class ProbeRunSettings(Record):
    """What one ``probe`` ran, as resolved (the task's recipe and the device filled in), and what it
    left out (``noise_not_measured``, set by a search that skips the noise scale)."""

    _renamed: ClassVar[dict[str, str]] = {"from": "adapted_from", "max_batch": "batch_limit"}

    task: Optional[str] = None
    device: Optional[str] = None
    precision: Optional[str] = None
    seed: Optional[int] = None
    memory_budget: Optional[Union[int, str]] = None
    headroom: Optional[float] = None
    accumulation_steps: Optional[int] = None
    clip_grad_norm: Optional[float] = None
    batch_limit: Optional[int] = None  # the cap on the batches tried (None: the dataset's size)
    noise_not_measured: Optional[str] = None
    adapted_from: Optional[dict[str, Any]] = None
    extra: dict[str, Any] = field(default_factory=dict)  # keys this version does not know, kept as saved


@dataclass
class ProbeResult(Result):
    """What the probe found. Sizes are micro-batch sizes unless named effective."""

    _tuple_fields = ('critical_batch_range',)
    _stem = "probe"
    _renamed: ClassVar[dict[str, str]] = {"plan": "splits", "plan_reason": "splits_reason"}  # keys saved before 0.2.0

    device: str
    precision: str
    accumulation_steps: int
    budget_bytes: int
    budget_source: str
    headroom: float
    usable_bytes: int
    memory: dict[str, Any]  # MemoryModel.to_dict()
    predicted_max_batch: int
    max_batch: int  # at or below a batch that ran and was measured, its peak with the margin within usable_bytes
    # real confirmation steps: {"batch", "ok", "peak_bytes", "predicted_bytes"}; the reading on another draw of
    # the data at the answer has "draw": 1
    tried: list[dict[str, Any]]
    throughput: list[dict[str, Any]]  # {"batch", "samples_per_s", "spread", "remeasured", "busy"}
    knee_batch: Optional[int]
    fastest_batch: Optional[int]
    critical_batch: Optional[float]
    critical_batch_range: Optional[tuple[float, float]]
    noise: Optional[dict[str, Any]]
    splits: list[dict[str, Any]] = field(default_factory=list)  # (micro-batch, accumulation) pairs, best first
    splits_reason: str = ""  # why the splits are for their batch (the one asked for, the critical one, the largest)
    lr_scaling: dict[str, Any] = field(default_factory=dict)
    dataset_size: Optional[int] = None
    seconds: float = 0.0
    settings: ProbeRunSettings = field(default_factory=ProbeRunSettings)
    updates: int = 0  # every real optimizer update the probe ran
    samples: int = 0  # the training samples those updates drew (the probe's compute cost)
    warnings: list[str] = field(default_factory=list)  # where an answer is not to be trusted, and why
    memory_measured: str = ""  # how the real steps' peak memory was measured
    run_steps: Optional[int] = None  # the planned run's updates (the task's max_steps), where the task states them
    run_batch: Optional[int] = None  # its micro-batch (the task's batch_size), with accumulation_steps
    predicted_peak_bytes: Optional[int] = None  # at max_batch, with the resident state (None in older files)
    margin: float = 0.0  # kept below usable_bytes, a fraction of that peak: the measured noise of the peak
    margin_source: str = ""  # what the margin rests on: the readings' spread, or the instrument's resolution
    cost_plan: str = ""  # the cost ahead, said before the real steps: at most so many samples, against the planned run
    cost_notes: list[str] = field(default_factory=list)  # what the cap on the cost cut, or a given setting took over it
    # one validation batch timed as a run's evaluations take it: {"batch", "batches", "seconds" (a batch's), "spread",
    # "remeasured", "busy"}; None without validation data or timings (and in older files)
    eval_time: Optional[dict[str, Any]] = None

    @property
    def plan(self) -> list[dict[str, Any]]:
        """Deprecated name of :attr:`splits` (removed in 0.3.0)."""
        _OLD_SPLITS.warn()
        return self.splits

    @property
    def plan_reason(self) -> str:
        """Deprecated name of :attr:`splits_reason` (removed in 0.3.0)."""
        _OLD_SPLITS_REASON.warn()
        return self.splits_reason

    @property
    def step_times(self) -> list[list[float]]:
        """[micro-batch, seconds per micro-step] from the timed steps ([] without them): what prices a
        search's trials (:mod:`tunekit.results.step_time`)."""
        return step_curve(self.throughput)

    def eval_seconds(self, batch: int, batches: int) -> Optional[float]:
        """Predicted seconds of an evaluation of ``batches`` validation batches of ``batch`` samples, from the
        timed one (per sample where the batch differs); None where none was timed, or it was timed busy."""
        t = self.eval_time
        if not t or t.get("busy") or not t.get("seconds"):
            return None
        per_batch = float(t["seconds"]) * (1.0 if batch == int(t["batch"]) else batch / int(t["batch"]))
        return batches * per_batch

    @property
    def memory_warning(self) -> Optional[str]:
        """The warning on how the real steps' memory was measured (in this process, and why), or None."""
        return next((w for w in self.warnings if w.startswith(MEMORY_WARNING)), None)

    @property
    def busy_batches(self) -> list[int]:
        """The timed batches left out: still spread after being timed again (the machine was busy)."""
        return [int(t["batch"]) for t in self.throughput if t.get("busy")]

    @property
    def real_steps(self) -> int:
        """Real steps that the search for the largest batch took."""
        return len(self.tried)

    @property
    def run_samples(self) -> Optional[int]:
        """Samples the planned run draws, where its length and batch are known: the probe's cost set beside it."""
        if self.run_steps is None or self.run_batch is None:
            return None
        return self.run_steps * self.run_batch * self.accumulation_steps

    @property
    def run_seconds(self) -> Optional[float]:
        """The planned run's seconds at the speed the probe timed (None without timings or a known run)."""
        curve = self.step_times
        if self.run_steps is None or self.run_batch is None or not curve:
            return None
        return self.run_steps * update_seconds(curve, self.run_batch, self.accumulation_steps)

    def cost(self) -> str:
        """What the probe spent, in seconds and samples, beside what the planned run will (and, where the probe
        planned it, what it said it would spend at most, and what its cap cut)."""
        text = f"the probe took {format_seconds(self.seconds)} and {self.samples:,} samples ({self.updates} updates)"
        if self.run_samples is not None:
            run = f"{self.run_steps} updates at batch {self.run_batch * self.accumulation_steps}"
            secs = self.run_seconds
            busy = secs is None and bool(self.throughput)  # every timing taken while the machine was busy
            text += (f": {self.samples / self.run_samples:.2f}x the samples"
                     + (f" and {self.seconds / secs:.2f}x the seconds" if secs else "")
                     + f" of the planned run ({run}): {self.run_samples:,} samples"
                     + (f", ~{format_seconds(secs)} at the speed measured" if secs is not None else "")
                     + (", its seconds not predicted (the machine was busy)" if busy else ""))
        before = [f"cost planned: {self.cost_plan}"] if self.cost_plan else []
        return "\n".join(before + [f"cost: {n}" for n in self.cost_notes] + [text])

    def memory_model(self) -> MemoryModel:
        m = self.memory
        phases = {k: PhaseFit(v["fixed"], v["per_sample"], [tuple(x) for x in v.get("lines", [])]) for k, v in m["phases"].items()}
        extra = PhaseFit(**m["extra"]) if m.get("extra") else None
        return MemoryModel(phases, m["static"],
                           {int(k): v for k, v in m["traces"].items()}, m["accumulation_steps"], extra)

    def predicted_peak(self, batch: int) -> float:
        return self.memory_model().peak(batch)

    def __post_init__(self) -> None:  # a dict given (by hand, or from a 0.1.0 file) becomes its record
        self.settings = ProbeRunSettings.of(self.settings or {})  # type: ignore[assignment]

    def __repr__(self) -> str:  # the memory model and timings run long: table() has the detail
        crit = "none" if self.critical_batch is None else f"{self.critical_batch:.0f}"
        return (f"ProbeResult(device={self.device!r}, max_batch={self.max_batch}, knee_batch={self.knee_batch}, "
                f"critical_batch={crit}, samples={self.samples})")

    def plot(self, ax: Any = None) -> Any:
        """Predicted peak memory against batch size with the budget, and throughput on a second axis.

        Memory is on a log axis: a budget of tens of GiB and a model of a few MiB are both read
        off it, and so is each phase's share. The budget is labelled inside the axes, in the band
        above its line that nothing else is drawn in; the legend sits below the axes, off the data.
        """
        from matplotlib.ticker import FuncFormatter

        ax = new_axes(ax, figsize=(7.0, 5.4))
        mm = self.memory_model()
        top = max(self.max_batch, self.predicted_max_batch, 2)
        bs = np.unique(np.geomspace(1, top * 1.5, 60).astype(int))
        for (phase, fit), color in zip(mm.phases.items(), ("C0", "C1", "C9")):
            ax.plot(bs, [max(fit(b), 1.0) for b in bs], lw=1, ls="--", color=color, label=f"{phase} (predicted)")
        ax.plot(bs, [mm.peak(b) for b in bs], color="k", lw=2, label="step peak (predicted)")
        ok = [t for t in self.tried if t.get("peak_bytes")]
        if ok:
            ax.plot([t["batch"] for t in ok], [t["peak_bytes"] for t in ok], "ko", label="measured")
        ax.axhline(self.budget_bytes, color="C3", lw=1.5, label="budget")
        ax.axhline(self.usable_bytes, color="C3", lw=1, ls=":", label=f"budget less {self.headroom:.0%} headroom")
        ax.axvline(self.max_batch, color="C3", lw=1, alpha=0.6)
        ax.set_xscale("log", base=2)
        ax.set_yscale("log", base=2)
        low = max(1.0, 0.5 * min(mm.peak(1), min(max(f(1), 1.0) for f in mm.phases.values())))
        high = max([float(self.budget_bytes)] + [mm.peak(b) for b in bs] + [float(t["peak_bytes"]) for t in ok])
        # A band of 15% of the height above the budget (or the curve, where it runs past it) for the budget's label.
        ax.set_ylim(low, high * (high / low) ** (0.15 / 0.85))
        ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: format_bytes(v).replace(".00", "")))
        ax.set_xlabel("micro-batch size")
        ax.set_ylabel("memory (log scale)")
        self._label_budget(ax)
        handles, labels = ax.get_legend_handles_labels()
        if self.throughput:
            ax2 = ax.twinx()
            speeds = [t["samples_per_s"] for t in self.throughput]
            line, = ax2.plot([t["batch"] for t in self.throughput], speeds, "o-", color="C2", label="throughput")
            # Throughput stays below the budget's line, clear of its label.
            ax2.set_ylim(0.0, 1.15 * max(speeds) / self._budget_height(ax) if max(speeds) > 0 else 1.0)
            ax2.set_ylabel("samples / s", color="C2")
            handles.append(line)
            labels.append("throughput")
            if self.knee_batch:
                handles.append(ax.axvline(self.knee_batch, color="C2", ls="-.", lw=1.2))
                labels.append(f"knee: {self.knee_batch}")
        if self.critical_batch and math.isfinite(self.critical_batch):
            handles.append(ax.axvline(self.critical_batch, color="C4", ls="-.", lw=1.2))
            labels.append(f"critical batch: {self.critical_batch:.0f}")
        ax.set_title(f"probe: max batch {self.max_batch} on {self.device}")
        ax.legend(handles, labels, fontsize="small", loc="upper center", bbox_to_anchor=(0.5, -0.14), ncol=3,
                  frameon=False)
        return ax

    def _budget_height(self, ax: Any) -> float:
        """Where the budget's line is, as a fraction of the axes' height (the y axis is log)."""
        low, high = ax.get_ylim()
        return math.log(self.budget_bytes / low) / math.log(high / low)

    def _label_budget(self, ax: Any) -> None:
        """The budget's size and where it came from, written just above its line, inside the axes
        (a long source is wrapped, so the label never runs past the right axis)."""
        text = textwrap.fill(f"budget {format_bytes(self.budget_bytes)}: {self.budget_source}", 60)
        ax.annotate(text, xy=(0.01, self.budget_bytes), xycoords=("axes fraction", "data"), xytext=(0, 2),
                    textcoords="offset points", ha="left", va="bottom", fontsize="small", color="C3",
                    bbox=dict(facecolor="white", edgecolor="none", alpha=0.8, pad=1.0))

    def table(self) -> str:
        mm = self.memory_model()
        st = mm.static
        lines = [
            f"memory model ({self.precision}, accumulation {self.accumulation_steps}, {self.device}):",
            f"  parameters {format_bytes(st['params'])}, gradients {format_bytes(st['grads'])}, "
            f"optimizer state {format_bytes(st['optimizer'])}, buffers {format_bytes(st['buffers'])}",
            "  per-sample: " + ", ".join(f"{p} {format_bytes(f.per_sample)}" for p, f in mm.phases.items()),
            f"budget {format_bytes(self.budget_bytes)} ({self.budget_source}), headroom {self.headroom:.0%} "
            f"-> usable {format_bytes(self.usable_bytes)}",
            f"largest batch that fits: {self.max_batch} (predicted {self.predicted_max_batch}, "
            f"peak {format_bytes(self.predicted_peak_bytes or mm.peak(max(self.max_batch, 1)))}; "
            f"{self.real_steps} real step(s))"
            + (f"; capped by the dataset ({self.dataset_size} samples)" if self.dataset_size and self.max_batch >= self.dataset_size else ""),
        ]
        if self.margin_source:
            lines.append(f"  margin {self.margin:.1%}: {self.margin_source}")
        if self.throughput:
            lines += self._throughput_lines()
        if self.memory_measured and not any(self.memory_measured in w for w in self.warnings):
            lines.append(f"memory measured as: {self.memory_measured}")
        for w in self.warnings:
            lines.append(f"WARNING: {w}")
        if self.critical_batch is not None and self.critical_batch_range is not None:
            lo, hi = self.critical_batch_range
            lines.append(f"critical batch (gradient noise scale B_simple): {self.critical_batch:.0f} "
                         f"(68% interval {lo:.0f} .. {hi:.0f})")
        if self.splits:
            why = f" ({self.splits_reason})" if self.splits_reason else ""
            lines.append(f"splits for effective batch {self.splits[0]['effective_batch']}{why}, best first:")
            for p in self.splits[:5]:
                speed = (f"~{p['samples_per_s']:.0f} samples/s" if math.isfinite(p["samples_per_s"])
                         else "speed not timed")
                lines.append(f"  micro-batch {p['micro_batch']:>6} x {p['accumulation_steps']:>3} accumulation"
                             f"   {speed}, peak {format_bytes(p['peak_bytes'])}")
        for rule, v in self.lr_scaling.items():
            if isinstance(v, dict):
                lines.append(f"LR {v['from_lr']:.3g} at batch {v['from_batch']} -> {v['lr']:.3g} at batch {v['to_batch']} ({rule} rule)")
        return "\n".join(lines)

    def _throughput_lines(self) -> list[str]:
        """The timed batches, each marked where it was timed again (the machine was busy) or is left out (still
        busy after that), and the fastest batch and the knee of the others."""
        lines = [f"{'batch':>8} {'samples/s':>10}"]
        for t in self.throughput:
            mark = "  <- knee" if t["batch"] == self.knee_batch else ""
            if t.get("busy"):
                mark += "  busy: left out (still spread after timing it again)"
            elif t.get("remeasured"):
                mark += f"  timed again ({t['remeasured']}x): the machine was busy"
            lines.append(f"{t['batch']:>8} {t['samples_per_s']:>10.1f}{mark}")
        if self.fastest_batch is None:
            lines.append("fastest batch and knee not known: every timing was taken while the machine was busy")
        else:
            quiet = " (of the timings taken while the machine was quiet)" if self.busy_batches else ""
            lines.append(f"fastest batch {self.fastest_batch}; knee (within 5% of the best) {self.knee_batch}{quiet}")
        t = self.eval_time
        if t:
            busy = "  busy: left out (still spread after timing it again)" if t.get("busy") else ""
            lines.append(f"evaluation: a validation batch of {t['batch']} takes {format_seconds(float(t['seconds']))} "
                         f"(forward only; {t['batches']} batches timed){busy}")
        return lines

    def summary(self) -> str:
        """:meth:`table` and what the probe cost, planned and spent (what ``tunekit probe`` prints)."""
        return f"{self.table()}\n{self.cost()}"

    def __str__(self) -> str:  # print(result): what the CLI prints; repr stays short
        return self.summary()
