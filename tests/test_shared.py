"""Shared studies: several workers on one study, on a real PostgreSQL (pgserver) and on a journal file.

The multi-process tests are slow (each worker imports torch); the in-process ones take seconds."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import optuna
import pytest

import torch

from tunekit import Local, NoPruning, RandomSampler, SharedStudy, UsageError, search
from tunekit.hpsearch import create_study, join_study, reap_study, study_result
from tunekit.hpsearch.shared.workers import claim, mark_surplus
from tunekit.hpsearch.study import excluded, finished_count, make_storage
from tunekit.integrations.task_spec import load_task
from tunekit.training.loop import evaluate

from .tasks import ROOT, SMALL, run_cli, write_space

FAST = ["--task", "tests.tasks:regression_task", "--max-steps", "20", "--no-prune", "--device", "cpu", "--quiet"]
SLOW = ["--task", "tests.tasks:slow_regression_task", "--max-steps", "40", "--no-prune", "--device", "cpu", "--quiet"]


def _start(args: list[str], cwd: Path) -> subprocess.Popen[str]:
    env = dict(os.environ, OMP_NUM_THREADS="1", MPLBACKEND="Agg", PYTHONPATH=str(ROOT))
    return subprocess.Popen([sys.executable, "-m", "tunekit", *args], cwd=cwd, env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)


def _trials(url: str, name: str) -> list[Any]:
    return list(optuna.load_study(study_name=name, storage=make_storage(url, None)).trials)


def _usable(url: str, name: str) -> list[Any]:
    study = optuna.load_study(study_name=name, storage=make_storage(url, None))
    skip = excluded(study)
    return [t for t in study.trials if t.state.is_finished() and t.number not in skip]


def _check_exact(url: str, name: str, n: int) -> list[Any]:
    """Exactly ``n`` usable trials, no config twice, the seed trial once, none left running, each with its worker."""
    usable = _usable(url, name)
    assert len(usable) == n, [(t.number, t.state.name, t.user_attrs.get("error")) for t in _trials(url, name)]
    configs = [json.dumps(t.params, sort_keys=True) for t in usable]
    assert len(set(configs)) == n, configs
    assert not [t for t in _trials(url, name) if t.state.name == "RUNNING"]
    assert all({"host", "pid"} <= set(t.user_attrs["worker"]) for t in usable)
    seed = optuna.load_study(study_name=name, storage=make_storage(url, None)).user_attrs["tunekit_spec"]["seed_params"]
    assert sum(t.params == seed for t in usable) == 1
    return usable


def _wait_mid_trial(url: str, name: str, pid: int | None, timeout: float = 120) -> None:
    """Until worker ``pid`` (any worker, for None) runs a trial that has its params (it is training)."""
    deadline = time.time() + timeout
    while not any(t.state.name == "RUNNING" and t.params and pid in (None, t.user_attrs.get("worker", {}).get("pid"))
                  for t in _trials(url, name)):
        assert time.time() < deadline, "the worker never started a trial"
        time.sleep(0.2)


@pytest.mark.slow  # three processes
def test_three_workers_started_together_on_a_fresh_database_finish_exactly_n(tmp_path: Path, postgres: Any) -> None:
    url, space = postgres(), write_space(tmp_path, SMALL)
    args = ["search", "--space", str(space), "--trials", "7", "--storage", url, "--study", "s", *FAST]
    procs = [_start([*args, "--out", str(tmp_path / f"w{i}")], tmp_path) for i in range(3)]
    outs = [p.communicate(timeout=300) for p in procs]
    assert [p.returncode for p in procs] == [0, 0, 0], [e[-1500:] for _, e in outs]
    usable = _check_exact(url, "s", 7)
    per_worker = {t.user_attrs["worker"]["pid"] for t in usable}
    assert len(per_worker) >= 2  # the work was shared
    # Every worker agrees on each batch's split and ran no probe of its own: one spec, one plan.
    study = optuna.load_study(study_name="s", storage=make_storage(url, None))
    assert sum(k.startswith("tunekit_worker:") for k in study.user_attrs) == 3
    assert len({w["seed"] for k, w in study.user_attrs.items() if k.startswith("tunekit_worker:")}) == 3


@pytest.mark.slow  # three workers on PostgreSQL, one killed mid-trial, then the database restarted under the others
def test_a_killed_worker_costs_one_trial_and_the_survivors_ride_out_a_database_restart(tmp_path: Path,
                                                                                       postgres: Any) -> None:
    """A worker SIGKILLed mid-trial: its trial is failed with its reason while the survivors still train (they reap
    on a timer), and re-run once. Then PostgreSQL is restarted (connections cut) under the two survivors: neither
    exits, the study still finishes exactly N, all complete, nothing left RUNNING."""
    url, space = postgres(), write_space(tmp_path, SMALL)
    long = [a if a != "40" else "150" for a in SLOW]  # trials of about 3 s (20 ms a step)
    created = run_cli("study", "create", "--space", str(space), "--trials", "6", "--storage", url, "--study", "k",
                      "--out", str(tmp_path / "c"), *long)
    assert created.returncode == 0, created.stderr[-2000:]
    work = ["worker", "--storage", url, "--study", "k", "--heartbeat-grace", "4", "--quiet"]
    procs = [_start(work, tmp_path) for _ in range(3)]
    victim = procs[0]
    for p in procs:
        _wait_mid_trial(url, "k", p.pid)
    os.killpg(victim.pid, signal.SIGKILL)
    victim.wait()
    training = [t.number for t in _trials(url, "k") if t.state.name == "RUNNING" and t.user_attrs.get("worker", {}).get("pid") != victim.pid]
    time.sleep(0.5)
    postgres.restart()
    for p in procs[1:]:
        _, err = p.communicate(timeout=300)
        assert p.returncode == 0 and "Storage" not in err, err[-3000:]
    usable = _check_exact(url, "k", 6)
    assert all(t.state.name == "COMPLETE" for t in usable)  # no trial failed for the restart either
    trials = _trials(url, "k")
    dead = [t for t in trials if t.user_attrs.get("worker", {}).get("pid") == victim.pid and t.state.name == "FAIL"]
    assert len(dead) == 1
    # Its process is gone: found at the next check, not after the grace period (4 s, longer than a trial):
    # failed while the trials the survivors were training at the kill still ran. Ordered, not timed.
    assert training and min(trials[n].datetime_complete for n in training) > dead[0].datetime_complete
    result = study_result(url, "k")
    row = next(t for t in result.trials if t["number"] == dead[0].number)
    assert row["error"] == f"worker {dead[0].user_attrs['worker']['host']}:{victim.pid} stopped" and row["stopped"]
    assert dead[0].user_attrs["reason"] == row["error"]  # on the trial itself, for dashboards
    again = [t for t in usable if t.params == dead[0].params]
    assert len(again) == 1 and again[0].user_attrs["tunekit_retry_of"] == dead[0].number


@pytest.mark.slow  # two processes on a journal file, one killed; reaped by the survivor (no heartbeats there)
def test_journal_workers_recover_a_killed_worker(tmp_path: Path) -> None:
    space, journal = write_space(tmp_path, SMALL), str(tmp_path / "study.log")
    created = run_cli("study", "create", "--space", str(space), "--trials", "5", "--storage", journal, "--study", "j",
                      "--out", str(tmp_path / "c"), "--artifacts", str(tmp_path / "art"), *SLOW)
    assert created.returncode == 0, created.stderr[-2000:]
    procs = [_start(["worker", "--storage", journal, "--study", "j", "--quiet"], tmp_path) for _ in range(2)]
    victim = procs[0]
    _wait_mid_trial(journal, "j", victim.pid)
    os.killpg(victim.pid, signal.SIGKILL)
    victim.wait()
    _, err = procs[1].communicate(timeout=300)
    assert procs[1].returncode == 0, err[-2000:]
    _check_exact(journal, "j", 5)
    report = run_cli("report", "--storage", journal, "--study", "j", "--out", str(tmp_path / "r"))
    assert report.returncode == 0, report.stderr[-2000:]
    rows = json.loads((tmp_path / "r" / "search.json").read_text())["trials"]
    assert sum(r.get("stopped", False) for r in rows) == 1 and sum(not r.get("stopped") for r in rows) == 5
    # The best trial's weights, in the study's artifact folder every worker sees: one file, scoring its value.
    result = study_result(journal, "j")
    kept = list((tmp_path / "art" / "weights" / "j").glob("trial-*.pt"))
    assert [p.name for p in kept] == [f"trial-{result.trial()['number']}.pt"] and result.best_weights == str(kept[0])
    task = load_task("tests.tasks:slow_regression_task")
    metrics = evaluate(result.best_model(), task.val_data, task.loss_computer(), device=torch.device("cpu"),
                       batch_size=task.batch_size, max_batches=result.best_config.get("eval_batches"))
    assert metrics["loss"] == pytest.approx(result.best_value, rel=1e-6)


@pytest.mark.parametrize("order", ["better first", "worse first"])
def test_two_workers_that_finish_at_once_keep_the_better_trials_weights(tmp_path: Path, order: str) -> None:
    """Both beat the best when they end, so both write; once the study knows both, only the better's file stays,
    whichever settles first, and never before the best's own file is there."""
    from tunekit.hpsearch.keep import Keeper, settle

    study = optuna.create_study()
    keeper = Keeper("best", str(tmp_path / "w"))
    first = study.ask()
    first.set_user_attr("weights", keeper.write({"state_dict": {}}, first.number, 1.0, {}))
    study.tell(first, 1.0)
    a, b = study.ask(), study.ask()
    assert keeper.wants(0.8, study) and keeper.wants(0.9, study)  # neither knows of the other
    for trial, value in ((a, 0.8), (b, 0.9)):
        trial.set_user_attr("weights", keeper.write({"state_dict": {}}, trial.number, value, {}))
    for trial, value in ((a, 0.8), (b, 0.9))[:: 1 if order == "better first" else -1]:
        study.tell(trial, value)
        settle(study, keeper)
    assert sorted(p.name for p in (tmp_path / "w").glob("trial-*.pt")) == [f"trial-{a.number}.pt"]
    # The best's file missing (its writer died before the write ended): nothing else is removed.
    Path(a.user_attrs["weights"]).unlink()
    c = study.ask()
    c.set_user_attr("weights", keeper.write({"state_dict": {}}, c.number, 0.95, {}))
    study.tell(c, 0.95)
    settle(study, keeper)
    assert (tmp_path / "w" / f"trial-{c.number}.pt").exists()


@pytest.mark.slow  # a PostgreSQL server process
def test_a_joining_worker_with_another_budget_or_seed_is_refused(tmp_path: Path, postgres: Any,
                                                                 assert_usage_error: Any) -> None:
    url, space = postgres(), write_space(tmp_path, SMALL)
    create_study("tests.tasks:regression_task", str(space), trials=3, pruner=NoPruning(), backend=Local(device="cpu"),
                 study=SharedStudy(name="m", storage=url), budget="10updates")
    for given, needle in ((dict(max_steps=20), "run with budget_samples = 160, this run asks for 320"),
                          (dict(seed=1), "run with seed = 0, this run asks for 1"),
                          (dict(trials=4), r"created with trials = 3, this run has 4: leave out trials=\.\.\.")):
        with pytest.raises(UsageError, match=needle) as exc:
            join_study(SharedStudy(url, "m"), backend=Local(device="cpu"), **given)
        assert "\n" not in str(exc.value)
    # Another task is told as such (it was told of the probes' task, or of a budget of other samples).
    with pytest.raises(UsageError, match="created with task = 'tests.tasks:regression_task', this run has 'shapes'"):
        join_study(SharedStudy(url, "m"), task="shapes", backend=Local(device="cpu"))
    assert _trials(url, "m")[0].state.name == "WAITING"  # refused before any trial ran: the seed trial waits
    with pytest.raises(UsageError, match="there is no study 'nope'"):
        join_study(SharedStudy(url, "nope"))
    assert_usage_error(["worker", "--storage", url, "--study", "m", "--max-steps", "20", "--quiet"], "budget_samples")
    assert_usage_error(["worker", "--storage", url, "--study", "m", "--trials", "4", "--quiet"],  # the fix as the flag
                       "leave out --trials ... to take the study's")


@pytest.mark.slow  # a PostgreSQL server process
def test_schema_creation_is_safe_when_workers_start_together(postgres: Any) -> None:
    url, errors = postgres(), []

    def open_it() -> None:
        try:
            make_storage(url, None)
        except Exception as exc:  # noqa: BLE001 - the test reports any
            errors.append(exc)

    threads = [threading.Thread(target=open_it) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []


def test_a_missing_driver_is_one_line_naming_the_package() -> None:
    with pytest.raises(UsageError, match=r"needs the database driver 'pymysql': pip install 'pymysql'"):
        make_storage("mysql://u:secret@db/tk", None)
    with pytest.raises(UsageError) as exc:
        make_storage("mysql+mysqldb://u:secret@db/tk", None)
    assert "MySQLdb" in str(exc.value) and "secret" not in str(exc.value) and "\n" not in str(exc.value)


def test_the_claim_rule_gives_exactly_the_target() -> None:
    """Trials racing for the last slots: the lowest-numbered run, the rest are surplus; waiting trials hold slots."""
    study = optuna.create_study()
    d = {"x": optuna.distributions.FloatDistribution(0, 1)}
    for _ in range(2):
        study.tell(study.ask(d), 1.0)
    racing = [study.ask(d) for _ in range(3)]  # three workers asked at once, one slot left of 3
    assert [claim(study, t.number, 3) for t in racing] == [True, False, False]
    for t in racing[1:]:  # as a worker does with a surplus trial: noted, failed, not counted
        mark_surplus(t, 3)
        study.tell(t, state=optuna.trial.TrialState.FAIL)
    study.enqueue_trial({"x": 0.5})  # a re-run waiting: it holds a slot, ahead of trials asked after it
    later = study.ask(d)
    assert later.params == {"x": 0.5} and claim(study, later.number, 4) and not claim(study, study.ask(d).number, 4)


def test_reap_fails_a_dead_workers_trial_with_its_reason_and_queues_one_rerun(tmp_path: Path) -> None:
    journal = str(tmp_path / "j.log")
    study = optuna.create_study(study_name="r", storage=make_storage(journal, None))
    gone = subprocess.Popen(["true"])
    gone.wait()  # a pid of this machine that is no longer alive
    t = study.ask({"x": optuna.distributions.FloatDistribution(0, 1)})
    t.set_user_attr("worker", {"host": os.uname().nodename, "pid": gone.pid})
    live = study.ask({"x": optuna.distributions.FloatDistribution(0, 1)})
    live.set_user_attr("worker", {"host": os.uname().nodename, "pid": os.getpid()})
    assert reap_study(journal, "r") == [t.number]
    study = optuna.load_study(study_name="r", storage=make_storage(journal, None))
    states = {x.number: x.state.name for x in study.trials}
    assert states[t.number] == "FAIL" and states[live.number] == "RUNNING"
    assert study.trials[t.number].user_attrs["reason"] == f"worker {os.uname().nodename}:{gone.pid} stopped"
    assert study.user_attrs[f"tunekit_stopped:{t.number}"] == f"worker {os.uname().nodename}:{gone.pid} stopped"
    rerun = [x for x in study.trials if x.state.name == "WAITING"]
    assert len(rerun) == 1 and rerun[0].user_attrs["tunekit_enqueued"] == t.params and rerun[0].user_attrs["tunekit_retry_of"] == t.number
    assert t.number in excluded(study) and finished_count(study) == 0
    assert reap_study(journal, "r") == []  # once
    with pytest.raises(UsageError, match="is not HOST:PID"):
        reap_study(journal, "r", workers=["nohost"])


@pytest.mark.slow  # a shared search
def test_a_shared_search_in_process_reports_the_study_and_the_dashboard_fields(tmp_path: Path) -> None:
    """One worker on a journal file: the study reports itself; the final value is the last intermediate value;
    the metric is named; each trial carries its worker."""
    journal, space = str(tmp_path / "s.log"), write_space(tmp_path, SMALL)
    r = search("tests.tasks:regression_task", str(space), trials=3, pruner=NoPruning(), backend=Local(device="cpu"),
               study=SharedStudy(name="d", storage=journal), budget="10updates")
    study = optuna.load_study(study_name="d", storage=make_storage(journal, None))
    assert study.metric_names == ["validation loss"]
    for t in study.trials:
        assert t.state.name == "COMPLETE" and t.intermediate_values[max(t.intermediate_values)] == t.value
        assert t.user_attrs["worker"]["pid"] == os.getpid()
    back = study_result(journal, "d")
    assert [t["value"] for t in back.trials] == [t["value"] for t in r.trials] and back.best_value == r.best_value
    assert back.seed_params == r.seed_params and back.plan == r.plan


@pytest.mark.slow  # three short searches
def test_pruned_and_failed_trials_carry_their_reasons(tmp_path: Path) -> None:
    from .tasks import DIVERGING, classification_task

    space = write_space(tmp_path, SMALL.replace("1e-3", "1e-5").replace("high = 1e-1", "high = 1.0"))
    search(classification_task(), str(space), trials=10, seed=1, out=tmp_path / "o", backend=Local(device="cpu"),
           budget="40updates")
    diverging = write_space(tmp_path, DIVERGING, "diverging.toml")
    search("tests.tasks:regression_task", str(diverging), trials=3, seed=0, out=tmp_path / "d",
           sampler=RandomSampler(seed_trial=False), pruner=NoPruning(), backend=Local(device="cpu"),
           budget="10updates")
    trials = [t for d in ("o", "d") for s in optuna.get_all_study_names(f"sqlite:///{tmp_path / d / 'study.db'}")
              for t in optuna.load_study(study_name=s, storage=f"sqlite:///{tmp_path / d / 'study.db'}").trials]
    pruned = [t for t in trials if t.state.name == "PRUNED"]
    failed = [t for t in trials if t.state.name == "FAIL"]
    assert pruned and all(t.user_attrs["reason"].startswith("pruned at ") for t in pruned)
    assert failed and all(t.user_attrs["reason"].startswith("diverged at update") for t in failed)


@pytest.mark.filterwarnings("ignore:Heartbeat of storage is supposed to be used with Study.optimize")
@pytest.mark.slow  # a PostgreSQL server process and a heartbeat's grace period
def test_a_stale_heartbeat_fails_the_trial_with_its_workers_name_and_queues_one_rerun(postgres: Any) -> None:
    """A worker elsewhere whose heartbeat stopped (no process here to look at): found by the grace period."""
    url = postgres()
    store = make_storage(url, None, heartbeat_grace=2)
    study = optuna.create_study(study_name="h", storage=store)
    t = study.ask({"x": optuna.distributions.FloatDistribution(0, 1)})
    t.set_user_attr("worker", {"host": "elsewhere", "pid": 1})
    store.record_heartbeat(store.get_trial_id_from_study_id_trial_number(store.get_study_id_from_name("h"), t.number))
    assert reap_study(url, "h", heartbeat_grace=2) == []  # within the grace period: alive
    with pytest.deprecated_call(match=r"reap_study\(grace_period=\) is deprecated since tunekit 0\.2\.0 and removed in "
                                      r"tunekit 0\.3\.0: pass heartbeat_grace="):
        assert reap_study(url, "h", grace_period=2) == []  # 0.1.0's name, until 0.3.0
    time.sleep(3)
    assert reap_study(url, "h", heartbeat_grace=2) == [t.number]
    study = optuna.load_study(study_name="h", storage=store)
    reason = "worker elsewhere:1 stopped: no heartbeat for 2 s"  # on the failed trial itself, for dashboards
    assert study.trials[t.number].user_attrs["reason"] == reason == study.user_attrs[f"tunekit_stopped:{t.number}"]
    assert [x.user_attrs["tunekit_retry_of"] for x in study.trials if x.state.name == "WAITING"] == [t.number]


def test_a_trial_left_running_by_a_killed_search_is_failed_with_its_reason(tmp_path: Path) -> None:
    """Every failed trial says why, however it was found: here one a killed process left RUNNING, failed on resume."""
    from tunekit.hpsearch.study import mark_interrupted
    from tunekit.hpsearch.trial import INTERRUPTED

    store = make_storage(None, tmp_path)
    study = optuna.create_study(study_name="k", storage=store)
    t = study.ask({"x": optuna.distributions.FloatDistribution(0, 1)})
    mark_interrupted(study, store)
    back = optuna.load_study(study_name="k", storage=store).trials[t.number]
    assert back.state.name == "FAIL" and back.user_attrs["reason"] == INTERRUPTED


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _dashboard_study(where: str, cwd: Path) -> dict[str, Any]:
    """`tunekit dashboard WHERE` in a subprocess: its API's page of the one study, fetched over HTTP."""
    import urllib.request

    port = _free_port()
    dash = _start(["dashboard", where, "--port", str(port)], cwd)
    try:
        _wait_line(dash, "optuna-dashboard on http://127.0.0.1:")
        deadline, studies = time.time() + 30, None
        while studies is None:
            try:
                studies = json.loads(urllib.request.urlopen(f"http://127.0.0.1:{port}/api/studies", timeout=5).read())
            except OSError:
                assert time.time() < deadline, "the dashboard never answered"
                time.sleep(0.5)
        sid = studies["study_summaries"][0]["study_id"]
        body = json.loads(urllib.request.urlopen(f"http://127.0.0.1:{port}/api/studies/{sid}", timeout=5).read())
    finally:
        os.killpg(dash.pid, signal.SIGTERM)
        dash.wait(timeout=30)
    return body


def _wait_line(proc: subprocess.Popen[str], needle: str, timeout: float = 60) -> None:
    deadline = time.time() + timeout
    while time.time() < deadline:
        line = proc.stdout.readline() if proc.stdout else ""
        if needle in line:
            return
        if proc.poll() is not None:
            raise AssertionError(proc.stderr.read() if proc.stderr else "exited")
    raise AssertionError(f"no {needle!r} within {timeout}s")


@pytest.mark.slow  # a server process
def test_serve_proxies_a_database_to_workers_over_grpc(tmp_path: Path) -> None:
    pytest.importorskip("grpc", reason="tunekit serve needs grpcio (the serve extra)")
    db, port = f"sqlite:///{tmp_path / 'served.db'}", _free_port()
    server = _start(["serve", "--storage", db, "--port", str(port)], tmp_path)
    try:
        _wait_line(server, "workers use --storage grpc://127.0.0.1:")
        space = write_space(tmp_path, SMALL)
        r = search("tests.tasks:regression_task", str(space), trials=3, pruner=NoPruning(),
                   backend=Local(device="cpu"), study=SharedStudy(name="g", storage=f"grpc://127.0.0.1:{port}"),
                   budget="10updates")
        assert len(r.trials) == 3
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        server.wait(timeout=30)
    assert [t.state.name for t in _trials(db, "g")] == ["COMPLETE"] * 3  # in the database behind the server


@pytest.mark.slow  # a dashboard process, over HTTP
def test_the_dashboard_shows_the_study_with_its_metric_name_and_reasons(tmp_path: Path) -> None:
    pytest.importorskip("optuna_dashboard", reason="tunekit dashboard needs optuna-dashboard (the dashboard extra)")

    from .tasks import DIVERGING

    space = write_space(tmp_path, DIVERGING)
    r = search("tests.tasks:regression_task", str(space), trials=3, seed=0, out=tmp_path / "o",
               sampler=RandomSampler(seed_trial=False), pruner=NoPruning(), backend=Local(device="cpu"),
               budget="10updates")
    # And one a killed process left running, failed as a resume finds it: every failed trial says why.
    from tunekit.hpsearch.study import mark_interrupted

    store = make_storage(None, tmp_path / "o")
    study = optuna.load_study(study_name=r.study_name, storage=store)
    study.ask({"x": optuna.distributions.FloatDistribution(0, 1)})
    mark_interrupted(study, store)
    body = _dashboard_study(str(tmp_path / "o"), tmp_path)
    assert body["objective_names"] == ["validation loss"]  # what the dashboard calls the metric names
    failed = [t for t in body["trials"] if t["state"] == "Fail"]
    reasons = [next((a["value"] for a in t["user_attrs"] if a["key"] == "reason"), None) for t in failed]
    assert len(failed) >= 2 and all(reasons), reasons
    assert any("diverged at update" in x for x in reasons) and "interrupted; re-run on --resume" in reasons


@pytest.mark.slow  # a shared study created with its probes, a worker and a report
def test_the_creator_attaches_the_probes_and_the_report_its_plot_as_artifacts(tmp_path: Path) -> None:
    from optuna.artifacts import get_all_artifact_meta

    from tunekit.hpsearch.shared.api import write_study_report

    from .tasks import classification_task  # noqa: F401 - the spec below names it

    journal = str(tmp_path / "a.log")
    search("tests.tasks:classification_task", "from_scratch", trials=1, out=tmp_path / "o",
           backend=Local(device="cpu"), study=SharedStudy(name="a", storage=journal, artifacts=str(tmp_path / "art")),
           budget="20updates")
    study = optuna.load_study(study_name="a", storage=make_storage(journal, None))
    names = sorted(m.filename for m in get_all_artifact_meta(study))
    assert names == ["lr_find.json", "lr_find.png", "probe.json", "probe.png"]
    write_study_report(journal, "a", tmp_path / "r")  # the study knows its artifact folder
    assert "search.png" in {m.filename for m in get_all_artifact_meta(study)}


def test_serve_and_dashboard_refuse_what_they_cannot_serve(tmp_path: Path) -> None:
    from tunekit.hpsearch.shared.server import dashboard, serve

    with pytest.raises(UsageError, match="a journal file needs no server"):
        serve(str(tmp_path / "j.log"))
    with pytest.raises(UsageError, match="holds no study.db"):
        dashboard(str(tmp_path))
    with pytest.raises(UsageError, match=r"is not grpc://HOST:PORT: write e.g. grpc://127.0.0.1:13000"):
        make_storage("grpc://nohost", None)


def test_threads_default_to_the_cores_divided_among_this_machines_live_workers() -> None:
    from tunekit.hpsearch.shared.workers import default_threads, register_worker, worker_seed

    study = optuna.create_study()
    cores = len(os.sched_getaffinity(0))
    assert default_threads(study) == cores
    register_worker(study, "a", 1, None)  # this process
    study.set_user_attr("tunekit_worker:b", {"host": os.uname().nodename, "pid": os.getppid()})  # another, alive
    study.set_user_attr("tunekit_worker:c", {"host": "elsewhere", "pid": os.getppid()})  # another machine's
    assert default_threads(study) == max(1, cores // 2)
    assert len({worker_seed(0, w) for w in ("h:1", "h:2", "g:1")}) == 3 and worker_seed(0, "h:1") == worker_seed(0, "h:1")


def test_a_report_does_not_show_the_databases_password() -> None:
    from tunekit.hpsearch.study import safe_url

    assert safe_url("postgresql://tk:s3cret@db:5432/tk") == "postgresql://tk:***@db:5432/tk"
    assert safe_url("sqlite:////tmp/a.db") == "sqlite:////tmp/a.db"


@pytest.mark.slow  # the dashboard in a subprocess
def test_the_dashboard_serves_the_probes_plots_as_artifacts(tmp_path: Path) -> None:
    pytest.importorskip("optuna_dashboard", reason="tunekit dashboard needs optuna-dashboard (the dashboard extra)")

    journal = str(tmp_path / "a.log")
    search("tests.tasks:classification_task", "from_scratch", trials=1, out=tmp_path / "o",
           backend=Local(device="cpu"), study=SharedStudy(name="a", storage=journal, artifacts=str(tmp_path / "art")),
           budget="20updates")
    body = _dashboard_study(journal, tmp_path)
    # What the dashboard's study page lists, and shows for the images: the range test and the probe.
    assert {a["filename"] for a in body["artifacts"]} >= {"lr_find.png", "lr_find.json", "probe.png", "probe.json"}


@pytest.mark.slow  # a shared study and a worker
def test_a_shared_study_keeps_its_objective_and_a_worker_joins_in_that_metric(tmp_path: Path) -> None:
    """The objective is part of the study: the creator stores it (spec, plan, direction, metric name),
    a joining worker takes it, and one that names another objective is refused."""
    journal = str(tmp_path / "s.log")
    space = write_space(tmp_path, SMALL)
    create_study("tests.tasks:classification_task", str(space), trials=3, objective="accuracy", pruner=NoPruning(),
                 backend=Local(device="cpu"), study=SharedStudy(name="acc", storage=journal), budget="20updates")
    study = optuna.load_study(study_name="acc", storage=make_storage(journal, None))
    assert study.direction == optuna.study.StudyDirection.MAXIMIZE and study.metric_names == ["validation accuracy"]
    assert (study.user_attrs["tunekit_spec"]["objective"], study.user_attrs["tunekit_spec"]["direction"]) == \
        ("accuracy", "maximize")
    r = join_study(SharedStudy(journal, "acc"), backend=Local(device="cpu"))
    done = [t for t in r.trials if t["state"] == "COMPLETE"]
    assert (r.objective, r.direction) == ("accuracy", "maximize") and len(done) == 3
    assert r.best_value == max(t["value"] for t in done) and all(0 <= t["value"] <= 1 for t in done)
    assert study_result(journal, "acc").objective == "accuracy"
    with pytest.raises(UsageError, match="objective"):
        join_study(SharedStudy(journal, "acc"), backend=Local(device="cpu"), objective="loss")


def test_a_worker_joins_a_study_created_before_the_objective_existed(tmp_path: Path) -> None:
    """An older study's spec has no objective or direction: a worker joins it as a loss study."""
    journal = str(tmp_path / "s.log")
    create_study("tests.tasks:regression_task", str(write_space(tmp_path, SMALL)), trials=2, pruner=NoPruning(),
                 backend=Local(device="cpu"), study=SharedStudy(name="old", storage=journal), budget="10updates")
    study = optuna.load_study(study_name="old", storage=make_storage(journal, None))
    spec = {k: v for k, v in study.user_attrs["tunekit_spec"].items() if k not in ("objective", "direction")}
    study.set_user_attr("tunekit_spec", spec)
    plan = {k: v for k, v in study.user_attrs["tunekit_plan"].items() if k not in ("objective", "direction")}
    study.set_user_attr("tunekit_plan", plan)
    with pytest.deprecated_call(match=r"^join_study\(storage, study_name, \.\.\.\) is deprecated since tunekit 0\.2\.0 "
                                      r"and removed in tunekit 0\.3\.0: pass join_study\(SharedStudy"):
        r = join_study(journal, "old", device="cpu")  # 0.1.0's form, a shim until 0.3.0: the same worker
    assert r.objective == "loss" and len([t for t in r.trials if t["state"] == "COMPLETE"]) == 2


def test_study_create_honours_the_worker_flags_and_refuses_the_trial_flags(tmp_path: Path, capsys: Any) -> None:
    """`study create` takes the search's flags but runs no trial: --threads and --worker-id name the creator;
    a flag that only says how trials run is refused in one line, not ignored."""
    from tunekit.cli import main

    space, journal = write_space(tmp_path, SMALL), str(tmp_path / "study.log")
    common = ["--space", str(space), "--trials", "3", "--storage", journal, "--task", "tests.tasks:regression_task",
              "--max-steps", "10", "--device", "cpu", "--quiet"]
    for flag in (["--backend", "ray"], ["--max-failures", "1"], ["--max-concurrent", "2"]):
        code = main(["study", "create", *common, "--study", "x", *flag])
        err = capsys.readouterr().err
        assert code == 2 and f"runs no trial, so {flag[0]} would do nothing" in err
        assert "Traceback" not in err and len(err.strip().splitlines()) == 1
    made = run_cli("study", "create", *common, "--study", "c", "--threads", "1", "--worker-id", "creator")
    assert made.returncode == 0 and "Warning" not in made.stderr, made.stderr[-2000:]  # its empty plots too
    attrs = optuna.load_study(study_name="c", storage=make_storage(journal, None)).user_attrs
    assert attrs["tunekit_worker:creator"]["threads"] == 1
    assert not [k for k in attrs if k.startswith("tunekit_worker:") and k != "tunekit_worker:creator"]


def test_study_delete_says_what_a_study_holds_and_deletes_it_only_with_yes(tmp_path: Path, capsys: Any) -> None:
    from tunekit.cli import main

    journal = str(tmp_path / "d.log")
    study = optuna.create_study(study_name="gone", storage=make_storage(journal, None))
    for x in (0.25, 0.5):
        study.enqueue_trial({"x": x})
    t = study.ask({"x": optuna.distributions.FloatDistribution(0, 1)})
    study.tell(t, 1.0)
    delete = ["study", "delete", "--storage", journal, "--study", "gone"]
    assert main(delete) == 2 and "holds 1 complete, 1 waiting: pass --yes to delete it" in capsys.readouterr().err
    assert "gone" in optuna.get_all_study_names(make_storage(journal, None))  # nothing lost without --yes
    assert main([*delete, "--yes"]) == 0 and "deleted study 'gone' (1 complete, 1 waiting)" in capsys.readouterr().out
    assert optuna.get_all_study_names(make_storage(journal, None)) == []
    assert main([*delete, "--yes"]) == 2
    err = capsys.readouterr().err
    assert "there is no study 'gone'" in err and "Traceback" not in err


@pytest.mark.slow  # a creator process killed while it probes, then two more processes
def test_a_creator_killed_while_probing_is_taken_over_by_the_next_study_create(tmp_path: Path) -> None:
    """The study exists without its settings: a worker is told at once what to do (not after 30 minutes), and the
    same `study create` again finishes the creation, after which the workers run it as usual."""
    space, journal = write_space(tmp_path, SMALL), str(tmp_path / "study.log")
    create = ["study", "create", "--space", str(space), "--trials", "3", "--storage", journal, "--study", "c", *SLOW]
    first = _start([*create, "--out", str(tmp_path / "a")], tmp_path)
    deadline = time.time() + 120
    while not ("c" in optuna.get_all_study_names(make_storage(journal, None))
               and "tunekit_creator" in optuna.load_study(study_name="c", storage=make_storage(journal, None)).user_attrs):
        assert time.time() < deadline and first.poll() is None, "the creator never claimed the study"
        time.sleep(0.1)
    os.killpg(first.pid, signal.SIGKILL)  # while it probes: the study has no settings
    first.wait()
    assert "tunekit_spec" not in optuna.load_study(study_name="c", storage=make_storage(journal, None)).user_attrs
    with pytest.raises(UsageError, match="stopped before it stored the study's settings: run the same tunekit study"):
        join_study(SharedStudy(journal, "c"), backend=Local(device="cpu"), progress=False)  # at once, not after its timeout
    again = run_cli(*create, "--out", str(tmp_path / "b"), cwd=tmp_path)
    assert again.returncode == 0, again.stderr[-2000:]
    assert optuna.get_all_study_names(make_storage(journal, None)) == ["c"]  # the takeover's marker is gone
    join_study(SharedStudy(journal, "c"), backend=Local(device="cpu"), progress=False)
    _check_exact(journal, "c", 3)


def test_a_storage_call_is_retried_on_a_lost_connection_only_and_then_stops_in_one_line() -> None:
    import sqlalchemy.exc

    from tunekit.hpsearch.resilient import StorageUnreachable, retrying_class

    class Flaky(optuna.storages.InMemoryStorage):
        def __init__(self, fails: int, error: Exception) -> None:
            super().__init__()
            self.fails, self.error, self.calls = fails, error, 0

        def get_all_studies(self) -> list[Any]:
            self.calls += 1
            if self.calls <= self.fails:
                raise self.error
            return super().get_all_studies()

    lost = sqlalchemy.exc.OperationalError("SELECT 1", {}, Exception("server closed the connection unexpectedly"))
    store = retrying_class(Flaky, "postgresql://db/tk")(2, lost)
    store.retry_for = 10.0
    assert store.get_all_studies() == [] and store.calls == 3  # two lost connections, then an answer
    store = retrying_class(Flaky, "postgresql://db/tk")(99, lost)
    store.retry_for = 0.5
    with pytest.raises(StorageUnreachable) as exc:
        store.get_all_studies()
    said = str(exc.value)
    assert said.startswith("storage postgresql://db/tk did not answer for 0.5 s (") and "server closed the connection" in said
    assert "\n" not in str(exc.value)
    store = retrying_class(Flaky, "postgresql://db/tk")(1, ValueError("a bad value"))
    store.retry_for = 10.0
    with pytest.raises(ValueError, match="a bad value"):  # not a connection error: raised at once
        store.get_all_studies()
    assert store.calls == 1


@pytest.mark.slow  # tunekit serve restarted under two gRPC workers
def test_grpc_workers_ride_out_a_restart_of_tunekit_serve(tmp_path: Path) -> None:
    pytest.importorskip("grpc", reason="tunekit serve needs grpcio (the serve extra)")
    db, port = f"sqlite:///{tmp_path / 'served.db'}", _free_port()
    url, space = f"grpc://127.0.0.1:{port}", write_space(tmp_path, SMALL)
    long = [a if a != "40" else "150" for a in SLOW]  # trials of about 3 s
    server = _start(["serve", "--storage", db, "--port", str(port)], tmp_path)
    procs: list[subprocess.Popen[str]] = []
    try:
        _wait_line(server, "workers use --storage grpc://127.0.0.1:")
        created = run_cli("study", "create", "--space", str(space), "--trials", "2", "--storage", url, "--study", "g",
                          "--out", str(tmp_path / "c"), *long)
        assert created.returncode == 0, created.stderr[-2000:]
        procs = [_start(["worker", "--storage", url, "--study", "g", "--quiet"], tmp_path) for _ in range(2)]
        # A trial in flight when the server goes: which worker holds it is a race (a worker that starts
        # late may find both trials taken), and the other one is polling the storage all the same.
        _wait_mid_trial(db, "g", None)
        os.killpg(server.pid, signal.SIGTERM)  # the server goes away for a moment, then comes back
        server.wait(timeout=30)
        time.sleep(1)
        server = _start(["serve", "--storage", db, "--port", str(port)], tmp_path)
        _wait_line(server, "workers use --storage grpc://127.0.0.1:")
        for p in procs:
            _, err = p.communicate(timeout=300)
            assert p.returncode == 0 and "Storage" not in err and "Traceback" not in err, err[-3000:]
    finally:
        for p in [*procs, server]:
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGTERM)
                p.wait(timeout=30)
    assert all(t.state.name == "COMPLETE" for t in _check_exact(db, "g", 2))


def test_an_unreachable_grpc_address_fails_within_the_storage_retry_time(monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("grpc", reason="tunekit serve needs grpcio (the serve extra)")
    waits: list[Any] = []  # what the storage waits for a server: counted, not timed
    ready = optuna.storages.GrpcStorageProxy.wait_server_ready

    def wait_server_ready(self: Any, timeout: float | None = None) -> None:
        waits.append(timeout)
        ready(self, timeout=timeout)

    monkeypatch.setattr(optuna.storages.GrpcStorageProxy, "wait_server_ready", wait_server_ready)
    with pytest.raises(UsageError, match=r"no tunekit serve answers at grpc://127\.0\.0\.1:\d+ after 1s"):
        make_storage(f"grpc://127.0.0.1:{_free_port()}", None, retry_for=1.0)
    assert waits == [1.0]  # one wait, bounded by the retry time: not the default 30 s


def test_a_worker_in_another_folder_runs_a_study_made_with_a_relative_task_file_and_fails_when_every_trial_does(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The study keeps the task file's absolute path: a worker started elsewhere loads it. A worker whose
    every trial failed raises NoTrialSucceeded naming the first failure's cause."""
    from tunekit import Local, NoPruning, NoTrialSucceeded, SharedStudy

    from .tasks import FAILING

    journal = str(tmp_path / "s.log")
    (tmp_path / "proj").mkdir()
    (tmp_path / "proj" / "mytasks.py").write_text("from tests.tasks import picky_regression_task, regression_task  # noqa\n")
    (tmp_path / "elsewhere").mkdir()
    monkeypatch.chdir(tmp_path / "proj")
    cpu = Local(device="cpu")
    create_study("mytasks.py:regression_task", str(write_space(tmp_path, SMALL)), study=SharedStudy(journal, "good"),
                 trials=2, budget="10updates", backend=cpu, pruner=NoPruning())
    create_study("mytasks.py:picky_regression_task", str(write_space(tmp_path, FAILING.replace("[13, 16]", "[13]"),
                 "failing.toml")), study=SharedStudy(journal, "bad"), trials=2, budget="10updates", backend=cpu)
    monkeypatch.chdir(tmp_path / "elsewhere")
    r = join_study(SharedStudy(journal, "good"), backend=cpu)
    assert [t["state"] for t in r.trials] == ["COMPLETE", "COMPLETE"]
    assert r.task == f"{tmp_path / 'proj' / 'mytasks.py'}:regression_task"
    with pytest.raises(NoTrialSucceeded, match=r"^all 2 trials this worker ran failed, the first \(trial 0\) with "
                                               r"RuntimeError: hidden=13 is unlucky$"):
        join_study(SharedStudy(journal, "bad"), backend=cpu)
