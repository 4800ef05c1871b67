"""Every form of task a user gives, made a Task: :func:`load_task`, the one door of ``lr_find``, ``probe``,
``doctor``, ``train`` and ``search`` (through :func:`takes_their_objects` where a model in hand goes too).

A spec is one of:

* a built-in name: ``shapes``, ``charlm`` (``tunekit tasks`` lists them);
* ``package.module:function``, imported from ``sys.path`` (the current
  directory included);
* ``path/to/file.py:function``.

The function returns a :class:`~tunekit.Task`. If it takes a parameter, it is
called with the config dict, so a search can vary the model's own
hyperparameters (width, dropout, ...). A :class:`TaskSpec` is a spec with its config; a :class:`Task`
passes through; their objects (a Hugging Face Trainer, a LightningRun, a LightningModule, a function
returning either) become a Task of fresh models.
"""

from __future__ import annotations

import dataclasses
import functools
import importlib
import importlib.util
import inspect
import os
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from tunekit.builtin import BUILTIN_TASKS
from tunekit.errors import UsageError, shown
from tunekit.inputs.task import UNNAMED, Task
from tunekit.integrations.adapted import kind_of, say_notes
from tunekit.integrations.objects import LightningRun, adapt, adapt_for_search

__all__ = ["load_task", "list_tasks", "resolve_task_function", "TaskSpec", "task_of", "takes_their_objects",
           "absolute_spec", "same_task"]

F = TypeVar("F", bound=Callable[..., Any])

_FORMS = "a built-in name ({names}), 'package.module:function' or 'path/to/file.py:function'"


def list_tasks() -> dict[str, str]:
    """Built-in task names and their one-line descriptions."""
    return {name: desc for name, (_, desc) in BUILTIN_TASKS.items()}


def _said(text: object, limit: int = 120) -> str:
    """A spec or path as a one-line message shows it: as written where it is short and printable, else
    its repr cut to ``limit``."""
    text = str(text)
    return text if len(text) <= limit and text.isprintable() else shown(text, limit)


def _is_file(path: Path) -> bool:
    """Whether ``path`` is a file; False for a name the file system refuses (too long, a NUL byte)."""
    try:
        return path.is_file()
    except (OSError, ValueError):
        return False


def _import_file(path: Path, spec: str) -> Any:
    if not _is_file(path):
        raise UsageError(f"task file '{_said(path)}' (from task '{_said(spec)}') does not exist: check the path")
    name = f"tunekit_user_task_{abs(hash(str(path.resolve())))}"
    module_spec = importlib.util.spec_from_file_location(name, path)
    if module_spec is None or module_spec.loader is None:
        raise UsageError(f"cannot load '{path}' as Python: a task file must end in .py")
    module = importlib.util.module_from_spec(module_spec)
    # Let the file import its neighbours, as `python file.py` would.
    sys.path.insert(0, str(path.resolve().parent))
    try:
        sys.modules[name] = module
        module_spec.loader.exec_module(module)
    except (Exception, SystemExit) as exc:  # SystemExit: a file that calls sys.exit() at import
        sys.modules.pop(name, None)
        raise UsageError(f"task file '{_said(path)}' failed to import: {type(exc).__name__}: {_one_line(exc)}") from exc
    finally:
        sys.path.remove(str(path.resolve().parent))
    return module


def _import_module(modname: str, spec: str) -> Any:
    if "" not in sys.path and "." not in sys.path:
        sys.path.insert(0, "")  # the console script does not put the cwd on sys.path
    try:
        return importlib.import_module(modname)
    except ModuleNotFoundError as exc:
        if exc.name and modname.startswith(exc.name):
            raise UsageError(
                f"module '{_said(modname)}' (from task '{_said(spec)}') was not found: check the name, or give a file as path/to/file.py:function"
            ) from exc
        raise UsageError(f"module '{_said(modname)}' (from task '{_said(spec)}') failed to import: ModuleNotFoundError: {_one_line(exc)}") from exc
    except (Exception, SystemExit) as exc:  # SystemExit: a module that calls sys.exit() at import
        raise UsageError(f"module '{_said(modname)}' (from task '{_said(spec)}') failed to import: {type(exc).__name__}: "
                         f"{_one_line(exc)}") from exc


def _one_line(exc: BaseException, limit: int = 200) -> str:
    text = str(exc).strip().splitlines()
    first = text[0] if text else ""
    return first if len(first) <= limit else first[:limit - 3] + "..."


def _names_file(where: str) -> bool:
    """Whether the part of a spec before ':' names a file (``path/to/file.py``) rather than a module."""
    return where.endswith(".py") or "/" in where or "\\" in where


def absolute_spec(spec: Any) -> Any:
    """A file spec with its file's absolute path (``mytasks.py:fn`` -> ``/home/me/proj/mytasks.py:fn``), so
    a Ray worker, a shared study's worker or a later ``train --config`` started in another folder loads
    the same file; any other spec (a module, a built-in, a file that is not there) and any object as given."""
    if not isinstance(spec, str) or ":" not in spec.strip() or spec.strip() in BUILTIN_TASKS:
        return spec
    where, _, funcname = spec.strip().rpartition(":")
    if not where or not _names_file(where) or not _is_file(Path(where)):
        return spec
    return f"{os.path.abspath(where)}:{funcname}"


def same_task(a: Any, b: Any) -> bool:
    """Whether two specs name the same task: a file by its absolute path on both sides (a study that an
    older tunekit stored with a relative one matches), or, where two machines keep the project in other
    folders, a file of the same name and the same function."""
    a, b = absolute_spec(a), absolute_spec(b)
    if a == b or not (isinstance(a, str) and isinstance(b, str)):
        return a == b
    (where_a, _, fn_a), (where_b, _, fn_b) = a.strip().rpartition(":"), b.strip().rpartition(":")
    return fn_a == fn_b and _names_file(where_a) and _names_file(where_b) and Path(where_a).name == Path(where_b).name


def resolve_task_function(spec: str) -> Callable[..., Any]:
    """The function that a spec names, without calling it."""
    if not isinstance(spec, str):
        raise UsageError(_not_a_task(spec))
    if not spec.strip():
        raise UsageError(f"task spec {shown(spec)} is empty: give " + _FORMS.format(names=", ".join(BUILTIN_TASKS)))
    spec = spec.strip()
    if spec in BUILTIN_TASKS:
        return BUILTIN_TASKS[spec][0]
    if ":" not in spec:
        hint = " (did you mean 'FILE.py:function'?)" if spec.endswith(".py") else ""
        raise UsageError(f"unknown task '{_said(spec)}'{hint}: give " + _FORMS.format(names=", ".join(BUILTIN_TASKS)))
    where, _, funcname = spec.rpartition(":")
    if not where or not funcname.isidentifier():
        raise UsageError(f"task '{_said(spec)}' does not name a function after ':': give " + _FORMS.format(names=", ".join(BUILTIN_TASKS)))
    if _names_file(where):
        module = _import_file(Path(where), spec)
    else:
        module = _import_module(where, spec)
    fn = getattr(module, funcname, None)
    if fn is None:
        raise UsageError(f"'{_said(where)}' has no function '{_said(funcname)}' (from task '{_said(spec)}'): check the name after ':'")
    if not callable(fn):
        raise UsageError(f"'{_said(where)}:{_said(funcname)}' is a {type(fn).__name__}, not a function returning a tunekit.Task")
    return fn  # type: ignore[no-any-return]


def _not_a_task(obj: Any) -> str:
    return (f"a task must be a spec string or a tunekit.Task, got {shown(obj)} ({type(obj).__name__}): give "
            + _FORMS.format(names=", ".join(BUILTIN_TASKS)) + ", a Task(model=..., train_data=..., loss=...), "
            "a Hugging Face Trainer or a tunekit.integrations.LightningRun")


def _takes_config(fn: Callable[..., Any]) -> bool:
    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return False
    return any(
        p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD, p.VAR_POSITIONAL)
        for p in params
    )


def _their_objects(made: Any, spec: str) -> Task:
    """A task function may return a Hugging Face Trainer or a LightningRun: the Task of its objects
    (fresh models from its model_init or module class, else copies of its model as it is)."""
    adapted = adapt_for_search(made) if kind_of(made) is not None or isinstance(made, LightningRun) else None
    if adapted is None:
        raise UsageError(f"task '{_said(spec)}' returned a {type(made).__name__}, not a tunekit.Task: return Task(model=..., "
                         "train_data=..., loss=...), a Hugging Face Trainer or a tunekit.integrations.LightningRun")
    say_notes(adapted)
    return adapted.task


def load_task(spec: Any, config: dict[str, Any] | None = None) -> Task:
    """The Task that ``spec`` names, built with ``config`` (task hyperparameters) over a TaskSpec's own:
    what every entry point makes of the task it is given (see the module's docstring for the forms).

    A :class:`Task` passes through unchanged, and their objects become a Task of fresh models
    (``config`` must then be empty: they are built already).
    """
    if isinstance(spec, TaskSpec):
        spec, config = spec.spec, {**spec.config, **(config or {})}
    if not isinstance(spec, str):
        if config:
            raise UsageError(f"config was given with a {type(spec).__name__} object: it is built already; pass the "
                             "spec of a function that takes a config instead")
        return spec if isinstance(spec, Task) else _objects_task(spec)
    fn = resolve_task_function(spec)
    config = dict(config or {})
    if config and not _takes_config(fn):
        raise UsageError(f"task '{_said(spec)}' takes no config, but was given config {shown(sorted(config), 120)}: drop the config, or let the function take a config dict")
    try:
        task = fn(config) if _takes_config(fn) else fn()
    except UsageError:
        raise
    except (ValueError, TypeError, KeyError) as exc:
        # Almost always a config value the task function cannot use (--set width=abc).
        raise UsageError(f"task '{_said(spec)}' rejected its config {shown(config, 120)}: {type(exc).__name__}: {_one_line(exc)}") from exc
    if not isinstance(task, Task):
        task = _their_objects(task, spec)
    if task.name == UNNAMED:
        task.name = spec.rpartition(":")[2] or spec
    return task


def _objects_task(obj: Any) -> Task:
    """Their objects (a Trainer, a LightningRun, a module, a factory of either) as a Task of fresh models."""
    adapted = adapt_for_search(obj)
    if adapted is None:
        raise UsageError(_not_a_task(obj))
    say_notes(adapted)
    return adapted.task


@dataclass(frozen=True)
class TaskSpec:
    """A task by spec (``"pkg.mod:fn"``, ``"file.py:fn"``, a built-in name) with the config its function
    takes: ``TaskSpec("models.py:make_task", {"width": 64})``. A search keeps both in a shared study's
    spec, so every worker builds the same task."""

    spec: str
    config: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not isinstance(self.spec, str) or not self.spec:
            raise UsageError(f"TaskSpec needs a spec string such as 'pkg.mod:fn', got {shown(self.spec)}")
        if not isinstance(self.config, Mapping):
            raise UsageError(f"TaskSpec's config must be a dict of the task function's settings, got {shown(self.config)}: "
                             "pass e.g. TaskSpec('pkg.mod:fn', {'width': 64})")


def task_of(task: Any) -> Any:
    """A TaskSpec's spec string (its config goes with the settings); any other task as given."""
    return task.spec if isinstance(task, TaskSpec) else task


def takes_their_objects(fn: F) -> F:
    """Let ``fn(model, train_data, ...)`` (lr_find, probe, doctor) take every form of task :func:`load_task`
    takes, and a model in hand: a spec or a TaskSpec is loaded into its Task; their objects become a
    Task whose model is the one in hand, worked on where it lives, and whose defaults are their recipe (which ``fn`` reads as it reads any Task's); each setting that cannot
    be honoured is warned once; the result records where it came from."""

    @functools.wraps(fn)
    def wrapper(model: Any, *args: Any, **kwargs: Any) -> Any:
        if isinstance(model, (str, TaskSpec)):
            model = load_task(model)
        train_data = args[0] if args else kwargs.get("train_data")
        own_loss = (len(args) > 1 and args[1] is not None) or any(
            kwargs.get(k) is not None for k in ("loss_fn", "compute_loss"))
        adapted = adapt(model, train_data, own_loss)
        if adapted is None:
            return fn(model, *args, **kwargs)
        args = (None, *args[1:]) if args else args
        kwargs.pop("train_data", None)
        step = kwargs.get("step", inspect.signature(fn).parameters["step"].default)  # a StepSettings
        kwargs["step"] = dataclasses.replace(step, device=adapted.device(step.device))
        say_notes(adapted)
        try:
            with adapted.speaking():  # advice in their terms: the Trainer's eval_dataset, not the task's val_data
                result = fn(adapted.task, *args, **kwargs)
        finally:
            adapted.close()
        restate = getattr(result, "restate", None)
        if callable(restate):  # its advice in their terms: a doctor's "try lr=" is their learning_rate=
            restate(adapted.in_their_terms)
        settings = getattr(result, "settings", None)
        if settings is not None and hasattr(settings, "__setitem__"):  # a dict, or a result's settings record
            key = "adapted_from" if hasattr(settings, "adapted_from") else "from"  # a record's field, a dict's key
            settings[key] = {"kind": adapted.kind, "notes": list(adapted.notes)}
        return result
    return wrapper  # type: ignore[return-value]
