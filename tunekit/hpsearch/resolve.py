"""A search's inputs resolved once, at its front door: every stage after takes the record.

:func:`resolve_search` takes what the user passed (a task spec, a Task, a Hugging Face Trainer or a
Lightning run; a space name, file or object; the settings) and gives a :class:`ResolvedSearch`: the
task the trials run, the space with its fixed task settings, the task's recipe and one full trial's
budget. A bad budget, space or objective fails here, before any storage is opened or a probe runs.
"""

from __future__ import annotations

import dataclasses
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

import torch

from tunekit.errors import UsageError
from tunekit.hpsearch.budget import Budget, resolve_budget
from tunekit.hpsearch.settings import SearchSettings
from tunekit.inputs.data import BatchStream, dataset_size
from tunekit.inputs.space import Entry, SearchSpace, load_space
from tunekit.inputs.task import Task
from tunekit.integrations.adapted import IntegrationWarning, in_their_terms, say_notes
from tunekit.integrations.objects import adapt_for_search
from tunekit.integrations.task_spec import absolute_spec, load_task
from tunekit.training.loop import TrainConfig, evaluate
from tunekit.training.step import resolve_device

__all__ = ["ResolvedSearch", "SearchInputs", "resolve_search", "prepare_inputs", "with_objective", "task_batch"]


@dataclass(frozen=True)
class SearchInputs:
    """The space (with ``task_config`` as fixed ``task.*`` entries), the task at its fixed
    settings, that task's recipe (a TrainConfig) and one full trial's budget."""

    space: SearchSpace
    task: Any
    cfg: Any
    budget: Budget
    task_batch: int  # the recipe's effective batch (micro-batch times accumulation): task_batch() once


@dataclass(frozen=True)
class ResolvedSearch:
    """What a search runs, resolved from the user's arguments before anything else happens."""

    settings: SearchSettings
    task: Any  # what the trials run: a Task (with an objective function among its metrics), or a spec
    named: Optional[str]  # the task's spec as the user named it, for the result (None for an object)
    inputs: SearchInputs
    adapted: Any = None  # their object (a Trainer, a Lightning run) taken as a Task, or None


def resolve_search(task: Any, space: str | SearchSpace, settings: SearchSettings) -> ResolvedSearch:
    """The task (their object adapted, the objective function added), the space (what their object
    cannot apply fixed), the recipe and the budget: checked, before the storage or a probe. A task file is
    named by its absolute path from here on: the workers, the study's spec and search.json hold that."""
    task = absolute_spec(task)
    named = task if isinstance(task, str) else None
    adapted = adapt_for_search(task)
    if adapted is None:
        task = with_objective(task, settings)
        return ResolvedSearch(settings, task, named, prepare_inputs(task, space, settings))
    say_notes(adapted)
    with adapted.speaking():  # a refusal of their object's settings, said in their terms
        space = what_they_can_apply(space, adapted)
        task = with_objective(adapted.task, settings)
        return ResolvedSearch(settings, task, named, prepare_inputs(task, space, settings), adapted)


def what_they_can_apply(space: str | SearchSpace, adapted: Any) -> str | SearchSpace:
    """A shipped space with the settings the object cannot apply (a module without a scheduler: schedule,
    warmup, decay floor) fixed at its recipe's; a space of the user's own is searched as given, and said."""
    if not adapted.cannot_apply:
        return space

    sp = space if isinstance(space, SearchSpace) else load_space(space)
    tuned = [k for k, v in adapted.cannot_apply.items()
             if k in sp.entries and not (sp.entries[k].type == "fixed" and sp.entries[k].value == v)]
    if not tuned:
        return space
    if isinstance(space, SearchSpace) or Path(str(space)).suffix == ".toml":  # the user's own: as asked
        warnings.warn(f"{adapted.kind}: the space searches {', '.join(tuned)}, which its training does not apply "
                      "(configure_optimizers returns no scheduler): best_theirs may hold a schedule it cannot run",
                      IntegrationWarning, stacklevel=4)
        return space
    fixed = {key: Entry(key, "fixed", value=adapted.cannot_apply[key]) for key in tuned}
    return SearchSpace(sp.name, sp.description, {**sp.entries, **fixed})


def prepare_inputs(task: Any, space: str | SearchSpace, settings: SearchSettings) -> SearchInputs:
    """The search's inputs, checked before the storage is opened or a probe runs."""
    sp = space if isinstance(space, SearchSpace) else load_space(space)
    sp = _with_task_config(sp, task, settings.task_config)
    base = _base_task(task, sp)
    cfg = TrainConfig.for_task(base, device=settings.backend.device)
    batch = task_batch(base, cfg)
    inputs = SearchInputs(sp, base, cfg, _budget(settings.budget, base, cfg, batch), batch)
    _check_objective(inputs, settings)
    return inputs


def with_objective(task: Any, settings: SearchSettings) -> Any:
    """The task the trials run: a Task object given ``objective=fn`` gets ``fn`` as one of its metrics."""
    objective = settings.objective
    if objective.fn is None:
        return task
    if not isinstance(task, Task):
        raise UsageError(f"objective=<function {objective.name}> needs the task as a Task object, whose trials "
                         "run in this process: with a task spec, give its Task metrics={'name': fn} and pass "
                         "objective='name'")
    return dataclasses.replace(task, metrics={**task.metrics, objective.name: objective.fn})


def _check_objective(inputs: SearchInputs, settings: SearchSettings) -> None:
    """An objective the task's evaluation does not give fails here, in one line, before anything runs:
    one validation batch of a fresh model is evaluated (and the task's own metric, if it is one)."""
    objective, task = settings.objective, inputs.task
    if objective.name in ("loss", "perplexity") or objective.name in task.metrics:
        return
    if objective.name != "accuracy":
        raise UsageError(objective.missing({"loss": 0.0, **dict.fromkeys(task.metrics, 0.0)}))

    device = resolve_device(settings.backend.device)
    metrics = evaluate(task.make_model(settings.seed).to(device), task.val_data, task.loss_computer(), device=device,
                       batch_size=int(task.batch_size or inputs.cfg.batch_size or 1), max_batches=1)
    if "accuracy" not in metrics:
        raise UsageError(objective.missing(metrics))


def _with_task_config(sp: SearchSpace, task: Any, task_config: Optional[dict[str, Any]]) -> SearchSpace:
    """The space with ``task_config`` (``--set KEY=VALUE``) as fixed ``task.KEY`` entries under its own."""
    if not task_config:
        return sp

    if isinstance(task, Task):
        raise UsageError("task_config needs the task as a spec (pkg.mod:fn) whose function takes a config")
    fixed = {f"task.{k}": Entry(f"task.{k}", "fixed", value=v) for k, v in task_config.items()}
    return SearchSpace(sp.name, sp.description, {**fixed, **sp.entries})


def _base_task(task: Any, sp: SearchSpace) -> Any:
    if isinstance(task, Task) and any(n.startswith("task.") for n in sp.entries):
        raise UsageError(f"space '{sp.name}' varies task hyperparameters (task.*): pass the task as a spec "
                         "(pkg.mod:fn) whose function takes a config")
    fixed_task_cfg = {n[5:]: v for n, v in sp.fixed().items() if n.startswith("task.")}
    base = task if isinstance(task, Task) else load_task(task, fixed_task_cfg or None)
    if base.val_data is None:
        raise UsageError(in_their_terms("search needs validation data to compare and prune trials: give the task "
                                        "val_data", base.origin))
    return base


def task_batch(task: Any, cfg: Any) -> int:
    """The task's own effective batch under its recipe ``cfg``: its micro-batch times accumulation."""
    return int(cfg.batch_size or task.batch_size or 1) * int(cfg.accumulation_steps or 1)


def _budget(spec: Any, task: Any, cfg: Any, batch: int) -> Budget:
    tokens = _tokens_per_sample(task, cfg) if isinstance(spec, str) and "token" in spec else None
    return resolve_budget(spec, task_batch=batch, default_updates=int(cfg.max_steps),
                          dataset_size=dataset_size(task.train_data), tokens_per_sample=tokens)


def _tokens_per_sample(task: Any, cfg: Any) -> Optional[int]:
    """Tokens in one training sample: the sequence length of integer token ids (batch, sequence)."""

    batch = next(iter(BatchStream(task.train_data, cfg.batch_size or task.batch_size, seed=0)))
    first = batch.get("input_ids") if isinstance(batch, dict) else batch[0] if isinstance(batch, (list, tuple)) else batch
    if isinstance(first, torch.Tensor) and first.ndim == 2 and not first.is_floating_point():
        return int(first.shape[1])
    return None


