"""``SearchResult``: a finished (or interrupted) search and its table (its plots: :mod:`.search_plots`).

Imports no training code: loading or redrawing a result is quick.
Compute is counted in the budget's currency first (training samples drawn, shown in the budget's unit:
samples, tokens, epochs or updates; device seconds under a budget in device time), pruned trials' and
the probes' included, with the other two (samples, optimizer updates, device seconds) beside it: the
search spends and plans in the budget's currency alone. Device seconds are each trial's measured time,
beside the time the probe's timed steps predicted for its updates (and its evaluations, where the probe timed a
validation batch).
"""

from __future__ import annotations

# Imported where used, not at the top: matplotlib, optuna, torch, tqdm; importing this module does not pay for them.
import csv
import dataclasses
import io
import json
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

from tunekit.errors import UsageError
from tunekit.objective import objective_of
from tunekit.results.base import Result, write_file
from tunekit.results.confirmation import Confirmation
from tunekit.results.search_plots import SearchPlots, trained_lr, trial_kind
from tunekit.results.step_time import format_seconds

__all__ = ["SearchResult", "write_report", "trial_kind"]

# "lr" is the LR the trial trained at; the param column "lr_ref" is the LR at the range test's batch,
# which the trial's own batch rescales (it is the search's lr parameter).
CSV_FIELDS = ("number", "state", "value", "val_loss", "lr", "samples", "updates", "micro_batch", "accumulation_steps",
              "seconds", "predicted_seconds", "diverged", "error")


@dataclass
class SearchResult(SearchPlots, Result):
    """A search's outcome: its best trial (value, parameters, config), every trial, the probes that seeded it."""

    _stem = "search"

    study_name: str
    storage: str
    space: str
    direction: str
    # The answer's value: the best trial's, or with confirmation the chosen configuration's mean over its runs
    # (the best single value is then confirmation.best_single).
    best_value: Optional[float]
    best_params: dict[str, Any]
    best_config: dict[str, Any]
    trials: list[dict[str, Any]]
    seed_params: dict[str, Any]
    distributions: dict[str, str]
    budget: dict[str, Any] = field(default_factory=dict)
    task: Optional[str] = None  # the task's spec, when the search was given one (what `tunekit train --config` loads)
    plan: dict[str, Any] = field(default_factory=dict)
    probe_samples: int = 0
    seconds: float = 0.0
    seed: int = 0
    sampler_seed: int = 0
    lr_find: Optional[dict[str, Any]] = None
    probe: Optional[dict[str, Any]] = None
    # Computed by the search, where Optuna is at hand, so that a report needs no Optuna.
    param_importances: Optional[dict[str, float]] = None
    objective: str = "loss"  # what ``value`` is: a metric's name; ``direction`` says which way is better
    probe_seconds: float = 0.0  # the probes' own time (the range test's and the batch probe's)
    device: Optional[str] = None  # where the trials ran (and the probe timed the steps that price them)
    time_limit: Optional[float] = None  # the device seconds after which no trial started, if one was set
    # The best configuration in the terms of the user's Hugging Face Trainer (the TrainingArguments to
    # change) or LightningModule (its hyperparameters), when the search was given one.
    best_theirs: Optional[dict[str, Any]] = None
    theirs_kind: Optional[str] = None
    keep: str = "best"  # which trials' weights were kept: best, all, none
    best_weights: Optional[str] = None  # the best trial's weights file, where it was kept
    # Ranges widened past the space's to hold the task's own value: name -> [low, high] as searched.
    widened: dict[str, list[float]] = field(default_factory=dict)
    # The best trials run again at fresh seeds (Confirm): the configuration chosen by its mean, each confirmed
    # one's values, how much the best single value overstated it. None: the search confirmed none.
    confirmation: Optional[Confirmation] = None
    # Where confirmation was asked for and not all its runs ran (the time limit reached, the search stopped):
    # how many did, and what the answer is then (results.confirmation.shortfall). None: all ran, or none asked.
    confirm_note: Optional[str] = None

    def __post_init__(self) -> None:  # a dict (from search.json) becomes its record
        self.confirmation = Confirmation.of(self.confirmation)

    def _amount(self, samples: float) -> str:
        """``samples`` in the budget's unit, as people write it: 19,040 samples, 1.5 epochs."""
        x = self.in_unit(samples)
        return f"{x:,.0f}" if self.unit in ("samples", "tokens") else f"{x:,.3g}"

    def __repr__(self) -> str:  # the fields run to kilobytes: table() has the detail
        best = "none" if self.best_value is None else f"{self.best_value:.4g}"
        return (f"SearchResult(study={self.study_name!r}, trials={len(self.trials)}, best_value={best}, "
                f"compute={self._amount(self.compute)} {self.unit})")

    @property
    def compute(self) -> int:
        """Training samples drawn: every trial's, plus the probes'."""
        return self.probe_samples + sum(int(t.get("samples") or 0) for t in self.trials)

    @property
    def updates(self) -> int:
        """Optimizer updates made: every trial's, plus the probes' (the batch probe's and the range test's)."""
        probes = int((self.probe or {}).get("updates") or 0) + int((self.lr_find or {}).get("updates") or 0)
        return probes + sum(int(t.get("updates") or 0) for t in self.trials)

    @property
    def device_seconds(self) -> float:
        """Device time spent: every trial's measured seconds (pruned and failed ones too), plus the probes'."""
        return self.probe_seconds + sum(float(t.get("seconds") or 0.0) for t in self.trials)

    @property
    def predicted_seconds(self) -> Optional[float]:
        """The device time the probe's timed steps predicted for the trials' updates (None without timings)."""
        known = [float(t["predicted_seconds"]) * _ran(t) for t in self.trials if t.get("predicted_seconds") is not None]
        return sum(known) if known else None

    def in_unit(self, samples: float) -> float:
        """``samples`` in the budget's unit (samples, tokens, epochs or updates at the task's batch); samples
        for a budget in device time (their seconds are measured, not converted)."""
        return float(samples) * float(1.0 if self._timed else self.budget.get("per_sample", 1.0))

    @property
    def unit(self) -> str:
        """The unit samples are shown in: the budget's, or samples for a budget in device time."""
        return "samples" if self._timed else str(self.budget.get("unit", "samples"))

    @property
    def _timed(self) -> bool:
        return self.budget.get("unit") == "seconds"

    def _full_trials(self) -> float:
        """Compute in full trials: device time over the trial's, or samples over what a complete trial drew
        (a trial runs whole updates, at least two: a budget below that buys a trial more than the budget)."""
        if self._timed:
            return self.device_seconds / float(self.budget["amount"])
        done = [int(t["samples"]) for t in self.trials if t["state"] == "COMPLETE" and t.get("samples")]
        per_trial = sum(done) / len(done) if done else int(self.budget.get("samples") or 1)
        return self.compute / max(1.0, per_trial)

    def trial(self, number: Optional[int] = None) -> dict[str, Any]:
        """Trial ``number``, or the best complete one (with confirmation, the chosen configuration's original trial)."""
        if number is None:
            chosen = self.confirmation.chosen if self.confirmation is not None else None
            best = next((t for t in self.trials if t["number"] == chosen), None) or objective_of(self).best(self.trials)
            if best is None:
                raise UsageError(f"study '{self.study_name}' has no complete trial to re-run: pass trial=N")
            return best
        for t in self.trials:
            if t["number"] == number:
                return t
        raise UsageError(f"study '{self.study_name}' has no trial {number}: give one of "
                         f"{', '.join(str(t['number']) for t in self.trials)}")

    # The Task (or Hugging Face / Lightning object, as a Task) the search trained, in the process that ran it.
    made_from: Any = field(default=None, repr=False, compare=False)

    def to_dict(self) -> dict[str, Any]:
        out = dataclasses.asdict(dataclasses.replace(self, made_from=None))  # an object of this process, not saved
        out.pop("made_from")
        return out

    def weights_of(self, number: Optional[int] = None) -> dict[str, Any]:
        """The kept file of trial ``number`` (the best complete one by default), as ``torch.load`` reads it:
        ``state_dict``, ``trial``, ``value``, ``config``."""
        from tunekit.integrations.weights import load_weights

        t = self.trial(number)
        path = t.get("weights") if number is not None else (self.best_weights or t.get("weights"))
        if not path or not Path(path).is_file():
            rerun = f"tunekit train --config search.json{'' if number is None else f' --trial {number}'}"
            if t["state"] != "COMPLETE":  # only a finished trial has a value, and the weights that gave it
                state = t["state"].lower()
                why = (f"trial {number} was {state}, and a {state} trial keeps no weights (only a finished "
                       f"trial's are kept, under keep='best' or 'all'): re-run it to its end: {rerun}")
            elif self.keep == "none":
                why = f"the search kept no weights (keep='none'): search again with keep='best', or re-run it: {rerun}"
            elif number is None or number == self.trial().get("number"):
                gone = f" (no file at {path})" if path else ""
                why = f"the best trial's weights are not on disk{gone}: re-run it exactly: {rerun}"
            elif self.keep == "all":
                gone = f" (no file at {path})" if path else ""
                why = f"trial {number}'s weights are not on disk{gone}: re-run it exactly: {rerun}"
            else:
                why = (f"trial {number}'s weights are not kept: only the best trial's are under keep='best'; pass "
                       f"keep='all' to keep every finished trial's, or re-run it: {rerun}")
            raise UsageError(why)
        return load_weights(path)

    def best_model(self, task: Any = None, trial: Optional[int] = None) -> Any:
        """The best trial's model (or trial ``trial``'s), with its kept weights: built by the task's own factory,
        with the trial's seed, on the CPU, in eval mode. ``task``: the task spec or Task the search ran (by
        default the one it was given in this process, or its spec from search.json)."""
        from tunekit.inputs.task import Task
        from tunekit.integrations.task_spec import load_task

        saved = self.weights_of(trial)
        built = task if task is not None else self.made_from if self.made_from is not None else self.task
        if built is None:
            raise UsageError("best_model() needs the task this search ran: pass best_model(task=...) (its spec "
                             "or Task object)")
        if not isinstance(built, Task):
            built = load_task(built, saved.get("task_config") or None)
        model = built.make_model(int((saved.get("config") or {}).get("seed", self.seed)))
        model.load_state_dict(saved["state_dict"])
        return model.eval()

    def load_best_into(self, obj: Any, trial: Optional[int] = None) -> Any:
        """The best trial's weights (or trial ``trial``'s) loaded into the model of ``obj``: a ``torch.nn.Module``
        (a LightningModule too), a Hugging Face ``Trainer`` (its ``model``) or a ``LightningRun`` (its
        ``module``); returns the model loaded. The configuration to train again with is ``best_theirs``."""
        from tunekit.integrations.weights import load_into

        return load_into(obj, self.weights_of(trial)["state_dict"])

    def write_csv(self, path: str | Path) -> None:
        keys = sorted({k for t in self.trials for k in t.get("params", {})})
        buf = io.StringIO(newline="")
        w = csv.writer(buf)
        w.writerow([*CSV_FIELDS, *("lr_ref" if k == "lr" else k for k in keys)])
        for t in self.trials:
            w.writerow([trained_lr(t) if k == "lr" else t.get(k) for k in CSV_FIELDS]
                       + [t["params"].get(k) for k in keys])
        write_file(path, buf.getvalue())

    def importances(self) -> dict[str, float]:
        """Optuna's parameter importances over the completed trials (empty with fewer than 3)."""
        if self.param_importances is not None:
            return dict(self.param_importances)
        import optuna  # a result written before param_importances was stored

        done = [t for t in self.trials if t["state"] == "COMPLETE" and t["value"] is not None]
        names = sorted({k for t in done for k in t["params"]})
        multi = [n for n in names if len({json.dumps(t["params"].get(n)) for t in done}) > 1]
        if len(done) < 3 or not multi:
            return {}
        optuna.logging.set_verbosity(optuna.logging.ERROR)  # no "A new study created in memory" line
        study = optuna.create_study(direction=self.direction)
        dists = {n: optuna.distributions.json_to_distribution(self.distributions[n]) for n in multi}
        for t in done:
            if all(n in t["params"] for n in multi):
                study.add_trial(optuna.trial.create_trial(params={n: t["params"][n] for n in multi},
                                                          distributions=dists, value=t["value"]))
        try:
            with warnings.catch_warnings():  # on a few tied trials PED-ANOVA warns; the plot says "a rough guess"
                warnings.simplefilter("ignore", UserWarning)
                return dict(optuna.importance.get_param_importances(study))  # PED-ANOVA: deterministic
        except (RuntimeError, ValueError):  # too few distinct trials for the forest
            return {}

    def table(self) -> str:
        counts: dict[str, int] = {}
        for t in self.trials:
            counts[t["state"]] = counts.get(t["state"], 0) + 1
        sign, name = objective_of(self).sign, self.objective[:9]
        lines = [f"{'trial':>5} {'state':>9} {name:>9} {'batch':>11} {'updates':>7} {'device s':>13}  "
                 "params (lr as trained)"]
        for t in sorted(self.trials, key=lambda t: (t["value"] is None, sign * t["value"] if t["value"] is not None else 0)):
            val = "" if t["value"] is None else f"{t['value']:.4f}"
            note = " (diverged)" if t.get("diverged") else (f" ({t['error'][:40]})" if t.get("error") else "")
            if t.get("confirm_of") is not None:  # a confirmation run: the trial it runs again, at its own seed
                note += f" (confirms {t['confirm_of']}, seed {(t.get('config') or {}).get('seed')})"
            shown = {**t["params"], "lr": trained_lr(t)} if "lr" in t["params"] else t["params"]
            params = ", ".join(f"{k}={_fmt(v)}" for k, v in sorted(shown.items()))
            split = f"{t.get('micro_batch') or '-'}x{t.get('accumulation_steps') or '-'}"
            lines.append(f"{t['number']:>5} {t['state']:>9} {val:>9} {split:>11} {t.get('updates') or 0:>7} "
                         f"{_device_cell(t):>13}  {params}{note}")
        lines.append("trials: " + ", ".join(f"{v} {k.lower()}" for k, v in sorted(counts.items()))
                     + f"; {self._compute_line()}; {self.seconds:.1f} s wall")
        lines.append(self._device_line())
        lines += self._lr_source()
        lines += self._batch_source()
        lines += [f"{name} searched over {lo:.3g}..{hi:.3g}: widened to hold the task's own value"
                  for name, (lo, hi) in sorted(self.widened.items())]
        if self.confirmation is not None:
            lines += self.confirmation.lines(self.objective)
        if self.confirm_note:
            lines.append(self.confirm_note)
        if self.best_value is not None:
            mean = f" (the mean of trial {self.confirmation.chosen}'s runs)" if self.confirmation is not None else ""
            lines.append(f"best {self.objective} {self.best_value:.4f}{mean}: "
                         + ", ".join(f"{k}={_fmt(v)}" for k, v in sorted(self.best_config.items())))
            lines += self._full_run()
        if self.best_theirs is not None:
            lines.append(f"in your {self.theirs_kind}'s terms: "
                         + (", ".join(f"{k}={_fmt(v)}" for k, v in sorted(self.best_theirs.items())) or "as it is"))
        return "\n".join(lines)

    def _compute_line(self) -> str:
        """What the search spent, led by the budget's currency (the one it plans and spends in), the other two
        beside it: samples (where the budget is not in them), optimizer updates, device time."""
        full = f"{self._full_trials():.2f} full trials"
        if self._timed:
            return (f"compute {_secs(self.device_seconds)} of device time ({_secs(self.probe_seconds)} in probes, {full}); "
                    f"beside it {self.compute:,} samples, {self.updates:,} optimizer updates")
        samples = f"{self.compute:,} samples, " if self.unit != "samples" else ""
        return (f"compute {self._amount(self.compute)} {self.unit} ({self._amount(self.probe_samples)} in probes, {full}); "
                f"beside it {samples}{self.updates:,} optimizer updates, {_secs(self.device_seconds)} of device time")

    def _device_line(self) -> str:
        """Device time: measured in the trials and the probes, beside what the timed steps predicted."""
        predicted = self.predicted_seconds
        trials = self.device_seconds - self.probe_seconds
        said = f" ({self._priced_what} predicted {_secs(predicted)})" if predicted is not None else ""
        limit = ""
        if self.time_limit is not None:
            limit = (f"; limit {_secs(self.time_limit)}"
                     + (", reached: no trial started after it" if self.device_seconds >= self.time_limit else ""))
        return (f"device time {_secs(self.device_seconds)}{' on ' + self.device if self.device else ''}: trials "
                f"{_secs(trials)}{said}, probes {_secs(self.probe_seconds)}{limit}")

    def _full_run(self) -> list[str]:
        """The recommended configuration's full run, as the probe's timed steps price it."""
        best = self.trial() if self.best_value is not None else None
        if best is None or best.get("predicted_seconds") is None:
            return []
        return [f"a full run of it: {best.get('updates')} updates at batch {best.get('micro_batch')}x"
                f"{best.get('accumulation_steps')}, predicted {_secs(float(best['predicted_seconds']))} of device time "
                f"for its {self._priced_what.removeprefix('their ')} (measured {_secs(float(best.get('seconds') or 0.0))}"
                + ("" if self._evals_priced else " with its evaluations") + ")"]

    @property
    def _evals_priced(self) -> bool:
        """Whether the predicted seconds price the trials' evaluations (the probe timed a validation batch)."""
        return self.plan.get("eval_seconds") is not None

    @property
    def _priced_what(self) -> str:
        return "their updates and evaluations" if self._evals_priced else "their updates"

    def _lr_source(self) -> list[str]:
        """Where the LR range came from, said next to its number: the search's own range test is
        lr_find's for a run of one full trial (refined when 5% of that trial buys short runs), or the
        caller's saved result."""
        lf = self.lr_find or {}
        if lf.get("suggestion") is None:
            return []
        how = "refined by short runs" if lf.get("refined") else "the curve alone, no short runs"
        if not lf.get("own", not lf.get("refined")):  # results saved before "own" was recorded: refined = saved
            return [f"LR seeded from the saved lr_find result: {lf['suggestion']:.3g} ({how})"]
        steps = lf.get("run_steps")
        run = f" for a run of one trial ({steps:,} update{'s' if steps != 1 else ''})" if steps else ""
        more = "" if lf.get("refined") else ": the design's full-length trials around it check it"
        return [f"LR seeded from the search's own range test: {lf['suggestion']:.3g}{run} ({how}{more})"]

    def _batch_source(self) -> list[str]:
        """Why the batch choices centre where they do, and which way the design's batch step went (the
        budget's currency, and under device time the probe's stored timed steps, decided it)."""
        probe = self.probe or {}
        lines = [f"critical batch {probe['noise_not_measured']}"] if probe.get("noise_not_measured") else []
        if probe.get("memory_warning"):  # measured in the search's process, not a clean child: said as the probe says it
            lines.append(f"probe's {probe['memory_warning']}")
        if probe.get("busy_batches"):  # timed while the machine was busy, timed again, still spread: not acted on
            lines.append(f"probe's timings at batch {', '.join(map(str, probe['busy_batches']))} were taken while the "
                         "machine was busy: left out of the device-time predictions")
        d = probe.get("design_batch")
        if d:
            lines.append(f"design's batch step: {d['from']:g} -> {d['step']:g}" + _priced(d))
        return lines

    def summary(self, out: str | Path | None = None) -> str:
        """:meth:`table`, what the search cost, where it is, and how to re-run its best trial
        (what ``tunekit search`` prints); ``out`` is the folder the search wrote to, if any."""
        wrote = f"; wrote {out}/search.json, trials.csv, search.png" if out is not None else ""
        where = "held in memory (nothing to resume)" if self.storage == "in-memory" else f"in {self.storage}"
        lines = [self.table(), f"search took {self.seconds:.1f}s{wrote}; study '{self.study_name}' {where}"]
        if self.weights_line():
            lines.append(self.weights_line())
        if self.best_value is not None and out is not None:
            lines.append(f"re-run the best trial exactly: tunekit train --config {out}/search.json")
        return "\n".join(lines)

    def weights_line(self) -> str:
        """Where the best trial's weights are (empty when none were kept, or the file is gone)."""
        if not self.best_weights:
            return ""
        if not Path(self.best_weights).is_file():
            return f"the best trial's weights were at {self.best_weights}: the file is gone"
        kept = self.confirmation.kept if self.confirmation is not None else None
        whose = "the best trial's weights" if kept is None else f"the chosen configuration's weights (trial {kept}'s run)"
        return f"{whose}: {self.best_weights} (result.best_model(), or torch.load(path)['state_dict'])"

    def _save_more(self, out: Path) -> list[Path]:
        """The trials as trials.csv, beside search.json and search.png."""
        self.write_csv(out / "trials.csv")
        return [out / "trials.csv"]


def _priced(design: dict[str, Any]) -> str:
    """Why the design's batch step went the way it did: the budget's currency, or what the probe's timed steps priced."""
    share, line, centre = design.get("twice_share"), design["unsaturated"], design["centre"]
    if not design.get("in_time", True):
        return (" (the budget is not device time: a smaller batch buys more updates of the same samples; "
                "twice the batch would only save time)")
    if share is None:
        return " (no timed steps to price a larger batch)"
    why = ("the device is not saturated" if design["doubled"] else
           "cheaper, but the space offers no larger batch" if share <= line else "over that, it quarters it")
    return (f"; the timed steps price an update of {2 * centre:g} at {share:.2f} of two of {centre:g} "
            f"(doubled at most {line:g}: {why})")


def _ran(trial: dict[str, Any]) -> float:
    """The fraction of its planned updates a trial ran (a pruned trial's share of its prediction)."""
    if trial["state"] == "COMPLETE":
        return 1.0
    planned = (trial.get("config") or {}).get("max_steps")
    return min(1.0, float(trial.get("updates") or 0) / planned) if planned else 1.0


def _secs(seconds: Optional[float]) -> str:
    return "-" if seconds is None else format_seconds(seconds)


def _device_cell(trial: dict[str, Any]) -> str:
    """A trial's device seconds as measured / as predicted (its updates, and its evaluations where priced)."""
    measured, predicted = trial.get("seconds"), trial.get("predicted_seconds")
    m = "-" if measured is None else f"{float(measured):.1f}"
    return m if predicted is None else f"{m}/{float(predicted) * _ran(trial):.1f}"


def _fmt(v: Any) -> str:
    return f"{v:.3g}" if isinstance(v, float) else str(v)


def write_report(result: SearchResult, out_dir: Path) -> None:
    """search.json, trials.csv and search.png, written together (``result.save(out_dir)``)."""
    result.save(out_dir)
