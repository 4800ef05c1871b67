"""The README's quoted outputs are what the code prints today.

A README block of output follows the command that prints it, named in backquotes just before the
block: "... (`tunekit doctor --task tests/tasks.py:softmax_task --lr 3e-3`):". Each such command runs
here as quoted (in a folder of its own where ``tests/`` is this checkout's), and the quoted lines must
be among its output lines, in order and consecutive ("..." stands for lines left out). The text must
match exactly; each number within 2% (the figures are seeded, so this leaves room only for another
torch's or CPU's rounding), except a duration (a number followed by "s": wall-clock time, never the
same twice).
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
REL_TOL = 0.02
# A number as the CLI prints one: 0.003, 1.37, 113x's 113, 5.89 (GiB), 3e-3; a sign is text.
NUMBER = re.compile(r"\d+(?:\.\d+)?(?:e[-+]?\d+)?")
DURATION = re.compile(r"\d+(?:\.\d+)?s\b")
COMMAND_BEFORE = re.compile(r"\(`(tunekit [^`]+)`\):\s*$")


def quoted_examples(text: str) -> list[tuple[str, list[str]]]:
    """(the command, the output lines the README quotes for it), for every output block of the README."""
    lines = text.splitlines()
    out: list[tuple[str, list[str]]] = []
    i = 0
    while i < len(lines):
        before = next((line for line in reversed(lines[:i]) if line.strip()), "")
        said = COMMAND_BEFORE.search(before)
        if lines[i].strip() == "```" and said:
            end = lines.index("```", i + 1)
            out.append((said.group(1), lines[i + 1:end]))
            i = end
        i += 1
    return out


def _same_line(quoted: str, printed: str) -> bool:
    """The same text, durations aside, with each number within REL_TOL (or one unit of its last printed digit)."""
    mask = lambda s: NUMBER.sub("#", DURATION.sub("#s", s))  # noqa: E731
    if mask(quoted) != mask(printed):
        return False
    for q, p in zip(NUMBER.findall(DURATION.sub("#s", quoted)), NUMBER.findall(DURATION.sub("#s", printed))):
        digit = 10.0 ** -len(q.split(".")[1]) if "." in q and "e" not in q else 0.0
        if abs(float(q) - float(p)) > max(REL_TOL * abs(float(p)), digit):
            return False
    return True


def _missing(quoted: list[str], printed: list[str]) -> list[str]:
    """The quoted lines not printed where the quote puts them: in order, each right after the one above
    it unless a "..." line between them stands for lines left out."""
    missing, at, skip = [], 0, True
    for line in quoted:
        if line.strip() == "...":
            skip = True
            continue
        stop = len(printed) if skip else min(at + 1, len(printed))
        found = next((j for j in range(at, stop) if _same_line(line, printed[j])), None)
        if found is None:
            missing.append(line)
        else:
            at, skip = found + 1, False
    return missing


def test_the_readme_quotes_output_only_after_its_command() -> None:
    """Every README block of output is found (the doctor's at least), so none goes unchecked."""
    examples = quoted_examples(README.read_text())
    assert [cmd for cmd, _ in examples] == ["tunekit doctor --task tests/tasks.py:softmax_task --lr 3e-3"]
    fences = [line for line in README.read_text().splitlines() if line.startswith("```")]
    plain = fences[0::2].count("```")  # the blocks' opening fences that name no language
    assert plain == len(examples)  # every such block is output


def test_the_line_comparison_takes_rounding_but_not_other_figures() -> None:
    ok = "[WARN] recipe        lr 0.003 is 59x below the test's suggestion 0.176  -> try --lr 0.18"
    assert _same_line(ok, ok.replace("0.176", "0.177")) and _same_line("done in 0.4s", "done in 25.2s")
    assert not _same_line(ok, ok.replace("0.176", "0.339")) and not _same_line(ok, ok.replace("59x", "113x"))
    assert not _same_line(ok, ok.replace("recipe", "loss"))
    assert _missing(["a 1", "...", "c 3"], ["a 1", "b 2", "c 3"]) == [] == _missing(["b 2", "c 3"], ["a 1", "b 2", "c 3"])
    assert _missing(["a 1", "c 3"], ["a 1", "b 2", "c 3"]) == ["c 3"]  # a line left out needs its "..."
    assert _missing(["c 3", "...", "a 1"], ["a 1", "b 2", "c 3"]) == ["a 1"]  # out of order


EXAMPLES = quoted_examples(README.read_text())


# The doctor's checks in this process: about a second, as tests/test_doctor.py's run of the same task.
@pytest.mark.parametrize("command, quoted", EXAMPLES, ids=[command for command, _ in EXAMPLES])
def test_a_quoted_example_prints_what_the_readme_says(command: str, quoted: list[str], tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    from tunekit.cli import main

    (tmp_path / "tests").symlink_to(ROOT / "tests")  # the command's paths, as from the repository's root
    monkeypatch.chdir(tmp_path)  # and its files (tunekit_runs/) written here
    main(shlex.split(command)[1:])
    printed = capsys.readouterr().out.splitlines()
    missing = _missing(quoted, printed)
    assert not missing, "README quotes lines that `{}` no longer prints:\n{}\n-- it prints:\n{}".format(
        command, "\n".join(missing), "\n".join(printed))
