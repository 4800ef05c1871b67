"""How a ``tunekit`` command runs and fails, and the library's words said as the command's flags.

:func:`run` says a command's errors the CLI's way: a usage error is one line in the command's own flags
(exit 2), an error in the user's code shows their frames only (exit 1), tunekit's own its whole traceback
(exit 1), an interrupt what was kept (exit 130); a command that fails leaves no empty --out folder behind.
"""

from __future__ import annotations

# Imported where used, not at the top: what only a failing command needs (integrations.adapted, builtin, hpsearch.run).
import argparse
import contextlib
import os
import re
import sys
import sysconfig
import traceback
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from tunekit.cli_common import CREATED, LOADED
from tunekit.errors import HintedWarning, NoTrialSucceeded, UsageError

__all__ = ["run", "in_cli_terms", "cli_flag", "cli_hint"]


def run(args: argparse.Namespace) -> int:
    """Run the parsed command; its exit status. A command that does not succeed leaves no empty --out folder."""
    code = 1
    try:
        code = _said(args)
    finally:  # also when an exception goes through (code stays 1)
        if code != 0:
            for out in reversed(CREATED):
                try:
                    out.rmdir()  # only an empty folder: anything written there stays
                except OSError:
                    pass
        CREATED.clear()
    return code


@contextlib.contextmanager
def _warnings_in_cli_terms(args: argparse.Namespace) -> Iterator[None]:
    """While the command runs, tunekit's own warnings (the probe's cost ahead, a budget too small, a setting
    a Trainer does not apply) are said when they happen as one line in the command's flags, a
    :class:`~tunekit.errors.HintedWarning` with only the hints it has a flag for; other libraries'
    warnings as Python shows them."""
    with warnings.catch_warnings():
        python_shows = warnings.showwarning

        def show(message: Any, category: Any, filename: str, lineno: int, file: Any = None, line: Any = None) -> None:
            if not (isinstance(message, UserWarning) and type(message).__module__.startswith("tunekit.")):
                python_shows(message, category, filename, lineno, file, line)
                return
            usage = args.usage()
            text = str(message)
            if isinstance(message, HintedWarning):
                text = message.text(tuple(h for h in (cli_hint(h, usage) for h in message.hints) if h))
            print(f"tunekit {args.command}: warning: {in_cli_terms(' '.join(text.split()), usage)}", file=sys.stderr)

        warnings.showwarning = show
        yield


def _said(args: argparse.Namespace) -> int:
    """The command, with its errors (and its warnings with a fix) said the way the CLI says them."""
    LOADED.clear()  # this command's task, not an earlier one's in the same process
    try:
        with _warnings_in_cli_terms(args):
            return int(args.func(args))
    except UsageError as exc:
        said = str(exc)
        if LOADED.get("origin"):
            from tunekit.integrations.adapted import in_their_terms

            said = in_their_terms(said, LOADED["origin"])
        print(f"tunekit {args.command}: error: {in_cli_terms(said, args.usage())}", file=sys.stderr)
        return 2
    except NoTrialSucceeded as exc:  # nothing worked: the first failure's cause, in one line
        print(f"tunekit {args.command}: error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        hint = _resume_hint(Path(args.out)) if args.command == "search" and args.out else ""
        print(f"tunekit {args.command}: interrupted{hint}", file=sys.stderr)
        return 130
    except Exception as exc:  # a bug, in tunekit or in the user's code: show where
        theirs = _user_frames(exc)
        if theirs:  # raised in the user's task, model or loss: their frames, and theirs to fix
            print("Traceback (most recent call last):\n" + "".join(traceback.format_list(theirs)).rstrip(), file=sys.stderr)
            from tunekit.builtin import DEFAULT_TASK

            spec = getattr(args, "task", None) or DEFAULT_TASK
            print(f"tunekit {args.command}: error in your code (task '{spec}'): {type(exc).__name__}: {exc}", file=sys.stderr)
            return 1
        if os.environ.get("TUNEKIT_DEBUG") != "0":
            traceback.print_exc()
        print(f"tunekit {args.command}: internal error: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1


def _resume_hint(out: Path) -> str:
    """What an interrupted search kept in ``out``, and how to go on: --resume where it kept something."""
    from tunekit.hpsearch.run import probed

    if (out / "search.json").is_file():
        return f": what finished is in {out / 'search.json'}; go on with the same command and --resume"
    if probed(out):
        return f": the probes' results are in {out}; go on with the same command and --resume"
    return ": it was stopped before its probes finished, and kept nothing: run the same command again"


# API parameters whose flag is not their name with dashes.
_FLAG_OF = {"max_steps": "--run-steps", "clip_grad_norm": "--clip", "lr_find_result": "--lr-find",
            "probe_result": "--probe", "config": "--set", "task_config": "--set", "overfit_floor": "--loss-floor",
            "prune": "--no-prune", "join_timeout": "--timeout", "grace_period": "--heartbeat-grace",
            "top": "--confirm-top", "seeds": "--confirm-seeds"}
_SUBJECT = re.compile(r"^([a-z][a-z0-9_]*)(?=[ :])")
# (A value that is a call, objective=Objective('f1', ...), is Python's alone: left as it is.)
_ASSIGNMENT = re.compile(r"(?<![\w./-])([a-z][a-z0-9_]*)=([^\s,;()]+)(?![\w(])")
# A parameter named bare in a sentence ("raise memory_budget"): only names with an underscore, which
# no English word has, and none that is a file's name, a call, a quoted value or a space's [entry].
_BARE = re.compile(r"(?<![\w./\[\"'`-])([a-z][a-z0-9]*(?:_[a-z0-9]+)+)(?![\w./(\[\]=\"'`-])")


def cli_hint(hint: str, usage: str) -> str | None:
    """A warning's hint ``name=value`` as the command's flag and value (``--batch-limit 128``); one that sets
    an option object's field, ``probes=ProbeSettings(lr_find='f.json')``, as that field's flag; None where the
    command has no flag for it."""
    name, _, value = hint.partition("=")
    inner = re.fullmatch(r"[A-Z]\w*\((\w+)=(.*)\)", value)
    if inner:
        name, value = inner.groups()
    flag = cli_flag(name, usage)
    return None if flag is None else f"{flag} {value.strip(chr(39) + chr(34))}"


def cli_flag(name: str, usage: str) -> str | None:
    """The command's flag for the API parameter ``name`` (``--batch-limit``), or None where it has none."""
    options = ["--" + name.replace("_", "-"), _FLAG_OF.get(name, "")]
    return next((o for o in options if o and re.search(re.escape(o) + r"(?![\w-])", usage)), None)


def in_cli_terms(message: str, usage: str) -> str:
    """An API message said as the command's flags: its ``name=value`` hints as ``--name value``,
    its subject (``max_steps must be ...``) and any other ``snake_case`` parameter it names as the
    flag it came from.

    The library's errors name Python parameters, since most of its callers are notebooks;
    only the parameters that the command has a flag for are rewritten.
    """
    def option(name: str) -> str | None:
        return cli_flag(name, usage)

    def assignment(match: re.Match[str]) -> str:
        name, value = match.group(1), match.group(2)
        tail = value[len(value.rstrip(".:")):]  # the sentence's own punctuation stays outside
        value = value.rstrip(".:").strip("'\"")
        flag = option(name)
        if flag is None:
            return match.group(0)
        return (flag if value == "True" else f"{flag} {value}") + tail

    def subject(match: re.Match[str]) -> str:  # "max_steps must be ..." -> "--steps must be ..."
        return option(match.group(1)) or match.group(1)

    said = _SUBJECT.sub(subject, _ASSIGNMENT.sub(assignment, message), count=1)
    return _BARE.sub(subject, said)  # "raise memory_budget" -> "raise --memory-budget"


def _user_frames(exc: BaseException) -> list[traceback.FrameSummary]:
    """The traceback from its first frame in the user's code (neither tunekit's nor an installed
    library's nor Python's own) on; empty when the error came from none."""
    frames = traceback.extract_tb(exc.__traceback__)
    ours = Path(__file__).resolve().parent
    libs = [Path(sysconfig.get_paths()[k]).resolve() for k in ("stdlib", "platstdlib", "purelib", "platlib")]

    def theirs(f: traceback.FrameSummary) -> bool:
        if f.filename.startswith("<"):
            return False
        path = Path(f.filename).resolve()
        return not path.is_relative_to(ours) and not any(path.is_relative_to(lib) for lib in libs)

    first = next((i for i, f in enumerate(frames) if theirs(f)), None)
    return [] if first is None else frames[first:]
