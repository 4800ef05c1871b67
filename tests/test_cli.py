import dataclasses
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from .tasks import ROOT  # noqa: E402
from .tasks import run_cli as tunekit  # noqa: E402

# One subprocess per command proves its console entry point end to end (python -m tunekit, as the
# console script runs tunekit.cli.main): train, tasks, spaces and the bare `tunekit` here; lr-find,
# probe, doctor, search and report in their own modules; worker, study, serve and dashboard in
# tests/test_shared.py. Everything else calls main() in this process (the run_main and
# assert_usage_error fixtures, tests/conftest.py).


@pytest.mark.slow  # a subprocess
def test_train_runs_and_writes_files(tmp_path: Path) -> None:
    r = tunekit("train", "--run-steps", "20", "--eval-every", "10", "--out", str(tmp_path), "--quiet")
    assert r.returncode == 0, r.stderr
    assert "final val loss" in r.stdout
    data = json.loads((tmp_path / "train.json").read_text())
    assert data["updates"] == 20 and len(data["losses"]) == 20
    assert [e["step"] for e in data["evals"]] == [10, 20]
    assert (tmp_path / "train.png").stat().st_size > 1000


@pytest.mark.slow  # a subprocess
def test_the_entry_point_without_a_command_prints_help_and_exits_2() -> None:
    r = tunekit()
    assert r.returncode == 2 and "COMMAND" in r.stdout and "Traceback" not in r.stderr


@pytest.mark.slow  # a subprocess
def test_tasks_lists_builtins() -> None:
    r = tunekit("tasks")
    assert r.returncode == 0
    assert "shapes" in r.stdout and "charlm" in r.stdout


def test_help_shows_examples(run_main) -> None:  # type: ignore[no-untyped-def]
    for args in (["--help"], ["train", "--help"], ["tasks", "--help"]):
        code, out, _ = run_main(*args)
        assert code == 0 and "examples:" in out, args


def test_no_command_prints_help_and_exits_2(run_main) -> None:  # type: ignore[no-untyped-def]
    code, out, err = run_main()
    assert code == 2 and "COMMAND" in out and err == ""


@pytest.mark.parametrize(
    "args, needle",
    [
        (["train", "--task", "nope"], "unknown task 'nope'"),
        (["train", "--lr", "abc"], "'abc' is not a number"),
        (["train", "--lr", "-1"], "'-1' must be > 0"),
        (["train", "--run-steps", "0"], "--run-steps must be a positive integer, got 0: pass e.g. --run-steps 200"),
        (["train", "--precision", "fp8"], "invalid choice: 'fp8'"),
        (["train", "--task", "missing/file.py:f"], "does not exist"),
        (["train", "--task", "no_such_module_xyz:f"], "module 'no_such_module_xyz'"),
        (["train", "--set", "width"], "--set 'width' is not KEY=VALUE"),
        (["train", "--warmup", "1.5"], "warmup 1.5"),
        (["train", "--device", "cuda:0"] if not __import__("torch").cuda.is_available() else ["train", "--device", "tpu"], "device"),
        (["frobnicate"], "invalid choice: 'frobnicate'"),
        (["tasks", "--frobnicate"], "unrecognized arguments: --frobnicate"),
        (["spaces", "nope"], "unknown space 'nope'"),
    ],
)
def test_usage_errors_exit_2_with_one_line(args: list[str], needle: str, assert_usage_error) -> None:  # type: ignore[no-untyped-def]
    assert_usage_error(args, needle)


def test_a_negative_value_reaches_its_own_check(assert_usage_error) -> None:  # type: ignore[no-untyped-def]
    line = assert_usage_error(["probe", "--memory-budget", "-5GB", "--quiet"], "-5GB")
    assert line == "tunekit probe: error: memory size '-5GB' is not a size: write it like 512MiB, 8GiB or 2.5GB"


def test_module_that_fails_to_import_is_a_usage_error(tmp_path: Path, assert_usage_error,  # type: ignore[no-untyped-def]
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "badmod.py").write_text("raise RuntimeError('broken at import')\n")
    monkeypatch.syspath_prepend(str(tmp_path))  # as `python -m tunekit` run in that folder has it on its path
    line = assert_usage_error(["train", "--task", "badmod:make"], "badmod")
    assert line == ("tunekit train: error: module 'badmod' (from task 'badmod:make') failed to import: "
                    "RuntimeError: broken at import")


def test_an_error_in_the_users_model_is_shown_as_theirs(run_main) -> None:  # type: ignore[no-untyped-def]
    """Not "internal error": the user's frames, and the task spec that loaded their code."""
    code, _, err = run_main("train", "--task", "tests.tasks:broken_model_task", "--run-steps", "2", "--quiet")
    assert code == 1
    last = err.strip().splitlines()[-1]
    assert last == "tunekit train: error in your code (task 'tests.tasks:broken_model_task'): RuntimeError: boom in forward"
    assert "internal error" not in err and "tests/tasks.py" in err
    frames = [ln for ln in err.splitlines() if ln.strip().startswith('File "')]
    assert frames and "tests/tasks.py" in frames[0]  # tunekit's own frames are left out
    assert not any("/tunekit/" in ln for ln in frames)


@pytest.mark.slow  # a fresh interpreter
def test_import_is_light() -> None:
    code = "import sys, tunekit; print(sorted(m for m in ('matplotlib', 'ray', 'optuna', 'torch') if m in sys.modules))"
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "[]"
    # The first name that needs torch imports it; Ray and matplotlib wait until a search or a plot needs them.
    code = "import sys, tunekit; tunekit.probe; print(sorted(m for m in ('matplotlib', 'ray', 'torch') if m in sys.modules))"
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert r.returncode == 0 and r.stdout.strip() == "['torch']", (r.stdout, r.stderr)


@pytest.mark.parametrize(
    "args, needle",
    [
        (["--set", "width=abc"], "width='abc' is not of type int"),
        (["--set", "dropout=2"], "dropout=2 is out of range"),
        (["--set", "wdth=3"], "has no setting 'wdth'"),
        (["--task", "charlm", "--set", "heads=3"], "dim=64 is not divisible by heads=3"),
        (["--seed", "18446744073709551616"], "must be in [0, 2**62)"),
        (["--out", "/proc/version/x"], "cannot be created"),
    ],
)
def test_bad_task_settings_and_paths_exit_2(args: list[str], needle: str, assert_usage_error) -> None:  # type: ignore[no-untyped-def]
    assert_usage_error(["train", "--run-steps", "1", "--quiet", *args], needle)


@pytest.mark.slow  # a subprocess
def test_spaces_name_shows_the_entries_and_the_file() -> None:
    r = tunekit("spaces", "from_scratch")
    assert r.returncode == 0
    lines = r.stdout.strip().splitlines()
    assert lines[0].startswith("from_scratch: ") and lines[-1].endswith("from_scratch.toml")
    assert any(ln.split()[0] == "lr" and "range test" in ln for ln in lines[1:])
    assert any(ln.split()[0] == "min_lr_ratio" and "fixed at 0.1" in ln for ln in lines[1:])


def test_a_failed_command_leaves_no_empty_output_folder(tmp_path: Path, assert_usage_error) -> None:  # type: ignore[no-untyped-def]
    assert_usage_error(["train", "--task", "nope", "--out", str(tmp_path / "new" / "out")], "unknown task 'nope'")
    assert not (tmp_path / "new").exists()
    (tmp_path / "kept").mkdir()
    assert_usage_error(["train", "--task", "nope", "--out", str(tmp_path / "kept")], "unknown task 'nope'")
    assert (tmp_path / "kept").is_dir()  # a folder that was there stays


# ------------------------------------------------------------------ what a result prints and writes
# The CLI prints a result's summary() and writes its files with its save(); these run no training.

def _lr_result(**fields: Any) -> Any:
    from tunekit.results import LRFindResult

    curve = [2.0, 1.5, 1.0, 3.0]
    base = dict(lrs=[1e-4, 1e-3, 1e-2, 1e-1], losses=curve, smoothed=curve, default_rule="tunekit",
                suggestions={"tunekit": 1e-3, "steepest": None, "valley": 2e-3, "min/10": 1e-3}, suggestion=1e-3,
                confidence=0.8, confident=True, reasons=[], diverged=False, diverged_at_lr=None, seconds=1.5,
                settings={"repeats": 1}, samples=256)
    return LRFindResult(**{**base, **fields})


def test_lr_find_summary_is_the_table_then_the_suggestion_and_its_cost() -> None:
    r = _lr_result()
    assert r.summary().splitlines() == [*r.table().splitlines(), "suggested peak LR: 0.001  [tunekit rule, confidence 0.80]",
                                        "256 samples (4 updates) in 1.5s"]
    refined = _lr_result(suggestion=3e-3, confident=False, reasons=["noisy"], diverged_at_lr=0.1, lr_range=(5e-4, 2e-3),
                         settings={"repeats": 2, "refine_steps": 20, "refine_seeds": 2},
                         refinement={"lrs": [1e-3, 3e-3, 1e-2], "scores": [1.0, 0.9, 1.2], "start": 1e-3, "samples": 1000})
    assert refined.summary().splitlines()[-3:] == [
        "suggested peak LR: 0.003 (range over 2 repeats: 0.0005 .. 0.002)  [best of 3 LRs x 2 short runs of 20 updates, "
        "confidence 0.80]",
        "LOW CONFIDENCE, do not trust this number blindly: noisy",
        "256 samples over 2 runs (4 updates in the first, then 3 LRs x 2 short runs of 20 updates: 1000 samples) in 1.5s, "
        "stopped at lr 0.1 (diverged)"]
    none = _lr_result(suggestion=None, confident=False, reasons=["no descending stretch in the curve"])
    assert none.summary().splitlines()[-2] == "no suggestion: no descending stretch in the curve"


def test_the_table_and_the_summary_say_the_short_runs_alike_and_carried_is_not_best() -> None:
    """A suggestion carried from the short runs' best (0.75x it) is "from" them in the table, the summary and the
    plot, never "best of" beside "0.75x their best"; one short run an LR is a run, not "1 short runs"."""
    stage = {"lrs": [1e-3, 3e-3, 1e-2], "scores": [1.0, 0.9, 1.2], "samples": 900, "bracketed": True, "best_lr": 4e-3}
    carried = _lr_result(suggestion=3e-3, settings={"repeats": 1, "refine_steps": 33, "refine_seeds": 1, "run_steps": 200},
                         refinement={"start": 1e-3, "stages": [stage], "samples": 900, "at_steps": 33, "run_steps": 200,
                                     "carried": "0.75x their best, as calibrated on the benchmarks' corpus"})
    text = carried.summary()
    assert "<- suggested: from 3 LRs x 1 short run of 33 updates around 0.001" in carried.table()
    assert "[from 3 LRs x 1 short run of 33 updates, confidence 0.80]" in text and "0.75x their best" in text
    assert "best of 3" not in text and "1 short runs" not in text and "3 LRs x 1 short run of 33 updates: 900 samples" in text
    legend = [t.get_text() for t in carried.plot().get_legend().get_texts()]
    assert "suggested: 0.003, from 3 LRs x 1 short run of 33 updates" in legend
    best = _lr_result(suggestion=4e-3, settings={"repeats": 1, "refine_steps": 33, "refine_seeds": 2},
                      refinement={"start": 1e-3, "stages": [stage], "samples": 900})
    assert "[best of 3 LRs x 2 short runs of 33 updates, confidence 0.80]" in best.summary()


def test_save_writes_the_json_and_the_plot_and_returns_their_paths(tmp_path: Path) -> None:
    from tunekit.results import LRFindResult

    r = _lr_result()
    paths = r.save(tmp_path)
    assert paths == [tmp_path / "lr_find.json", tmp_path / "lr_find.png"]
    assert LRFindResult.from_json(paths[0]).suggestion == r.suggestion
    assert paths[1].read_bytes()[:4] == b"\x89PNG"
    assert r.save(tmp_path, "again") == [tmp_path / "again.json", tmp_path / "again.png"] and r.exit_code == 0


def _search_result() -> Any:
    from tunekit.results import SearchResult

    trial = {"number": 0, "state": "COMPLETE", "value": 0.5, "params": {"lr": 0.01}, "config": {"lr": 0.01},
             "samples": 100, "updates": 10, "micro_batch": 8, "accumulation_steps": 1, "curve": [[50, 0.7], [100, 0.5]]}
    return SearchResult(study_name="s", storage="sqlite:///s.db", space="sp", direction="minimize", best_value=0.5,
                        best_params={"lr": 0.01}, best_config={"lr": 0.01}, trials=[trial], seed_params={},
                        distributions={}, seconds=2.0, param_importances={})


def test_search_summary_says_where_and_how_to_rerun_and_save_adds_the_csv(tmp_path: Path) -> None:
    r = _search_result()
    assert r.summary("runs").splitlines()[-2:] == [
        "search took 2.0s; wrote runs/search.json, trials.csv, search.png; study 's' in sqlite:///s.db",
        "re-run the best trial exactly: tunekit train --config runs/search.json"]
    assert r.save(tmp_path) == [tmp_path / "search.json", tmp_path / "trials.csv", tmp_path / "search.png"]
    assert all(p.stat().st_size > 0 for p in tmp_path.iterdir())
    memory = dataclasses.replace(r, storage="in-memory")  # a notebook's search without out
    assert "study 's' held in memory (nothing to resume)" in memory.summary()


def test_save_makes_the_folder_and_refuses_a_file_in_one_line(tmp_path: Path) -> None:
    """result.save("newdir") makes the folder (nested too), for every result type; a file in its place is refused."""
    from tunekit.errors import UsageError
    from tunekit.results import TrainResult

    for r in (_lr_result(), _search_result(), TrainResult(config={"lr": 0.1}, task="t", device="cpu")):
        out = tmp_path / type(r).__name__ / "new" / "dir"
        paths = r.save(out)
        assert out.is_dir() and all(p.parent == out and p.stat().st_size > 0 for p in paths)
        assert r.to_json(tmp_path / "also_new" / type(r).__name__ / "r.json")  # a file's folder is made too
    (tmp_path / "a_file").write_text("x")
    with pytest.raises(UsageError, match=r"^cannot save into '.*a_file': it is a file, not a folder") as exc:
        _lr_result().save(tmp_path / "a_file")
    assert "\n" not in str(exc.value)


def test_probe_summary_and_train_comparison(monkeypatch: pytest.MonkeyPatch) -> None:
    from tunekit.results import ProbeResult, TrainResult

    monkeypatch.setattr(ProbeResult, "table", lambda self: "TABLE")
    probe = ProbeResult.__new__(ProbeResult)  # summary() reads table() and the costs
    probe.seconds, probe.samples, probe.updates, probe.accumulation_steps = 3.25, 2412, 15, 1
    probe.run_steps, probe.run_batch, probe.throughput, probe.cost_plan, probe.cost_notes = None, None, [], "", []
    assert probe.summary() == "TABLE\nthe probe took 3.2 s and 2,412 samples (15 updates)"
    # With the planned run known and the steps timed, its cost beside the probe's: 300 updates of 32 at 800/s
    # (12 s); and the cost it planned, said before its steps, first.
    probe.run_steps, probe.run_batch, probe.throughput = 300, 32, [{"batch": 32, "samples_per_s": 800.0}]
    probe.cost_plan = "at most 9,000 samples"
    assert probe.summary() == ("TABLE\ncost planned: at most 9,000 samples\nthe probe took 3.2 s and 2,412 samples "
                               "(15 updates): 0.25x the samples and 0.27x the seconds of the planned run (300 updates at "
                               "batch 32): 9,600 samples, ~12 s at the speed measured")
    run = TrainResult(config={}, task="t", losses=[1.0] * 10)
    assert run.compared_with({"number": 3, "value": 1.0}) == "trial 3 of the search: loss 1.0; this run: 1.0 (the same)"
    assert run.compared_with({"number": 3, "value": 2.0}).endswith("(NOT the same)")


def test_a_command_that_writes_says_where(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from tunekit.cli import main

    assert main(["train", "--run-steps", "2", "--quiet", "--out", str(tmp_path)]) == 0
    assert capsys.readouterr().out.splitlines()[-1] == f"wrote {tmp_path / 'train.json'} and {tmp_path / 'train.png'}"
    assert (tmp_path / "train.json").is_file() and (tmp_path / "train.png").is_file()


def test_assert_usage_error_fails_on_a_write_a_second_line_or_another_status(assert_usage_error, tmp_path: Path,  # type: ignore[no-untyped-def]
                                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """The fixture the usage-error tests lean on can fail: a refusal that leaves a file, says two lines,
    or exits 1 is caught."""
    import sys as _sys

    import tunekit.cli as cli
    from tunekit.errors import UsageError

    def writes(args: Any) -> int:
        (tmp_path / "left.txt").write_text("x")
        raise UsageError("refused after a write")

    def two_lines(args: Any) -> int:
        print("a warning first", file=_sys.stderr)
        raise UsageError("refused")

    def fails(args: Any) -> int:
        raise RuntimeError("a bug")

    for func, why in ((writes, "wrote"), (two_lines, "a warning first"), (fails, "1")):
        monkeypatch.setattr(cli, "cmd_tasks", func)
        with pytest.raises(AssertionError, match=why):
            assert_usage_error(["tasks"], "refused")
        (tmp_path / "left.txt").unlink(missing_ok=True)


def test_a_search_whose_every_trial_fails_prints_its_table_then_one_line_and_exits_1(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from tunekit.cli import main

    from .tasks import FAILING, write_space

    space = write_space(tmp_path, FAILING.replace("[13, 16]", "[13]"))
    code = main(["search", "--task", "tests.tasks:picky_regression_task", "--space", str(space), "--trials", "2",
                 "--max-steps", "20", "--device", "cpu", "--out", str(tmp_path / "o"), "--quiet"])
    out, err = capsys.readouterr()  # (20 updates: a budget under that is warned, a second line)
    assert code == 1 and "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    assert err.startswith("tunekit search: error: all 2 trials of this search failed, the first (trial 0) with "
                          "RuntimeError: hidden=13 is unlucky")
    assert "hidden=13 is unlucky" in out and (tmp_path / "o" / "search.json").is_file()  # the table, the report


def test_ctrl_c_during_the_probes_says_what_was_kept(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """Stopped before its probes saved anything, a search keeps no folder and does not promise a --resume."""
    from tunekit.cli import main

    def interrupted(*args: Any, **kwargs: Any) -> Any:
        raise KeyboardInterrupt

    monkeypatch.setattr("tunekit.hpsearch.run.run_probes", interrupted)
    out = tmp_path / "s_early"
    code = main(["search", "--task", "tests.tasks:regression_task", "--trials", "2", "--max-steps", "10",
                 "--device", "cpu", "--out", str(out), "--quiet"])
    err = capsys.readouterr().err
    assert code == 130 and not out.exists()
    assert err.strip() == ("tunekit search: interrupted: it was stopped before its probes finished, and kept nothing: "
                           "run the same command again")
    out.mkdir()
    (out / "lr_find.json").write_text("{}")  # a range test that finished before the interrupt
    assert main(["search", "--task", "tests.tasks:regression_task", "--trials", "2", "--max-steps", "10",
                 "--device", "cpu", "--out", str(out), "--quiet"]) == 130
    assert f"the probes' results are in {out}; go on with the same command and --resume" in capsys.readouterr().err


def test_a_budget_too_small_is_one_warning_line_in_the_search_flags_and_points_at_the_callers_line(
        tmp_path: Path, run_main) -> None:  # type: ignore[no-untyped-def]
    """tunekit's own warnings on the CLI: one line in the command's flags (an option object's field as its flag),
    not Python's `file:line: BudgetWarning` with keywords; from Python the warning points at the caller's line."""
    code, out, err = run_main("search", "--task", "tests.tasks:regression_task", "--budget", "1samples", "--trials",
                              "1", "--device", "cpu", "--quiet", "--out", str(tmp_path / "o"))
    assert code == 0, err
    said = [line for line in err.splitlines() if "budget" in line]
    assert len(said) == 1 and said[0].startswith("tunekit search: warning: --budget 1samples is 1 sample a trial"), err
    assert said[0].endswith("pass --budget 1600samples or --lr-find lr_find.json (a larger budget, or a saved range "
                            "test)") and "BudgetWarning" not in err and "ProbeSettings" not in err
    from tunekit import Local, search
    from tunekit.hpsearch.budget import BudgetWarning
    from tests.tasks import regression_task

    with pytest.warns(BudgetWarning) as caught:
        search(regression_task(), "from_scratch", trials=1, budget="1samples", backend=Local(device="cpu"),
               progress=False)
    assert [w.filename for w in caught if w.category is BudgetWarning] == [__file__]
