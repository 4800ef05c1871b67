"""Property tests of the parsers of what a user writes: a space file (tunekit/inputs/space.py), a task
spec (tunekit/integrations/task_spec.py) and the CLI's --set and --config (tunekit/cli_commands.py). Any input
gives a result or ONE short UsageError line, never another exception (tests/test_settings_properties.py
does the same for the search's settings objects)."""

from __future__ import annotations

import json
import math
import sys
import tempfile
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from tunekit.errors import UsageError

# A message is one line, and short: it names the bad value (cut where it is long) and the fix. The
# longest honest ones list the known keys or the forms a spec takes, and echo the path they were given.
MAX_MESSAGE = 400


def one_line_or_made(make: Any, echoed: str = "") -> Any:
    """``make()``, or None where it raised one short UsageError line (``echoed``: a path the message may repeat)."""
    try:
        return make()
    except UsageError as exc:
        said = str(exc)
        assert said and "\n" not in said and "\r" not in said, repr(said)
        assert len(said) <= MAX_MESSAGE + len(echoed), (len(said), said[:300])
        return None


@pytest.fixture(scope="module")
def scratch():  # type: ignore[no-untyped-def]
    """A folder for the files the properties write (module-scoped: hypothesis runs many examples a test)."""
    with tempfile.TemporaryDirectory(prefix="tunekit-props-") as d:
        yield Path(d)


# Example counts sized for make test-fast (seconds each); runs with 2x these and three other seeds found nothing more.
HEALTH = dict(deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])

# ------------------------------------------------------------------ space files

# Values a TOML table may hold, TOML's own kinds: numbers of every size (beyond a float and beyond 64 bits),
# nan and inf, text, booleans, lists, nested tables.
SCALARS = st.one_of(st.booleans(), st.integers(), st.integers(-10**400, 10**400), st.floats(allow_nan=True),
                    st.text(max_size=10), st.sampled_from(["float", "int", "categorical", "fixed", "lr_find", "probe",
                                                            "auto", "linear", "sqrt"]))
TOML_VALUES = st.recursive(SCALARS, lambda inner: st.lists(inner, max_size=4) | st.dictionaries(
    st.sampled_from(["low", "high", "type", "value", "x"]), inner, max_size=3), max_leaves=8)
KEYS = ["type", "low", "high", "log", "step", "choices", "value", "seeded", "margin", "scale_with_batch",
        "around_critical", "adaptive_l2", "other"]
NAMES = st.sampled_from(["lr", "warmup", "weight_decay", "batch", "batch_size", "accumulation_steps", "max_steps",
                         "task.width", "task.hidden", "bogus", "description"])


def toml_value(v: Any) -> str:
    """``v`` written as TOML (a tiny writer: tomllib reads, it does not write)."""
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):  # past 4,300 digits too (Python's own limit, lifted for writing them only)
        limit = sys.get_int_max_str_digits()
        sys.set_int_max_str_digits(0)
        try:
            return str(v)
        finally:
            sys.set_int_max_str_digits(limit)
    if isinstance(v, float):
        return "nan" if math.isnan(v) else ("inf" if v > 0 else "-inf") if math.isinf(v) else repr(v)
    if isinstance(v, str):
        return json.dumps(v)  # a JSON string is a TOML basic string
    if isinstance(v, list):
        return "[" + ", ".join(toml_value(x) for x in v) + "]"
    return "{" + ", ".join(f"{k} = {toml_value(x)}" for k, x in v.items()) + "}"


def toml_space(entries: dict[str, dict[str, Any]]) -> str:
    lines = []
    for name, table in entries.items():
        if name == "description":
            lines.append(f"description = {toml_value(table.get('value', ''))}")
            continue
        head = f"[task.{name[5:]}]" if name.startswith("task.") else f"[{name}]"
        lines += [head, *(f"{k} = {toml_value(v)}" for k, v in table.items()), ""]
    return "\n".join(lines)


def _check_space(path: Path) -> None:
    from tunekit.hpsearch.seeded_space import distributions
    from tunekit.inputs.space import load_space

    space = one_line_or_made(lambda: load_space(path), echoed=str(path))
    if space is not None:  # what is accepted is usable: Optuna takes its distributions, the table prints
        distributions(space)
        assert space.table()


@settings(max_examples=150, **HEALTH)
@given(entries=st.dictionaries(NAMES, st.dictionaries(st.sampled_from(KEYS), TOML_VALUES, max_size=5), max_size=3))
@example(entries={"lr": {"type": "float", "low": 10**400, "high": 10**401}})  # beyond a float
@example(entries={"lr": {"type": "float", "low": 1e-3, "high": float("inf")}})
@example(entries={"task.width": {"type": "int", "low": 1, "high": 2**70}})  # beyond int64
@example(entries={"task.width": {"type": "int", "low": 1, "high": 8, "step": 10**5000}})
@example(entries={"lr": {"type": "fixed", "value": "x" * 5000}, "bogus": {"type": "x" * 5000}})
@example(entries={"lr": {"type": "categorical", "choices": "y" * 5000}})
def test_any_space_file_gives_a_space_or_one_line(entries: dict[str, dict[str, Any]], scratch: Path) -> None:
    path = scratch / "space.toml"
    path.write_text(toml_space(entries))
    _check_space(path)


@settings(max_examples=100, **HEALTH)
@given(text=st.text(max_size=200) | st.binary(max_size=200))
@example(text="[lr]\ntype = " + "[" * 5000 + "]" * 5000)  # nested past Python's recursion limit
@example(text="x = " + "{a = " * 3000 + "1" + "}" * 3000)
@example(text=b"\xff\xfe[lr]\n")  # not UTF-8
@example(text="[lr]\ntype = \"float\"\nlow = 1" + "0" * 5000 + "\nhigh = 2\n")
def test_any_text_as_a_space_file_gives_a_space_or_one_line(text: str | bytes, scratch: Path) -> None:
    path = scratch / "text.toml"
    path.write_bytes(text if isinstance(text, bytes) else text.encode("utf-8", "surrogatepass"))
    _check_space(path)


@settings(max_examples=100, **HEALTH)
@given(spec=st.text(max_size=30) | st.text(alphabet="ab./:\\", max_size=300))
@example(spec="a" * 5000)  # past the longest name a file system takes
@example(spec="dir/" + "a" * 5000 + ".toml")
@example(spec="a\x00b.toml")
def test_any_space_spec_gives_a_space_or_one_line(spec: str, scratch: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from tunekit.inputs.space import load_space

    monkeypatch.chdir(scratch)  # a relative spec looks here, where nothing but these tests' files is
    one_line_or_made(lambda: load_space(spec), echoed=spec)


# ------------------------------------------------------------------ task specs

# Specs of every form, from names that exist (this suite's tasks, the built-ins, modules with and
# without the function) to nonsense; a spec is only resolved (imported), never called here.
MODULES = st.sampled_from(["tests.tasks", "tunekit.builtin", "json", "no_such_module_xyz", "tests.no_such", "",
                           "tests..tasks", ".tasks", "tests/tasks.py", "missing/file.py", "tests/__init__.py"])
FUNCS = st.sampled_from(["regression_task", "not_a_task", "ROOT", "SMALL", "nope", "", "1x", "a b", "load"])
SPECS = st.one_of(st.text(max_size=40), st.builds(lambda m, f: f"{m}:{f}", MODULES, FUNCS),
                  st.builds(lambda m, f: f"{m}:{f}", st.text(max_size=20), st.text(max_size=12)),
                  st.sampled_from(["shapes", "charlm", " shapes ", "shapes.py"]), st.none(), st.integers())


@settings(max_examples=150, **HEALTH)
@given(spec=SPECS)
@example(spec="a" * 5000 + ".py:f")  # a path longer than the file system takes
@example(spec="x" * 5000)
@example(spec="a\x00.py:f")
@example(spec="tests/" + "a" * 300 + ".py:f")
def test_any_task_spec_resolves_or_gives_one_line(spec: Any) -> None:
    from tunekit.integrations.task_spec import resolve_task_function

    fn = one_line_or_made(lambda: resolve_task_function(spec), echoed=2 * str(spec))
    if fn is not None:
        assert callable(fn)


@settings(max_examples=60, **HEALTH)
@given(spec=st.text(max_size=20) | st.integers() | st.none(), config=st.dictionaries(st.text(max_size=5), st.integers())
       | st.integers() | st.text(max_size=5) | st.none())
def test_any_task_spec_object_is_made_or_one_line(spec: Any, config: Any) -> None:
    from tunekit.integrations.task_spec import TaskSpec

    made = one_line_or_made(lambda: TaskSpec(spec, config) if config is not None else TaskSpec(spec))
    if made is not None:
        assert isinstance(made.spec, str) and made.spec


@pytest.mark.parametrize("body, needle", [
    ("import sys\nsys.exit(3)\n", "SystemExit"),
    ("raise KeyboardInterrupt\n", None),  # the user's Ctrl-C goes through, as it should
    ("def f(:\n", "SyntaxError"),
    ("x = " + "(" * 5000 + ")" * 5000 + "\n", "failed to import"),
])
def test_a_task_file_that_fails_at_import_is_one_line(body: str, needle: str | None, tmp_path: Path) -> None:
    from tunekit.integrations.task_spec import resolve_task_function

    path = tmp_path / "task_file.py"
    path.write_text(body)
    if needle is None:
        with pytest.raises(KeyboardInterrupt):
            resolve_task_function(f"{path}:f")
        return
    with pytest.raises(UsageError) as info:
        resolve_task_function(f"{path}:f")
    assert needle in str(info.value) and "\n" not in str(info.value)


# ------------------------------------------------------------------ the CLI's --set and --config

PAIRS = st.lists(st.one_of(st.text(max_size=30), st.builds(lambda k, v: f"{k}={v}", st.text(max_size=8), st.one_of(
    st.text(max_size=30), st.integers().map(str), st.floats().map(repr), st.text(alphabet="[]{}\",:0123456789tfnul ",
                                                                                   max_size=60)))), max_size=4)


@settings(max_examples=150, **HEALTH)
@given(pairs=PAIRS)
@example(pairs=["width=" + "[" * 100_000])  # JSON nested past Python's recursion limit
@example(pairs=["width=" + "[" * 5000 + "]" * 5000])
@example(pairs=["width=" + '{"a":' * 5000 + "1" + "}" * 5000])
@example(pairs=["width=" + "9" * 5000])  # past int()'s digit limit
@example(pairs=["width=" + "9" * 5000 + ".5"])
@example(pairs=["=3", " =3", "a"])
def test_any_set_pairs_give_a_config_or_one_line(pairs: list[str]) -> None:
    from tunekit.builtin._common import check_config
    from tunekit.cli_commands import task_config

    config = one_line_or_made(lambda: task_config(pairs), echoed="".join(pairs)[:200])
    if config is None:
        return
    assert set(config) == {p.partition("=")[0].strip() for p in pairs}
    # The built-in tasks check what they are given: a config they can build from, or one line.
    known = {"width": int, "dropout": float, "n_train": int, "optimizer": str}
    checked = one_line_or_made(lambda: check_config("shapes", config, known))
    if checked is not None:
        assert set(checked) <= set(known) and all(isinstance(v, known[k]) for k, v in checked.items())


JSON_VALUES = st.recursive(st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
                           lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.sampled_from(
                               ["trials", "task", "best_value", "direction", "config", "number", "x"]), inner, max_size=4),
                           max_leaves=12)


@settings(max_examples=75, **HEALTH)
@given(content=JSON_VALUES.map(json.dumps) | st.text(max_size=100), trial=st.none() | st.integers(-3, 3))
@example(content="[" * 100_000 + "]" * 100_000, trial=None)  # nested past Python's recursion limit
@example(content='{"trials": [{"number": 0}], "best_params": 1}', trial=None)
@example(content="{}", trial=0)
@example(content="1" * 5000, trial=None)
def test_any_config_file_gives_a_run_or_one_line(content: str, trial: int | None, scratch: Path, run_main) -> None:  # type: ignore[no-untyped-def]
    path = scratch / "search.json"
    path.write_text(content, encoding="utf-8", errors="surrogatepass")
    args = ["train", "--config", str(path), "--quiet", "--out", str(scratch / "o"), *(["--trial", str(trial)] if trial is not None else [])]
    code, out, err = run_main(*args, cwd=scratch)
    assert code == 2, (code, err[-2000:])  # nothing drawn here is a search.json a trial can re-run from
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in err and len(lines[0]) <= MAX_MESSAGE + len(str(path)), err[-2000:]
