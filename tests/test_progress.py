"""When a bar shows: where a person is watching (a notebook, a terminal), not in scripts or CI,
not inside another tunekit bar; ``progress=True``/``False`` decide it outright."""

from __future__ import annotations

import argparse
import inspect
import io
import sys
import types

import pytest

from tunekit import progress
from tunekit.progress import bar, show_progress


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def _watched(monkeypatch: pytest.MonkeyPatch) -> io.StringIO:
    """stderr a terminal, no CI: what a person running tunekit in a shell has (set in the test itself:
    pytest's capture puts its own stderr back between a fixture and the test)."""
    monkeypatch.delenv("CI", raising=False)
    term = _Terminal()
    monkeypatch.setattr(sys, "stderr", term)
    return term


def test_auto_shows_a_bar_on_a_terminal_only(monkeypatch: pytest.MonkeyPatch) -> None:
    watched = _watched(monkeypatch)
    assert show_progress(None) is True
    with bar(3, "steps", "step") as b:
        b.update(1)
    assert "steps:" in watched.getvalue()
    monkeypatch.setattr(sys, "stderr", io.StringIO())  # a pipe, a log file
    assert show_progress(None) is False


@pytest.mark.parametrize("ci, quiet", [("true", True), ("1", True), ("false", False), ("", False)])
def test_auto_is_quiet_in_ci(monkeypatch: pytest.MonkeyPatch, ci: str, quiet: bool) -> None:
    _watched(monkeypatch)
    monkeypatch.setenv("CI", ci)
    assert show_progress(None) is not quiet


def test_auto_shows_a_bar_in_a_jupyter_kernel(monkeypatch: pytest.MonkeyPatch) -> None:
    """A kernel's stderr is no terminal; tqdm.auto's test (IPKernelApp in the shell's config) finds it."""
    monkeypatch.delenv("CI", raising=False)
    monkeypatch.setattr(sys, "stderr", io.StringIO())
    shell = types.SimpleNamespace(config={"IPKernelApp": {}})
    monkeypatch.setitem(sys.modules, "IPython", types.SimpleNamespace(get_ipython=lambda: shell))
    assert show_progress(None) is True
    shell.config = {}  # IPython in a terminal: its stderr decides
    assert show_progress(None) is False


def test_explicit_progress_wins(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CI", "true")
    assert show_progress(True) is True and show_progress(False) is False


def test_work_inside_a_bar_is_quiet_unless_asked(monkeypatch: pytest.MonkeyPatch) -> None:
    """A search's trials (train) and the doctor's range test run inside a bar: auto is off there,
    also when that bar is not shown."""
    _watched(monkeypatch)
    for outer in (None, False):
        with bar(2, "outer", "trial", outer):
            assert show_progress(None) is False and show_progress(True) is True
    assert show_progress(None) is True and progress._open_bars == 0


def test_every_entry_point_defaults_to_auto() -> None:
    """``progress=None`` everywhere a person calls tunekit; the CLI's --quiet is False."""
    import tunekit
    from tunekit.cli_common import progress_of as _progress
    from tunekit.hpsearch.settings import SearchSettings

    for fn in (tunekit.lr_find, tunekit.probe, tunekit.doctor, tunekit.train, tunekit.search):
        assert inspect.signature(fn).parameters["progress"].default is None, fn.__name__
    assert SearchSettings().progress is None
    assert _progress(argparse.Namespace(quiet=True)) is False
