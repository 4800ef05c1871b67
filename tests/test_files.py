"""The files tunekit writes get the mode an ordinary write would (0666 less the umask): a team can
read a shared output folder, and a private umask keeps them private."""

from __future__ import annotations

import contextlib
import os
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

import tunekit
from tunekit import Local
from tunekit.cli import main

from .tasks import SMALL, regression_task, write_space

UMASKS = [(0o022, 0o644), (0o077, 0o600)]


@contextlib.contextmanager
def umask(mask: int) -> Iterator[None]:
    old = os.umask(mask)
    try:
        yield
    finally:
        os.umask(old)


def modes(folder: Path) -> dict[str, int]:
    return {p.name: stat.S_IMODE(p.stat().st_mode) for p in folder.iterdir() if p.is_file()}


@pytest.mark.parametrize("mask, mode", UMASKS, ids=["umask 022", "umask 077"])
def test_lr_find_writes_its_files_with_the_umasks_mode(mask: int, mode: int, tmp_path: Path,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    with umask(mask):
        assert main(["lr-find", "--sweep-steps", "10", "--no-refine", "--device", "cpu", "--out", str(tmp_path / "o"),
                     "--quiet"]) == 0
    assert modes(tmp_path / "o") == {"lr_find.json": mode, "lr_find.png": mode}


@pytest.mark.slow  # two small searches
@pytest.mark.parametrize("mask, mode", UMASKS, ids=["umask 022", "umask 077"])
def test_search_writes_its_files_with_the_umasks_mode(mask: int, mode: int, tmp_path: Path) -> None:
    space = write_space(tmp_path, SMALL)
    with umask(mask):
        tunekit.search(regression_task(), str(space), trials=2, out=tmp_path / "o", backend=Local(device="cpu"),
                       budget="10updates")
    written = modes(tmp_path / "o")
    assert {"search.json", "search.png", "trials.csv"} <= set(written)
    assert written == dict.fromkeys(written, mode)  # study.db too


def test_the_umask_is_read_without_being_changed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Setting it to read it would leave a file that another thread creates meanwhile without one."""
    from tunekit.files import write_file

    if not Path("/proc/self/status").is_file():
        pytest.skip("the umask is read from /proc (Linux)")
    calls: list[int] = []
    with umask(0o027):
        monkeypatch.setattr(os, "umask", calls.append)
        write_file(tmp_path / "f.txt", "x")
        monkeypatch.undo()
    assert calls == [] and stat.S_IMODE((tmp_path / "f.txt").stat().st_mode) == 0o640
