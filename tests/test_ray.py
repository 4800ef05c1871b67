"""The Ray Tune backend, on CPU: ASHA pruning mapped into Optuna, logical GPUs, a real
local cluster, failing trials and resume after the driver is killed."""

from pathlib import Path
from types import SimpleNamespace

import optuna
import pytest

ray = pytest.importorskip("ray")

pytestmark = pytest.mark.slow  # Ray instances and Tune runs


import torch  # noqa: E402

from tunekit import (Halving, Local, Measurement, NoPruning, ProbeSettings, RandomSampler, Ray, StepSettings, Study, Sweep,
                    UsageError, search)
from tunekit.integrations.task_spec import load_task  # noqa: E402
from tunekit.training.loop import evaluate  # noqa: E402
from tunekit.hpsearch.backends.ray.backend import (DONE_KEY, ERROR_KEY, Ledger, _recorder, _scheduler, _searcher,  # noqa: E402
                                         check_packing, trainable)

from .tasks import slow_regression_task  # noqa: E402
from .tasks import DIVERGING, FAILING, SMALL, TWO_LRS, write_space  # noqa: E402


WIDE = SMALL.replace("1e-3", "1e-5").replace("high = 1e-1", "high = 1.0")


@pytest.fixture(scope="module")
def local_ray():
    """One local Ray instance for the module: 2 CPUs and 2 logical GPUs (no CUDA needed).

    On loopback by tunekit's own switch, though Ray was imported before it."""
    import logging

    from tunekit.hpsearch.backends.ray.cluster import stay_on_loopback

    stay_on_loopback()
    ray.init(address="local", num_cpus=2, num_gpus=2, include_dashboard=False, log_to_driver=False,
             logging_level=logging.ERROR)
    yield
    ray.shutdown()


def _study(r):
    return optuna.load_study(study_name=r.study_name, storage=r.storage)


def test_scheduler_and_recorder_map_trial_ends_into_optuna_states() -> None:
    """Each report goes to the study (in samples); a trial the study's pruner stops -> PRUNED with its
    intermediate values; its own last report decides COMPLETE or FAIL (divergence, error)."""
    study = optuna.create_study(pruner=optuna.pruners.SuccessiveHalvingPruner(min_resource=5, reduction_factor=2))
    ended: list[str] = []
    ledger = Ledger(n_trials=4, max_failures=1)
    book = ledger.book
    rec, sched = _recorder(study, ledger, ended.append), _scheduler(book, prune=True)

    def run(results: list[dict], error: bool = False) -> tuple[optuna.trial.FrozenTrial, list[str]]:
        ot = study.ask({"lr": optuna.distributions.FloatDistribution(1e-4, 1, log=True)})
        book[ot.number] = ot
        trial = SimpleNamespace(config={"number": ot.number}, last_result=results[-1], num_failures=2,
                                get_error=lambda: None)
        decisions = [sched.on_trial_result(None, trial, res) for res in results]
        (rec.on_trial_error if error else rec.on_trial_complete)(0, [], trial)
        assert ot.number not in book
        return study.trials[ot.number], decisions

    curve = [[5, 0.5], [10, 0.4], [20, 0.3]]
    done, decisions = run([{"value": 0.5, "samples": 5, "curve": curve[:1]}, {"value": 0.4, "samples": 10, "curve": curve[:2]},
                           {DONE_KEY: "COMPLETE", "value": 0.3, "samples": 20, "updates": 4, "curve": curve}])
    assert done.state.name == "COMPLETE" and done.value == 0.3 and decisions == ["CONTINUE"] * 3
    assert done.intermediate_values == {5: 0.5, 10: 0.4} and done.user_attrs["curve"] == curve
    assert done.user_attrs["samples"] == 20

    pruned, decisions = run([{"value": 0.9, "samples": 5, "curve": [[5, 0.9]]}])  # worse than the first at rung 5
    assert decisions == ["STOP"] and pruned.state.name == "PRUNED" and pruned.intermediate_values == {5: 0.9}
    assert pruned.user_attrs["samples"] == 5

    diverged, _ = run([{DONE_KEY: "FAIL", "error": "diverged at update 7", "diverged": True, "samples": 7, "curve": []}])
    assert diverged.state.name == "FAIL" and diverged.user_attrs["error"] == "diverged at update 7"

    failed, _ = run([{ERROR_KEY: "ValueError: bad batch", "curve": []}], error=True)
    assert failed.state.name == "FAIL" and failed.user_attrs["error"] == "ValueError: bad batch"
    assert failed.user_attrs["attempts"] == 2
    assert ended == ["COMPLETE", "PRUNED", "FAIL", "FAIL"]


def test_packing_refused_when_memory_holds_fewer_trials() -> None:
    gib = 2**30
    check_packing(0.5, 3 * gib, 8 * gib, "batch 64")  # two of 3 GiB fit in 8 GiB
    check_packing(1, 30 * gib, 8 * gib, "batch 64")  # whole GPUs: not a packing question
    with pytest.raises(UsageError, match=r"gpus_per_trial=0.5 packs 2 trials on a GPU, but one trial needs up to 5.00 GiB"):
        check_packing(0.5, 5 * gib, 8 * gib, "batch 64")
    with pytest.raises(UsageError, match=r"use gpus_per_trial=0.5 or more"):
        check_packing(0.25, 3 * gib, 8 * gib, "batch 64")


def test_ray_search_completes_and_prunes(local_ray, tmp_path: Path) -> None:
    space = write_space(tmp_path, WIDE)
    r = search("tests.tasks:regression_task", str(space), trials=9, seed=1, out=tmp_path / "out",
               pruner=Halving(evals=4), backend=Ray(device="cpu"), budget="20updates")
    states = [t["state"] for t in r.trials]
    assert len(states) == 9 and "PRUNED" in states and "COMPLETE" in states  # 9 trials: one rung (none below)
    study = _study(r)
    for t, ot in zip(r.trials, study.trials):
        assert t["state"] == ot.state.name
        if t["state"] == "COMPLETE":
            assert t["updates"] == 20 and t["curve"][-1][0] == 20 * 16 and ot.value == t["value"]
        elif t["state"] == "PRUNED":
            # Stopped at a rung, before its budget, its intermediate values (in samples) kept for Optuna.
            assert t["samples"] < 20 * 16 and t["samples"] % (5 * 16) == 0
            assert ot.intermediate_values and max(ot.intermediate_values) == t["samples"]
    # The same files as the local backend, and Ray's logs with them rather than on the console.
    for f in ("search.json", "trials.csv", "search.png", "study.db"):
        assert (tmp_path / "out" / f).exists()
    assert r.trials[0]["number"] == 0 and r.trials[0]["params"] == r.seed_params  # the seed trial first
    # The local instance listens on loopback only.
    assert {t["worker"]["node"] for t in r.trials} == {"127.0.0.1"}
    assert {t["worker"]["cluster"].split(":")[0] for t in r.trials} == {"127.0.0.1"}
    # The best trial's weights, written by its Ray worker, kept alone: they score the best trial's value.
    assert [p.name for p in (tmp_path / "out" / "weights").glob("trial-*.pt")] == [f"trial-{r.trial()['number']}.pt"]
    task = load_task("tests.tasks:regression_task")
    metrics = evaluate(r.best_model(), task.val_data, task.loss_computer(), device=torch.device("cpu"),
                       batch_size=task.batch_size, max_batches=r.best_config.get("eval_batches"))
    assert metrics["loss"] == pytest.approx(r.best_value, rel=1e-6)


def test_logical_gpus_one_per_trial(local_ray, tmp_path: Path) -> None:
    space = write_space(tmp_path, SMALL)
    # A Task object (not a spec) travels to the workers through Ray's object store.
    r = search(slow_regression_task(), str(space), trials=6, seed=0, out=tmp_path / "out", pruner=NoPruning(),
               backend=Ray(device="auto", cpus_per_trial=0.5, gpus_per_trial=1), budget="15updates")
    assert [t["state"] for t in r.trials] == ["COMPLETE"] * 6
    spans = [(t["worker"]["started"], t["worker"]["finished"], t["worker"]["gpu_ids"]) for t in r.trials]
    assert all(len(ids) == 1 for _, _, ids in spans)
    assert all(t["worker"]["device"] == "cpu" for t in r.trials)  # a logical GPU without CUDA: train on CPU
    overlaps = 0
    for s1, e1, g1 in spans:
        # Trials running at the instant trial i started, itself included.
        at_once = [g for s, e, g in spans if s <= s1 < e]
        assert len(at_once) <= 2  # 4 trials fit the CPUs (0.5 each); the 2 GPUs allow 2
        assert len({tuple(g) for g in at_once}) == len(at_once)  # trials at the same time never share a GPU
        overlaps += len(at_once) - 1
    assert overlaps > 0  # they did run side by side


def test_trial_that_raises_is_recorded_and_retried(local_ray, tmp_path: Path) -> None:
    failing = write_space(tmp_path, FAILING, "failing.toml")
    # Seed 0 draws hidden 16, 13, 16: one trial that raises (each of its attempts costs a new Ray worker), two that run.
    r = search("tests.tasks:picky_regression_task", str(failing), trials=3, seed=0, out=tmp_path / "o",
               sampler=RandomSampler(seed_trial=False), pruner=NoPruning(), backend=Ray(device="cpu", max_failures=1),
               budget="10updates")
    assert len(r.trials) == 3
    for t in r.trials:
        if t["params"]["task.hidden"] == 13:
            assert t["state"] == "FAIL" and t["error"] == "RuntimeError: hidden=13 is unlucky"
            assert t["attempts"] == 2  # tried once more (max_failures=1), then recorded
        else:
            assert t["state"] == "COMPLETE"
    assert {t["state"] for t in r.trials} == {"FAIL", "COMPLETE"}


def test_diverged_trials_fail_on_ray(local_ray, tmp_path: Path) -> None:
    diverging = write_space(tmp_path, DIVERGING, "diverging.toml")
    r = search("tests.tasks:regression_task", str(diverging), trials=4, seed=0,
               sampler=RandomSampler(seed_trial=False), pruner=NoPruning(), backend=Ray(device="cpu"),
               budget="10updates")
    assert len(r.trials) == 4
    for t in r.trials:
        if t["params"]["lr"] > 1:
            assert t["state"] == "FAIL" and t["diverged"] and "diverged at update" in t["error"]
        else:
            assert t["state"] == "COMPLETE" and not t["diverged"]
    assert "FAIL" in {t["state"] for t in r.trials} and "COMPLETE" in {t["state"] for t in r.trials}


def test_a_wrong_cluster_address_is_one_line_at_once(assert_usage_error, monkeypatch: pytest.MonkeyPatch) -> None:  # type: ignore[no-untyped-def]
    """Refused before Ray starts (ray.init retries a wrong address for minutes): counted, not timed."""
    import socket

    import ray

    inits: list[object] = []

    def init(*args: object, **kwargs: object) -> None:
        inits.append((args, kwargs))
        raise RuntimeError("ray.init was called")

    monkeypatch.setattr(ray, "init", init)
    monkeypatch.setenv("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")  # what a loopback address sets, put back after
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]  # closed again: nothing listens there
    assert_usage_error(["search", "--backend", "ray", "--address", f"127.0.0.1:{port}", "--out", "o", "--quiet"],
                       f"address 127.0.0.1:{port}: no Ray cluster answers there")
    assert_usage_error(["search", "--backend", "ray", "--address", "head-node", "--out", "o", "--quiet"],
                       "is neither auto nor HOST:PORT")
    assert inits == []


def test_ray_flags_refused_on_the_local_backend(assert_usage_error) -> None:  # type: ignore[no-untyped-def]
    line = assert_usage_error(["search", "--out", "o", "--quiet", "--gpus-per-trial", "0.5"],
                              "--gpus-per-trial applies only with --backend ray")
    assert line.endswith("drop it, or pass --backend ray")
    assert_usage_error(["search", "--out", "o", "--quiet", "--backend", "ray", "--cpus-per-trial", "0",
                        "--gpus-per-trial", "0"], "a trial needs some resource")


def test_resumed_scheduler_prunes_against_the_stored_trials() -> None:
    """The scheduler asks the study's pruner, so a resumed study prunes against every stored trial."""
    pruner = optuna.pruners.SuccessiveHalvingPruner(min_resource=5, reduction_factor=3)
    study = optuna.create_study(pruner=pruner)
    dist = {"lr": optuna.distributions.FloatDistribution(1e-4, 1, log=True)}
    for loss5, final in ((0.5, 0.2), (0.6, 0.3), (0.4, 0.25)):
        t = study.ask(dist)
        t.report(loss5, 5)
        t.should_prune()  # as every trial's report is followed, on both backends: the rung keeps its value
        study.tell(t, final)
    book: dict = {}
    sched = _scheduler(book, prune=True)
    new = study.ask(dist)
    book[new.number] = new
    trial = SimpleNamespace(config={"number": new.number})
    assert sched.on_trial_result(None, trial, {"samples": 5, "value": 0.95}) == "STOP"
    better = study.ask(dist)
    book[better.number] = better
    assert sched.on_trial_result(None, SimpleNamespace(config={"number": better.number}), {"samples": 5, "value": 0.1}) == "CONTINUE"


def test_a_trial_tune_gives_up_on_within_its_retries_runs_again_as_the_same_optuna_trial() -> None:
    """Tune ends a trial that fails while it is (re)started, a dead node's second failure included, though its
    failures are within max_failures: the searcher hands the same Optuna trial to a new Tune trial, it is
    recorded once, and the search ends when nothing is left to run. Past its retries, it fails."""
    from ray.tune.search import Searcher

    from tunekit.hpsearch.plan import TrialConfig

    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=0))
    ledger = Ledger(n_trials=2, max_failures=2)
    ended: list[str] = []
    searcher = _searcher(study, {"lr": optuna.distributions.FloatDistribution(1e-4, 1, log=True)},
                         lambda params, attrs: TrialConfig({"lr": params["lr"], "batch_size": 8, "accumulation_steps": 1,
                                                            "max_steps": 10}, {}), ledger)
    rec = _recorder(study, ledger, ended.append)
    first, second = searcher.suggest("a"), searcher.suggest("b")
    assert [first["number"], second["number"]] == [0, 1] and searcher.suggest("c") is None  # both still run

    def tune_trial(config: dict, failures: int, last: dict | None = None) -> SimpleNamespace:
        return SimpleNamespace(config=config, num_failures=failures, last_result=last or {},
                               get_error=lambda: "ray.exceptions.ActorDiedError: its node has died")

    rec.on_trial_recover(0, [], tune_trial(first, 1))  # the node dies: Tune retries ...
    rec.on_trial_error(0, [], tune_trial(first, 2))  # ... and gives up on the retry's second failure
    assert study.trials[0].state.name == "RUNNING" and ended == []
    again = searcher.suggest("d")
    assert again == first  # the same trial, params and all
    rec.on_trial_complete(0, [], tune_trial(again, 0, {DONE_KEY: "COMPLETE", "value": 0.2, "samples": 8, "curve": []}))
    assert study.trials[0].state.name == "COMPLETE" and study.trials[0].user_attrs["attempts"] == 3
    assert len(study.trials) == 2 and searcher.suggest("e") is None  # trial 1 runs still

    rec.on_trial_error(0, [], tune_trial(second, 2))  # gives up early: runs again ...
    rerun = searcher.suggest("f")
    rec.on_trial_error(0, [], tune_trial(rerun, 1))  # ... but 3 failures exceed max_failures=2
    assert study.trials[1].state.name == "FAIL" and study.trials[1].user_attrs["attempts"] == 3
    assert "ActorDiedError" in study.trials[1].user_attrs["error"]
    assert ended == ["COMPLETE", "FAIL"] and searcher.suggest("g") == Searcher.FINISHED
    assert len(study.trials) == 2


@pytest.mark.filterwarnings("ignore:.*report. is meant:UserWarning")
def test_a_config_that_cannot_run_fails_as_its_own_trial() -> None:
    study = optuna.create_study()
    ledger = Ledger(n_trials=1)
    book = ledger.book

    def make_config(params, attrs):
        raise UsageError("effective batch 4096 has no micro-batch that fits (largest 512)")

    searcher = _searcher(study, {"lr": optuna.distributions.FloatDistribution(1e-4, 1, log=True)}, make_config, ledger)
    config = searcher.suggest("t1")
    assert config == {"number": 0, "config_error": "UsageError: effective batch 4096 has no micro-batch that fits (largest 512)"}
    assert 0 in book  # still the recorder's to tell
    trainable(config)  # reports the error as its last result and ends
    ended: list[str] = []
    last = {DONE_KEY: "FAIL", ERROR_KEY: config["config_error"]}
    _recorder(study, ledger, ended.append).on_trial_complete(0, [], SimpleNamespace(config=config, last_result=last))
    assert study.trials[0].state.name == "FAIL" and "no micro-batch that fits" in study.trials[0].user_attrs["error"]


def test_search_refuses_a_packing_the_probed_gpu_cannot_hold(tmp_path: Path) -> None:
    """With a probe measured on a GPU, --gpus-per-trial 0.5 is refused before any trial when two don't fit."""
    import dataclasses

    from tunekit import lr_find, probe

    from .tasks import classification_task

    task = classification_task()
    lf = lr_find(task, sweep=Sweep(sweep_steps=20), step=StepSettings(device="cpu"))
    pr = probe(task, memory_budget="256MiB", step=StepSettings(device="cpu"),
               measure=Measurement(throughput_points=2, noise_repeats=4))
    # A GPU that holds one trial of any batch, never two.
    on_gpu = dataclasses.replace(pr, device="cuda:0", usable_bytes=int(pr.predicted_peak(1) * 1.5))
    with pytest.raises(UsageError, match=r"gpus_per_trial=0.5 packs 2 trials on a GPU.*use gpus_per_trial=1 or more"):
        search(task, "from_scratch", trials=2, out=tmp_path / "o", backend=Ray(gpus_per_trial=0.5),
               probes=ProbeSettings(lr_find=lf, probe=on_gpu), budget="10updates")
    storage = f"sqlite:///{tmp_path / 'o' / 'study.db'}"
    assert [t for s in optuna.get_all_study_summaries(storage) for t in optuna.load_study(study_name=s.study_name, storage=storage).trials] == []  # refused before any trial


def test_ray_search_for_accuracy_keeps_the_most_accurate_trial(local_ray, tmp_path: Path) -> None:
    """The objective on Ray: trials report it, Optuna's study maximises it, the recorder keeps each
    trial's validation loss beside it, and a pruned trial keeps the updates it ran."""
    space = write_space(tmp_path, TWO_LRS)
    r = search("tests.tasks:classification_task", str(space), trials=3, seed=0, objective="accuracy",
               out=tmp_path / "o", sampler=RandomSampler(design=0, seed_trial=False), pruner=NoPruning(),
               backend=Ray(device="cpu", max_concurrent=1), budget="40updates")
    done = [t for t in r.trials if t["state"] == "COMPLETE"]
    assert (r.objective, r.direction) == ("accuracy", "maximize") and len(done) == 3
    assert r.best_params == {"lr": 3.0} and r.best_value == max(t["value"] for t in done)
    assert all(0 <= t["value"] <= 1 and t["val_loss"] > 0 for t in done)
    assert _study(r).direction == optuna.study.StudyDirection.MAXIMIZE


def test_a_pruned_ray_trial_records_the_updates_it_ran() -> None:
    """A trial the scheduler stopped reports no final value: its updates are its last report's."""
    from tunekit.hpsearch.backends.ray.backend import _outcome

    last = {"value": 0.8, "samples": 64, "seen": 64, "updates": 4, "val_loss": 1.2, "label": "validation loss",
            "curve": [[32, 0.9], [64, 0.8]]}
    o = _outcome(last)
    assert (o.state, o.value, o.samples, o.updates, o.val_loss) == ("PRUNED", None, 64, 4, 1.2)
    assert o.reason == "pruned at 64 samples with validation loss 0.8000"


def test_trials_in_flight_are_not_pruned_at_or_after_their_last_report(local_ray, tmp_path: Path) -> None:
    """Two trials at a time, rungs that appear when the first trial completes: no trial is pruned at
    its last report or past its budget, and each pruned trial keeps the updates it ran."""
    space = write_space(tmp_path, WIDE)
    r = search("tests.tasks:regression_task", str(space), trials=12, seed=2, out=tmp_path / "out",
               pruner=Halving(evals=6), backend=Ray(device="cpu", max_concurrent=2), budget="30updates")
    budget = r.plan["budget_samples"]
    study = _study(r)
    pruned = [(t, ot) for t, ot in zip(r.trials, study.trials) if t["state"] == "PRUNED"]
    for t, ot in pruned:
        assert max(ot.intermediate_values) < budget and t["samples"] < budget
        assert 0 < t["updates"] < t["config"]["max_steps"]
        assert t["updates"] * t["effective_batch"] == t["samples"]


def test_a_task_that_cannot_train_stops_a_ray_search_in_one_line(local_ray, tmp_path: Path) -> None:
    from tunekit.errors import SetupError

    space = write_space(tmp_path, SMALL)
    with pytest.raises(SetupError, match="not a scalar"):
        search("tests.tasks:nonscalar_loss_task", str(space), trials=4, seed=0, out=tmp_path / "o",
               backend=Ray(device="cpu", max_failures=2), budget="10updates")
    study = optuna.load_study(study_name=optuna.get_all_study_names(f"sqlite:///{tmp_path / 'o' / 'study.db'}")[0],
                              storage=f"sqlite:///{tmp_path / 'o' / 'study.db'}")
    assert len(study.trials) <= 2 and all(t.state.name == "FAIL" for t in study.trials)
    assert all(t.user_attrs.get("attempts", 1) == 1 for t in study.trials)  # no retry: it would fail the same way


def test_a_budget_in_device_time_and_a_time_limit_on_ray(local_ray, tmp_path: Path, steady_clock: None) -> None:
    """--budget 1s prices each trial's updates by the probe's timed steps on Ray as locally, and a
    study-wide device-time limit starts no trial after it."""
    from tunekit.results.step_time import update_seconds

    from .test_device_time import _stopped_at_the_limit

    space = str(write_space(tmp_path, SMALL))
    first = search("tests.tasks:regression_task", space, trials=2, budget="0.5s", seed=1, out=tmp_path / "first",
                   pruner=NoPruning(), backend=Ray(device="cpu", max_concurrent=1))
    evals = first.plan["eval_seconds"]  # its evaluations, paid first (9 at most: 8 and one at the end)
    assert evals > 0
    for t in first.trials:
        per = update_seconds(first.plan["step_times"], t["micro_batch"], t["accumulation_steps"])
        assert t["updates"] == int((0.5 - 9 * evals) / per) and 0 < t["predicted_seconds"] <= 0.5 and t["seconds"] > 0
    r = search("tests.tasks:regression_task", space, trials=8, budget="0.5s", seed=1, out=tmp_path / "limited",
               pruner=NoPruning(), backend=Ray(device="cpu", max_concurrent=1), study=Study(time_limit="1.5s"),
               probes=ProbeSettings(probe=tmp_path / "first" / "probe.json"))
    _stopped_at_the_limit(r, 1.5, 8)


def test_a_task_the_workers_cannot_load_is_refused_before_the_first_trial(local_ray) -> None:
    """Checked on a worker, in one line: a module only the driver could import would fail every trial."""
    from tunekit.hpsearch.backends.ray.backend import check_workers_load

    check_workers_load("tests.tasks:regression_task")  # loads there: nothing to say
    with pytest.raises(UsageError, match=r"^the Ray workers cannot load the task \(module 'no_such_mod_xyz' \(from "
                                         r"task 'no_such_mod_xyz:fn'\) was not found: .*\): give the task file by a path"):
        check_workers_load("no_such_mod_xyz:fn")


def test_a_relative_task_file_from_another_folder_runs_on_ray_and_all_failed_exits_1_without_tracebacks(
        tmp_path: Path) -> None:
    """The workers get the file's absolute path (its trials fail in the user's own code, not on a missing
    file); a search whose every trial failed exits 1 with one line naming the first cause, no Ray traceback."""
    from .tasks import FAILING, run_cli

    (tmp_path / "proj").mkdir()
    (tmp_path / "proj" / "mytasks.py").write_text("from tests.tasks import picky_regression_task  # noqa: F401\n")
    (tmp_path / "elsewhere").mkdir()
    space = write_space(tmp_path, FAILING.replace("[13, 16]", "[13]"))
    done = run_cli("search", "--task", "../proj/mytasks.py:picky_regression_task", "--space", str(space), "--trials",
                   "2", "--max-steps", "20", "--device", "cpu", "--backend", "ray", "--max-concurrent", "1", "--quiet",
                   "--out", str(tmp_path / "o"), cwd=tmp_path / "elsewhere")
    assert done.returncode == 1, done.stderr[-3000:]
    assert done.stderr.strip() == ("tunekit search: error: all 2 trials of this search failed, the first (trial 0) with "
                                   f"RuntimeError: hidden=13 is unlucky; each trial's error is in {tmp_path / 'o'}"
                                   "/search.json"), done.stderr[-3000:]
    assert "Traceback" not in done.stdout + done.stderr and "ERROR" not in done.stdout + done.stderr


def test_a_task_object_from_a_module_on_sys_path_runs_on_ray(tmp_path: Path) -> None:
    """A notebook's sys.path.insert reaches the workers (Ray's runtime env): a model class from such a
    module unpickles there, and the trial completes."""
    import subprocess
    import sys

    from .tasks import ROOT

    (tmp_path / "mods").mkdir()
    (tmp_path / "mods" / "mymods.py").write_text(
        "from torch import nn\nimport tunekit\nfrom tests.tasks import regression_data\n\n"
        "class Net(nn.Module):\n    def __init__(self):\n        super().__init__()\n        self.lin = nn.Linear(8, 1)\n\n"
        "    def forward(self, x):\n        return self.lin(x)\n\n"
        "def task():\n    return tunekit.Task(model=Net, train_data=regression_data(), val_data=regression_data(64, seed=1),"
        " loss=nn.MSELoss(), batch_size=16)\n")
    script = (f"import sys; sys.path.insert(0, {str(tmp_path / 'mods')!r})\nimport tunekit\nfrom mymods import task\n"
              f"r = tunekit.search(task(), trials=1, budget='10updates', backend=tunekit.Ray(max_concurrent=1, "
              f"device='cpu'), out={str(tmp_path / 'o')!r}, progress=False)\n"
              "print([(t['state'], t['error']) for t in r.trials])\n")
    done = subprocess.run([sys.executable, "-c", script], cwd=tmp_path, capture_output=True, text=True, timeout=300,
                          env={**__import__("os").environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"})
    assert done.returncode == 0 and done.stdout.strip().splitlines()[-1] == "[('COMPLETE', None)]", done.stderr[-3000:]


def test_the_rung_value_is_the_same_on_ray_as_in_this_process(local_ray, tmp_path: Path) -> None:
    """A cooldown rung's value is the trial's own (its config and seed), whichever backend runs it."""
    space = write_space(tmp_path, WIDE)
    runs = [search("tests.tasks:regression_task", str(space), trials=3, seed=1, out=tmp_path / name,
                   pruner=Halving(evals=4, rungs=1, rung_value="cooldown"), backend=backend, budget="20updates")
            for name, backend in (("local", Local(device="cpu")), ("ray", Ray(device="cpu", max_concurrent=1)))]
    first = [r.trials[0] for r in runs]  # the seed trial: the same params on both
    assert first[0]["params"] == first[1]["params"]
    assert first[0]["rung_values"] and first[0]["branch_samples"] == first[1]["branch_samples"] > 0
    assert [p[0] for p in first[0]["rung_values"]] == [p[0] for p in first[1]["rung_values"]] == [2 * 5 * 16]
    assert [p[1] for p in first[0]["rung_values"]] == pytest.approx([p[1] for p in first[1]["rung_values"]], rel=1e-6)
    assert first[0]["samples"] == first[1]["samples"]


def test_one_trial_at_a_time_ray_runs_the_local_backends_trials_confirmation_runs_included(local_ray, tmp_path: Path) -> None:
    """Same seed, same trials: one trial at a time, Ray gives the local backend's trials, values and answer. (With
    several in flight, the order in which trials finish decides what TPE and the pruner see, so only the seed trial
    and design stay the same.) The best trials run again once the search's are done (a second Tuner): at the same
    fresh seeds, never pruned, counted."""
    from tunekit import Confirm

    from .tasks import fingerprint

    space = write_space(tmp_path, WIDE)
    runs = {name: search("tests.tasks:regression_task", str(space), trials=4, seed=2, out=tmp_path / name,
                         pruner=Halving(evals=4), confirm=Confirm(top=2, seeds=1), budget="20updates",
                         backend=backend)
            for name, backend in (("local", Local(device="cpu")), ("ray", Ray(device="cpu", max_concurrent=1)))}
    r = runs["ray"]
    repeats = [t for t in r.trials if t.get("confirm_of") is not None]
    assert len(r.trials) == 6 and r.compute == sum(t["samples"] for t in r.trials)
    assert sorted(t["config"]["seed"] for t in repeats) == [1002, 1002] and {t["state"] for t in repeats} == {"COMPLETE"}
    assert all(t["params"] == r.trials[t["confirm_of"]]["params"] for t in repeats)
    assert r.confirmation is not None and r.confirmation.done
    assert fingerprint(r) == fingerprint(runs["local"])
    assert (r.confirmation.chosen, r.best_value) == (runs["local"].confirmation.chosen, runs["local"].best_value)
