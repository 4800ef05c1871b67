"""How the ``tunekit`` command says an error: a usage error as one line in the command's own
flags (exit 2), an error in the user's code with their frames only (exit 1), tunekit's own with
its traceback (exit 1), an interrupt with what was kept (exit 130)."""

from __future__ import annotations

import argparse
import os
import re
import sys
import traceback
from pathlib import Path

from tunekit.errors import UsageError

__all__ = ["run", "in_cli_terms"]


def run(args: argparse.Namespace) -> int:
    """The command, with its errors said the way the CLI says them."""
    try:
        return int(args.func(args))
    except UsageError as exc:
        print(f"tunekit {args.command}: error: {in_cli_terms(str(exc), args.usage())}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        hint = ""
        if args.command == "search":
            hint = f": what finished is in {args.out}/search.json; go on with the same command and --resume"
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


# API parameters whose flag is not their name with dashes.
_FLAG_OF = {"max_steps": "--steps", "clip_grad_norm": "--clip", "lr_find_result": "--lr-find",
            "probe_result": "--probe", "config": "--set", "task_config": "--set", "overfit_floor": "--loss-floor",
            "prune": "--no-prune"}
_SUBJECT = re.compile(r"^([a-z][a-z0-9_]*)(?=[ :])")
_ASSIGNMENT = re.compile(r"(?<![\w./-])([a-z][a-z0-9_]*)=([^\s,;)]+)")


def in_cli_terms(message: str, usage: str) -> str:
    """An API message said as the command's flags: its ``name=value`` hints as ``--name value``,
    and its subject (``max_steps must be ...``) as the flag it came from.

    The library's errors name Python parameters, since most of its callers are notebooks;
    only the parameters that the command has a flag for are rewritten.
    """
    def option(name: str) -> str | None:
        options = ["--" + name.replace("_", "-"), _FLAG_OF.get(name, "")]
        return next((o for o in options if o and re.search(re.escape(o) + r"(?![\w-])", usage)), None)

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

    return _SUBJECT.sub(subject, _ASSIGNMENT.sub(assignment, message), count=1)


def _user_frames(exc: BaseException) -> list[traceback.FrameSummary]:
    """The traceback from its first frame in the user's code (neither tunekit's nor an installed
    library's nor Python's own) on; empty when the error came from none."""
    import sysconfig

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
