import atexit
import os
import secrets
import shutil
import tempfile
from typing import Any


def _session_temp() -> None:
    """One temporary folder for the session, its workers and every process they start (TMPDIR), removed
    when the session ends: what a killed process could not clean up goes with it. In memory (/dev/shm)
    where the machine has it: a study's SQLite commits and the plots, weights and reports the tests write
    need no disk (an fsync was 11 ms of each of a test search's 358 commits)."""
    if os.environ.get("TUNEKIT_TESTS_TMP"):  # a worker of the session, or a process it started: inherited
        return
    shm = "/dev/shm"
    folder = tempfile.mkdtemp(prefix="tk-", dir=shm if os.path.isdir(shm) and os.access(shm, os.W_OK) else None)
    os.environ["TMPDIR"] = os.environ["TUNEKIT_TESTS_TMP"] = folder
    tempfile.tempdir = folder
    atexit.register(shutil.rmtree, folder, ignore_errors=True)


_session_temp()

os.environ.setdefault("MPLBACKEND", "Agg")
# Ray (2.60) with token auth writes ~/.ray/auth_token unless a token is given: the tests'
# Ray instances (and the `ray start` they run) share one of their own, and write nothing.
os.environ.setdefault("RAY_AUTH_TOKEN", secrets.token_hex(32))

import pytest
import torch

# Small models, fixed seeds, one thread: fast and deterministic on 2 cores.
torch.set_num_threads(1)


# Tests that run one at a time in a lane of their own (`make test` runs the lanes beside the rest): Ray
# clusters sized to the machine's cores, workers judged by heartbeats and timers, processes killed at
# random points of a run, servers restarted under their clients. Three lanes (pytest-xdist's loadgroup):
# Ray in the test process; real clusters and Rays of their own (subprocesses); killed processes. Mostly
# they wait (a process starting, a kill, a grace period), so the rest runs on the cores meanwhile; the
# lanes are balanced by their durations on a clean clone. The rest run in parallel: a shared study's
# workers, servers and dashboards included, when nothing is timed or killed. A test named here takes
# its lane over its file's.
SERIAL_FILES = {"test_ray.py": "ray", "test_ray_cluster.py": "cluster"}
SERIAL_TESTS = {"test_resume_after_the_process_is_killed_at_random_points": "killed",
                # tests/test_ray.py: a search in a subprocess, with a Ray of its own
                "test_a_task_object_from_a_module_on_sys_path_runs_on_ray": "cluster",
                "test_a_relative_task_file_from_another_folder_runs_on_ray_and_all_failed_exits_1_without_tracebacks": "cluster",
                # tests/test_ray_cluster.py: a cluster of the test process's own (cluster_utils), in the shorter lane
                "test_a_node_that_dies_mid_search_costs_retries_not_trials": "killed",
                # tests/test_shared.py: a worker killed, a heartbeat's grace period, a server restarted, and
                # three workers racing for seven trials (that each gets some is a race the machine's load could lose)
                "test_three_workers_started_together_on_a_fresh_database_finish_exactly_n": "killed",
                "test_a_killed_worker_costs_one_trial_and_the_survivors_ride_out_a_database_restart": "killed",
                "test_journal_workers_recover_a_killed_worker": "killed",
                "test_a_stale_heartbeat_fails_the_trial_with_its_workers_name_and_queues_one_rerun": "killed",
                "test_a_creator_killed_while_probing_is_taken_over_by_the_next_study_create": "killed",
                "test_grpc_workers_ride_out_a_restart_of_tunekit_serve": "killed",
                # tests/test_confirm.py: a worker, and a search, killed during a confirmation run
                "test_a_shared_studys_confirmation_runs_survive_a_killed_worker": "killed",
                "test_a_search_killed_during_a_confirmation_run_resumes_it_once": "ray",
                "test_bench_quick_serial": "killed"}  # tests/test_bench_quick.py: benchmarks that start Ray, PostgreSQL, processes


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist's own hook, which reads the lanes from these marks
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        lane = SERIAL_TESTS.get(getattr(item, "originalname", "")) or SERIAL_FILES.get(item.path.name)
        if lane is not None:
            item.add_marker(pytest.mark.serial)
            item.add_marker(pytest.mark.xdist_group(lane))  # one test at a time in each lane (--dist loadgroup)
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_node_collection_finished(node: Any, ids: list[str]) -> None:
    """Under --dist loadgroup, pytest-xdist names each lane's test ``test@lane`` and schedules by it; where it
    did not, the lanes' tests would run at random beside each other and pass or fail by chance: stopped."""
    if node.config.getoption("dist") != "loadgroup":
        return
    lost = [i for i in ids if "@" not in i and (i.split("::")[0].rsplit("/", 1)[-1] in SERIAL_FILES
                                               or i.split("::")[-1].split("[")[0] in SERIAL_TESTS)]
    if lost:
        pytest.exit(f"{len(lost)} tests lost their lane (first: {lost[0]}): pytest {pytest.__version__} with this "
                    "pytest-xdist does not group --dist loadgroup (pytest-dev/pytest-xdist#1386); install "
                    "pytest<9.2 (pip install -e '.[test]')", returncode=4)


@pytest.fixture(scope="session")
def postgres():
    """A real PostgreSQL (pgserver's binaries) on a Unix socket in a temporary folder, for the session.

    Yields ``fresh()``: the SQLAlchemy URL of a new, empty database on it (each test its own)."""
    pgserver = pytest.importorskip("pgserver", reason="the shared-study tests need pgserver (the test extra)")
    import contextlib
    import itertools
    import shutil
    import tempfile

    import psycopg

    # Its own folder in /tmp (not pytest's, which PostgreSQL's user could not enter to stop it).
    data = tempfile.mkdtemp(prefix="tunekit-pg-")
    srv = pgserver.get_server(data, cleanup_mode="stop")
    uri = srv.get_uri()  # postgresql://postgres:@/postgres?host=/tmp/...
    numbers = itertools.count()

    def fresh() -> str:
        name = f"tk{next(numbers)}"
        with psycopg.connect(uri, autocommit=True) as conn:
            conn.execute(f"CREATE DATABASE {name}")
        return uri.replace("/postgres?", f"/{name}?")

    def restart() -> None:
        """Restart the server (fast: open connections are cut), as a database's restart or failover does."""
        pgserver.pg_ctl(["-w", "-m", "fast", "restart"], pgdata=srv.pgdata, user=srv.system_user, timeout=60)

    fresh.restart = restart  # type: ignore[attr-defined]
    try:
        yield fresh
    finally:
        # After a restart pgserver no longer takes the server for its own, and its cleanup leaves it running.
        with contextlib.suppress(Exception):
            pgserver.pg_ctl(["-w", "-m", "fast", "stop"], pgdata=srv.pgdata, user=srv.system_user, timeout=60)
        srv.cleanup()
        shutil.rmtree(data, ignore_errors=True)


# ------------------------------------------------------------------ the CLI in this process
# `tunekit ARGS` is `tunekit.cli.main(ARGS)`: the console script calls nothing else. A usage error needs
# no subprocess of its own (one per case cost seconds each); each command keeps one subprocess smoke
# test of its entry point end to end (tests/test_cli.py).

def _tree(root) -> dict[str, int]:  # type: ignore[no-untyped-def]
    """Every file and folder under ``root``, with its size (folders -1)."""
    return {str(p.relative_to(root)): (p.stat().st_size if p.is_file() else -1) for p in root.rglob("*")}


@pytest.fixture
def steady_clock(monkeypatch: pytest.MonkeyPatch) -> None:
    """The probe's timed steps read a scripted clock: 1 ms + 20 us a sample, never busy; its timed evaluation
    passes 0.2 ms a batch + 5 us a sample. A test of what a budget in device time buys needs prices, and a live
    probe on a loaded CI machine can find every timing spread (rightly refused: tests/test_probe.py); the steps
    and passes still run, only their seconds are scripted."""
    from tunekit.probes import throughput

    def time_step(step: Any) -> float:
        return 1e-3 + 2e-5 * int(step().samples)

    def time_pass(one_pass: Any, batches: int, batch: int) -> float:
        one_pass()
        return batches * (2e-4 + 5e-6 * batch)

    monkeypatch.setattr(throughput, "_time_step", time_step)
    monkeypatch.setattr(throughput, "_time_pass", time_pass)


@pytest.fixture
def run_main(capsys: pytest.CaptureFixture[str], tmp_path, monkeypatch: pytest.MonkeyPatch):  # type: ignore[no-untyped-def]
    """``run_main(*args, cwd=None) -> (code, out, err)``: ``tunekit ARGS`` in this process, in ``cwd``
    (the test's tmp_path unless told, where a default tunekit_runs/ lands). argparse's exits are caught
    and give their status, as the console script's would."""
    from tunekit.cli import main

    def run(*args: str, cwd=None) -> tuple[int, str, str]:  # type: ignore[no-untyped-def]
        monkeypatch.chdir(cwd or tmp_path)
        capsys.readouterr()  # what came before is not this command's
        try:
            code = main(list(args))
        except SystemExit as exc:  # argparse: --help (0), a bad flag (2)
            code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        out, err = capsys.readouterr()
        return code, out, err

    return run


@pytest.fixture
def assert_usage_error(run_main, tmp_path):  # type: ignore[no-untyped-def]
    """``assert_usage_error(args, match, cwd=None) -> line``: ``tunekit ARGS`` exits 2 with ONE line on
    stderr that contains ``match`` (a plain substring), no traceback, and writes nothing: the folder it
    ran in (tmp_path unless told, where the tests point --out) is as it was."""
    def check(args, match: str, cwd=None) -> str:  # type: ignore[no-untyped-def]
        where = cwd or tmp_path
        before = _tree(where)
        code, out, err = run_main(*args, cwd=where)
        assert code == 2, (args, code, out[-2000:], err[-2000:])
        lines = err.strip().splitlines()
        assert len(lines) == 1, (args, err)
        assert match in lines[0], (args, match, lines[0])
        assert "Traceback" not in err and "Traceback" not in out, err
        assert _tree(where) == before, (args, "wrote", set(_tree(where)) ^ set(before))
        return lines[0]

    return check
