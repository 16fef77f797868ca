"""How every ``python -m labsupport <command>`` ends (all chapters; docs/grading.md).

A command prints its results on stdout and fails with **one line** on stderr, never a traceback:
``<prog>: error: <what> — <what to do>``.  Exit status: 0 done, 1 an error, 2 a usage error,
130 interrupted with Ctrl-C.  :func:`run_command` is that contract, in one place.
"""
from __future__ import annotations

import sys
from typing import Callable, Mapping

__all__ = ["run_command", "fail"]


def fail(message: str, status: int) -> int:
    """Print ``message`` as the command's one line on stderr (after what stdout already holds)."""
    sys.stdout.flush()
    print(message, file=sys.stderr, flush=True)
    return status


def run_command(prog: str, body: Callable[[], int], errors: Mapping[type[BaseException], int] | None = None, *,
                interrupted: str = "interrupted (Ctrl-C)", shown: Callable[[str], str] = str) -> int:
    """Run ``body()`` and turn the errors a user can cause into one line and an exit status.

    ``errors`` maps exception types to their status (``{UsageError: 2, ConfigError: 1}``); their
    message is printed as ``prog: error: <message>``.  Ctrl-C prints ``prog: <interrupted>`` and
    returns 130; an ``OSError`` names its file (through ``shown``) and returns 1.  Anything else is
    a bug and keeps its traceback.
    """
    errors = dict(errors or {})
    try:
        return body()
    except KeyboardInterrupt as exc:   # an interrupt that knows better (e.g. after a complete commit) says so
        return fail(f"{prog}: {getattr(exc, 'message', None) or interrupted}", 130)
    except tuple(errors) as exc:  # type: ignore[misc]
        status = next(code for kind, code in errors.items() if isinstance(exc, kind))
        return fail(f"{prog}: error: {exc}", status)
    except OSError as exc:
        where = f"{shown(exc.filename)}: " if exc.filename else ""
        return fail(f"{prog}: error: {where}{exc.strerror or exc}", 1)
