"""Ray backend tests that run their own Ray: a real local cluster joined with --address,
and resume after the driver process is killed. No Ray instance of the test process runs
meanwhile."""

import contextlib
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("ray")

from tunekit import NoPruning, Ray, SearchResult  # noqa: E402

from .tasks import ROOT  # noqa: E402
from .tasks import run_cli  # noqa: E402
from .tasks import SMALL, kill_and_resume, write_space  # noqa: E402

pytestmark = pytest.mark.slow  # real Ray clusters and kill-resume


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_for_head(head: subprocess.Popen[bytes], port: int, timeout_s: float = 120) -> None:
    import socket
    import time

    deadline = time.time() + timeout_s
    while time.time() < deadline:
        assert head.poll() is None, (head.stderr.read() if head.stderr else b"")[-2000:]
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            time.sleep(2)  # the GCS answers before the raylet has registered
            return
        except OSError:
            time.sleep(0.5)
    raise AssertionError("the Ray head did not start")


def test_join_a_real_local_cluster(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`ray start --head` on 127.0.0.1, a search joined to it with --address, the cluster stopped after."""
    monkeypatch.setenv("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")  # everything on loopback
    env = dict(os.environ, RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER="0")
    ray_bin = str(Path(sys.executable).parent / "ray")
    port = _free_port()
    address = f"127.0.0.1:{port}"
    # --block keeps the head in this process group, so the test stops its own cluster and nothing
    # else: `ray stop` would end every Ray on the machine, other people's included.
    head = subprocess.Popen([ray_bin, "start", "--head", "--block", "--node-ip-address=127.0.0.1", f"--port={port}",
                             "--num-cpus=2", "--num-gpus=0", "--include-dashboard=false", "--disable-usage-stats"],
                            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True)
    try:
        _wait_for_head(head, port)
        space = write_space(tmp_path, SMALL)
        r = run_cli("search", "--task", "tests.tasks:regression_task", "--space", str(space), "--trials", "3",
                    "--budget", "160samples", "--no-prune", "--device", "cpu", "--backend", "ray", "--address", address,
                    "--storage-path", str(tmp_path / "shared"), "--out", str(tmp_path / "out"), "--quiet",
                    cwd=ROOT)  # the cluster's workers find tests.tasks through the driver's folder
        assert r.returncode == 0, r.stderr[-3000:]
        assert "Configuration for experiment" not in r.stdout + r.stderr  # Ray's tables stay off the console
        res = SearchResult.from_json(tmp_path / "out" / "search.json")
        assert [t["state"] for t in res.trials] == ["COMPLETE"] * 3
        assert [t["samples"] for t in res.trials] == [160] * 3 and res.budget["unit"] == "samples"
        # The trials ran on the cluster we started, on loopback.
        assert {t["worker"]["cluster"] for t in res.trials} == {address}
        assert {t["worker"]["node"] for t in res.trials} == {"127.0.0.1"}
        # Tune's trial directories went to --storage-path (a shared filesystem on a real cluster).
        assert (tmp_path / "shared" / res.study_name).is_dir() and not (tmp_path / "out" / "ray").exists()
        # Without --address, a search starts a Ray of its own, even with that cluster up on this machine:
        # one trial's worker says which (one worker process, not two: a Ray start is what this costs).
        alone = run_cli("search", "--task", "tests.tasks:regression_task", "--space", str(space), "--trials", "1",
                        "--budget", "160samples", "--no-prune", "--device", "cpu", "--backend", "ray",
                        "--max-concurrent", "1", "--out", str(tmp_path / "alone"), "--quiet", cwd=ROOT)
        assert alone.returncode == 0, alone.stderr[-3000:]
        own = SearchResult.from_json(tmp_path / "alone" / "search.json")
        assert [t["state"] for t in own.trials] == ["COMPLETE"]
        assert own.trials[0]["worker"]["cluster"] != address and own.trials[0]["worker"]["node"] == "127.0.0.1"
    finally:
        # SIGTERM to `ray start` alone: it stops the processes it started in about 2 s (sent to the whole
        # group, each process's own handler ran and the head took 33 s to end). Then SIGKILL to whatever of
        # its process group is left, if anything.
        head.terminate()
        try:
            head.wait(timeout=60)
        except subprocess.TimeoutExpired:
            head.kill()
            head.wait()
        with contextlib.suppress(ProcessLookupError):
            os.killpg(head.pid, signal.SIGKILL)


def test_resume_after_the_driver_is_killed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Not set here: tunekit keeps the Ray it starts on loopback by itself.
    monkeypatch.delenv("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", raising=False)
    # Two kills (each life starts a Ray of its own, ~20 s): a fresh run killed, then a resumed one, then the
    # resume that finishes; a third kill would repeat the second's case. 8 trials, not 10: the last life has
    # about as many left to run as it had after three kills.
    after = kill_and_resume(tmp_path, ["--backend", "ray", "--max-concurrent", "1"], kills=2, seed=1, trials=8,
                            window_s=3)
    assert {t.user_attrs["worker"]["node"] for t in after if "worker" in t.user_attrs} == {"127.0.0.1"}
    # TPE went on from the stored trials: the params after resume are not a replay of a fresh start.
    finished = [t for t in after if t.state.name == "COMPLETE"]
    assert len({round(t.params["lr"], 12) for t in finished}) == len(finished)


def test_a_node_that_dies_mid_search_costs_retries_not_trials(tmp_path: Path) -> None:
    """Three nodes on loopback (ray.cluster_utils.Cluster); a worker node is removed while trials run on it: its
    trials re-run within --max-failures, each recorded once; the search finishes the requested count."""
    import sqlite3
    import threading
    import time

    import optuna
    from ray.cluster_utils import Cluster

    from tunekit import search
    from tunekit.hpsearch.backends.ray.cluster import prepare_env

    import ray

    if ray.is_initialized():  # another test's Ray in this process: the search would run there
        ray.shutdown()
    saved = dict(os.environ)  # prepare_env sets Ray's variables for the process: undone at the end
    prepare_env("127.0.0.1:1")  # before the nodes start: they and the driver use token auth, the tests' token
    loopback = {"node_ip_address": "127.0.0.1", "include_dashboard": False}
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 0, **loopback})
    nodes = [cluster.add_node(num_cpus=1, **loopback) for _ in range(2)]
    cluster.wait_for_nodes()
    db, done, removed = tmp_path / "o" / "study.db", {}, []
    space = write_space(tmp_path, SMALL)

    def run() -> None:
        try:
            done["result"] = search("tests.tasks:slow_regression_task", str(space), trials=6, out=tmp_path / "o",
                                    pruner=NoPruning(),
                                    backend=Ray(device="cpu", max_failures=2, address=cluster.address),
                                    budget="40updates")
        except BaseException as exc:  # noqa: BLE001 - reported below
            done["error"] = exc

    thread = threading.Thread(target=run)
    try:
        thread.start()
        deadline = time.time() + 240
        while time.time() < deadline and thread.is_alive():
            states: list[str] = []
            if db.is_file():
                with sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=5) as conn:
                    try:
                        states = [r[0] for r in conn.execute("SELECT state FROM trials")]
                    except sqlite3.OperationalError:
                        pass
            if states.count("COMPLETE") >= 1 and states.count("RUNNING") >= 2:
                cluster.remove_node(nodes[0])  # one of the two running trials is on it
                removed.append(time.time())
                break
            time.sleep(0.2)
        thread.join(timeout=300)
    finally:
        cluster.shutdown()
        os.environ.clear()
        os.environ.update(saved)
    assert "error" not in done, done.get("error")
    trials = optuna.load_study(study_name="tunekit-regression-space", storage=f"sqlite:///{db}").trials
    assert removed, "the search ended before a node could be removed"
    assert [t.state.name for t in trials] == ["COMPLETE"] * 6  # recorded once each, none left RUNNING
    # The dead node's trial ran again, within --max-failures 2. Tune may count the dead actor's failure
    # twice (a second one while the retry starts): 3 attempts then, the last on the node that lives.
    assert 2 <= max(t.user_attrs.get("attempts", 1) for t in trials) <= 3
