"""The study as a worker opens it (tunekit/hpsearch/worker_study.py) and the typed records it stores:
the plan round-trips, a resumed study queues nothing twice, a joining worker reads the creator's plan."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import optuna
import pytest

from tunekit import search
from tunekit.errors import UsageError
from tunekit.hpsearch import create_study, join_study
from tunekit.hpsearch.keys import ENQUEUED_KEY, PLAN_KEY, SPEC_KEY
from tunekit.hpsearch.options import Halving, Local, NoPruning, SharedStudy, Study
from tunekit.hpsearch.plan import Plan
from tunekit.hpsearch.settings import SearchSettings
from tunekit.hpsearch.shared.spec import StoredSpec
from tunekit.hpsearch.shared.workers import worker_seed
from tunekit.hpsearch.study import StoredPlan, check_resume, keep_plan, make_storage, read_plan
from tunekit.hpsearch.shared.policy import ManyWorkers, OneProcess, policy_of
from tunekit.hpsearch.rungs import halving

from .tasks import SMALL, write_space

TASK = "tests.tasks:regression_task"


def _stored(**plan: Any) -> StoredPlan:
    p = Plan(**{"budget_samples": 160, "seed": 0, "task_batch": 16, "max_micro": 16, **plan})
    return StoredPlan(p, 32, 0.5, {"amount": 10.0, "unit": "updates", "per_sample": None}, 7, (1, 3))


def test_the_stored_plan_round_trips_through_a_study() -> None:
    """What keep_plan writes, read_plan reads back equal; the stored JSON keeps the flat layout of before."""
    study = optuna.create_study()
    assert read_plan(study) is None
    stored = _stored(fixed={"warmup": 0.1}, step_times=[[4, 0.01]])
    keep_plan(study, stored, {"lr": optuna.distributions.FloatDistribution(1e-3, 1e-1, log=True)})
    back = read_plan(study)
    assert back == stored and back is not None and back.plan == stored.plan
    assert StoredPlan.from_stored(stored.to_stored()).to_stored() == stored.to_stored()
    flat = study.user_attrs[PLAN_KEY]
    assert (flat["budget_samples"], flat["probe_samples"], flat["rungs"], flat["sampler_seed"]) == (160, 32, [1, 3], 7)


def test_a_study_keeps_its_first_plan() -> None:
    """keep_plan is the one writer, once: a later run's plan does not replace the study's."""
    study = optuna.create_study()
    keep_plan(study, _stored(), {})
    keep_plan(study, _stored(seed=5), {})
    back = read_plan(study)
    assert back is not None and back.plan.seed == 0


def test_an_older_stored_plan_reads_and_compares_only_what_it_holds() -> None:
    """A plan stored before the objective and rungs existed: those read as defaults or None, and resuming
    compares only the keys it holds (objective and direction as a loss study's)."""
    old = {"budget_samples": 160, "seed": 0, "task_batch": 16, "max_micro": 16, "evals": 8, "probe_samples": 3}
    stored = StoredPlan.from_stored(old)
    assert stored.rungs is None and stored.probe_seconds is None and stored.plan.objective == "loss"
    assert not stored.holds("ref_batch") and stored.holds("objective")
    check_resume(stored, Plan(160, 0, 16, 16, ref_batch=64), "'old'")  # ref_batch not stored: not compared
    with pytest.raises(UsageError, match="seed = 0, this run asks for 1"):
        check_resume(stored, Plan(160, 1, 16, 16), "'old'")
    with pytest.raises(UsageError, match="objective = 'loss'"):
        check_resume(stored, Plan(160, 0, 16, 16, objective="accuracy", direction="maximize"), "'old'")


def test_the_rungs_a_study_began_with_stay_its_rungs() -> None:
    settings = SearchSettings(trials=9, pruner=Halving(rungs=1))
    def rungs(kept):  # type: ignore[no-untyped-def]
        return halving(settings.pruner, settings.trials, 900, settings.prune, "minimize", kept)[0]

    assert rungs(_stored().rungs) == [1, 3]
    assert rungs(None) != [1, 3]


def test_the_sampler_seed_of_a_worker_and_of_a_resumed_search(tmp_path: Path) -> None:
    """A shared worker's seed comes from its id; one process's moves on by the trials the study holds."""
    shared = policy_of(SharedStudy(storage=str(tmp_path / "s.log"), worker_id="w1"))
    assert isinstance(shared, ManyWorkers) and shared.sampler_seed(3, None, "x", True) == worker_seed(3, "w1")
    store = make_storage(None, tmp_path)
    study = optuna.create_study(study_name="x", storage=store)
    study.enqueue_trial({"a": 1})
    study.enqueue_trial({"a": 2})
    alone = policy_of(Study())
    assert isinstance(alone, OneProcess)
    assert alone.sampler_seed(3, store, "x", True) == 5
    assert alone.sampler_seed(3, store, "x", False) == 3


def test_the_stored_spec_round_trips_and_an_older_one_holds_less() -> None:
    stored = {"version": "1.0", "task": TASK, "space": {"name": "s", "entries": {}}, "trials": 3, "seed": 0,
              "sampler_seed": 0, "objective": "loss", "splits": {"16": [16, 1]}, "lr_find": None, "probe": None,
              "seed_params": {"lr": 0.01}}
    spec = StoredSpec.from_stored(stored)
    assert spec.to_stored() == stored and spec.seed_params == {"lr": 0.01} and spec.settings["trials"] == 3
    older = StoredSpec.from_stored({k: v for k, v in stored.items() if k not in ("version", "objective")})
    assert not older.holds("version") and not older.holds("objective") and older.holds("trials")


@pytest.mark.slow  # two searches of a small task
def test_a_resumed_study_queues_nothing_twice(tmp_path: Path) -> None:
    """The seed trial and design are queued once per study: a resume runs on from them, and the sampler
    proposes the rest."""
    space, out = str(write_space(tmp_path, SMALL)), tmp_path / "out"
    kw: dict[str, Any] = dict(budget="10updates", pruner=NoPruning(), backend=Local(device="cpu"), out=out,
                              progress=False)
    first = search(TASK, space, trials=2, **kw)
    again = search(TASK, space, trials=4, study=Study(resume=True), **kw)
    study = optuna.load_study(study_name=first.study_name, storage=make_storage(None, out))
    queued = [t.user_attrs[ENQUEUED_KEY] for t in study.trials if ENQUEUED_KEY in t.user_attrs]
    assert queued and len({tuple(sorted(q.items())) for q in queued}) == len(queued)  # none twice
    assert len([t for t in again.trials if t["state"] == "COMPLETE"]) == 4 and again.plan == first.plan
    assert again.seed_params == first.seed_params


@pytest.mark.slow  # a shared study's creation and a worker's trials
def test_a_joining_worker_reads_the_creators_plan_and_spec(tmp_path: Path) -> None:
    journal = str(tmp_path / "s.log")
    create_study(TASK, str(write_space(tmp_path, SMALL)), study=SharedStudy(storage=journal, name="j"), trials=2,
                 budget="10updates", pruner=NoPruning(), backend=Local(device="cpu"), progress=False)
    study = optuna.load_study(study_name="j", storage=make_storage(journal, None))
    plan, spec = read_plan(study), dict(study.user_attrs[SPEC_KEY])
    assert plan is not None and StoredSpec.from_stored(spec).to_stored() == spec
    r = join_study(SharedStudy(storage=journal, name="j", worker_id="w1", threads=1), progress=False)
    assert read_plan(optuna.load_study(study_name="j", storage=make_storage(journal, None))) == plan
    mine = {k: v for k, v in r.plan.items() if k != "device"}  # the device is each worker's own
    assert mine == {k: v for k, v in plan.plan.to_dict().items() if k != "device"}
    assert r.seed_params == spec["seed_params"]
    assert len([t for t in r.trials if t["state"] == "COMPLETE"]) == 2


def test_the_search_never_asks_which_study_it_holds() -> None:
    """Outside hpsearch/shared/ (and the settings' own checks), no module branches on ``settings.shared`` or
    reads a field only SharedStudy or Ray has: each asks the study's policy (shared/policy.py)."""
    import ast
    import dataclasses

    import tunekit.hpsearch
    from tunekit.hpsearch.options import BackendOptions, Ray

    only = ({f.name for f in dataclasses.fields(SharedStudy)} - {f.name for f in dataclasses.fields(Study)}
            | {f.name for f in dataclasses.fields(Ray)} - {f.name for f in dataclasses.fields(BackendOptions)})
    root = Path(tunekit.hpsearch.__file__).parent
    offenders = []
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root)
        if rel.parts[0] == "shared" or rel.name in ("settings.py", "options.py"):
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Attribute) and node.attr == "shared":
                offenders.append(f"{rel}:{node.lineno}: .shared")
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "getattr"
                    and len(node.args) > 1 and isinstance(node.args[1], ast.Constant) and node.args[1].value in only):
                offenders.append(f"{rel}:{node.lineno}: getattr(..., {node.args[1].value!r})")
    assert not offenders, "ask the study's policy instead:\n" + "\n".join(offenders)


def test_the_trial_path_takes_its_records_whole() -> None:
    """The local backend, one trial's run and the result take the records they are given, not their fields."""
    import inspect

    from tunekit.hpsearch.backends import local
    from tunekit.hpsearch import summary, trial

    def count(fn: Any) -> int:
        return len(inspect.signature(fn).parameters)

    assert count(local.run_local) <= 3 and count(local._run_trial) <= 4
    assert count(trial._run) <= 2 and count(summary.build_result) == 3
    assert list(inspect.signature(summary.build_result).parameters) == ["prep", "opened", "seconds"]


@pytest.mark.parametrize("shared", [False, True])
def test_the_study_opens_through_each_module_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, shared: bool) -> None:
    """open_worker_study hands the study to each module once, in order (issue 53: it returned to its own
    helpers four times and to study.py three): the design and sampler, the rungs, the study, the policy."""
    import sys

    from tunekit.hpsearch import run as run_module

    calls: list[str] = []
    # The typed records' methods and properties (a budget's samples, a spec with its seed) are not stages.
    RECORDS = ("hpsearch/settings.py", "hpsearch/budget.py", "objective.py", "hpsearch/shared/spec.py")

    def profile(frame: Any, event: str, arg: Any) -> None:
        caller = frame.f_back
        if event == "call" and caller is not None and caller.f_code.co_name == "open_worker_study":
            where = frame.f_code.co_filename.partition("/tunekit/")[2]
            if where and where not in RECORDS and (not calls or calls[-1] != where):
                calls.append(where)

    opened = run_module.open_worker_study

    def traced(*args: Any, **kw: Any) -> Any:
        sys.setprofile(profile)
        try:
            return opened(*args, **kw)
        finally:
            sys.setprofile(None)

    monkeypatch.setattr(run_module, "open_worker_study", traced)
    study = SharedStudy(storage=str(tmp_path / "s.log"), name="o") if shared else Study()
    search(TASK, str(write_space(tmp_path, SMALL)), trials=1, budget="10updates", pruner=NoPruning(), study=study,
           backend=Local(device="cpu"), progress=False, out=tmp_path / "o")
    assert calls == ["hpsearch/seeding.py", "hpsearch/rungs.py", "hpsearch/study.py", "hpsearch/shared/policy.py"]
