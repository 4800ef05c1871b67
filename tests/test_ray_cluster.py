"""Ray backend tests that run their own Ray: a real local cluster joined with --address,
and resume after the driver process is killed. No Ray instance of the test process runs
meanwhile (`ray stop` would end it)."""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import optuna
import pytest

pytest.importorskip("ray")


from tunekit import SearchResult  # noqa: E402

from .test_cli import ROOT  # noqa: E402
from .test_cli import tunekit as run_cli  # noqa: E402
from .test_search import SMALL, write_space  # noqa: E402



def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_join_a_real_local_cluster(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`ray start --head` on 127.0.0.1, a search joined to it with --address, the cluster stopped after."""
    monkeypatch.setenv("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")  # everything on loopback
    env = dict(os.environ, RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER="0")
    ray_bin = str(Path(sys.executable).parent / "ray")
    port = _free_port()
    address = f"127.0.0.1:{port}"
    start = subprocess.run([ray_bin, "start", "--head", "--node-ip-address=127.0.0.1", f"--port={port}", "--num-cpus=2",
                            "--num-gpus=0", "--include-dashboard=false", "--disable-usage-stats"],
                           env=env, capture_output=True, text=True, timeout=120)
    assert start.returncode == 0, start.stderr[-2000:]
    try:
        space = write_space(tmp_path, SMALL)
        r = run_cli("search", "--task", "tests.tasks:regression_task", "--space", str(space), "--trials", "3",
                    "--max-steps", "10", "--no-prune", "--device", "cpu", "--backend", "ray", "--address", address,
                    "--storage-path", str(tmp_path / "shared"), "--out", str(tmp_path / "out"), "--quiet")
        assert r.returncode == 0, r.stderr[-3000:]
        assert "Configuration for experiment" not in r.stdout + r.stderr  # Ray's tables stay off the console
        res = SearchResult.from_json(tmp_path / "out" / "search.json")
        assert [t["state"] for t in res.trials] == ["COMPLETE"] * 3
        # The trials ran on the cluster we started, on loopback.
        assert {t["worker"]["cluster"] for t in res.trials} == {address}
        assert {t["worker"]["node"] for t in res.trials} == {"127.0.0.1"}
        # Tune's trial directories went to --storage-path (a shared filesystem on a real cluster).
        assert (tmp_path / "shared" / res.study_name).is_dir() and not (tmp_path / "out" / "ray").exists()
    finally:
        subprocess.run([ray_bin, "stop", "--force"], env=env, capture_output=True, timeout=120)


def test_resume_after_the_driver_is_killed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Not set here: tunekit keeps the Ray it starts on loopback by itself.
    monkeypatch.delenv("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", raising=False)
    space = write_space(tmp_path, SMALL)
    out = tmp_path / "run"
    args = ["search", "--task", "tests.tasks:slow_regression_task", "--space", str(space), "--trials", "6",
            "--max-steps", "15", "--no-prune", "--device", "cpu", "--out", str(out), "--quiet", "--backend", "ray",
            "--max-concurrent", "1"]
    env = dict(os.environ, OMP_NUM_THREADS="1")
    proc = subprocess.Popen([sys.executable, "-m", "tunekit", *args], cwd=ROOT, env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    storage = f"sqlite:///{out / 'study.db'}"
    name = "tunekit-regression-space"
    deadline = time.time() + 240
    try:
        while time.time() < deadline:
            time.sleep(0.1)
            try:
                trials = optuna.load_study(study_name=name, storage=storage).trials
            except Exception:
                continue
            complete = [t for t in trials if t.state.name == "COMPLETE"]
            running = [t for t in trials if t.state.name == "RUNNING"]
            if len(complete) >= 2 and running:
                proc.send_signal(signal.SIGKILL)  # the driver dies without any cleanup
                proc.wait()
                break
        else:
            pytest.fail("the search never reached two complete trials")
    finally:
        if proc.poll() is None:
            proc.kill()
    trials = optuna.load_study(study_name=name, storage=storage).trials
    done_before = {t.number: (t.value, t.params) for t in trials if t.state.name == "COMPLETE"}
    interrupted = [t for t in trials if t.state.name == "RUNNING"]
    assert interrupted

    r = run_cli(*args, "--resume")
    assert r.returncode == 0, r.stderr[-3000:]
    after = optuna.load_study(study_name=name, storage=storage).trials
    numbers = [t.number for t in after]
    assert len(numbers) == len(set(numbers))
    for n, (v, p) in done_before.items():  # no completed trial lost or changed
        assert after[n].state.name == "COMPLETE" and after[n].value == v and after[n].params == p
    finished = [t for t in after if t.state.name in ("COMPLETE", "PRUNED")
                or (t.state.name == "FAIL" and t.user_attrs.get("error") != "interrupted; re-run on --resume")]
    assert len(finished) == 6  # none missing, none extra
    # The interrupted trial ran again with its parameters. (A kill can land between a trial's
    # creation and its sampling: a trial with no parameters yet is simply sampled anew.)
    for t in interrupted:
        if t.params:
            assert any(u.number > t.number and u.params == t.params and u.state.name == "COMPLETE" for u in after), (t, after)
    assert {t.user_attrs["worker"]["node"] for t in after if "worker" in t.user_attrs} == {"127.0.0.1"}
    # TPE went on from the stored trials: the params after resume are not a replay of a fresh start.
    assert len({round(t.params["lr"], 12) for t in finished}) == len(finished)
