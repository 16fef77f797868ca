"""The exercise-check machinery shared by every chapter's ``labsupport.check.chNN`` module.

A check takes the learner's *function* (never a value), runs it on fresh random inputs and
compares with the ``labsupport`` reference, so a hard-coded answer fails.  It prints one line:

    ✅ q1 passed — 25 random cases
    ❌ q1 failed — merge_step((…)) returned …, expected …   (then a hint line)
    ⬜ q1 not attempted — the stub still raises NotImplementedError

Results are also kept for ``summary()`` and, when ``$LABSUPPORT_CHECK_REPORT`` names a file,
appended to it as JSON lines (used by ``python -m labsupport.grade`` and the tests).
"""
from __future__ import annotations

import functools
import json
import os
import traceback
from dataclasses import asdict, dataclass, field
from typing import Any, Callable

PASS, FAIL, NOT_ATTEMPTED = "passed", "failed", "not attempted"
_ICON = {PASS: "✅", FAIL: "❌", NOT_ATTEMPTED: "⬜"}
_RESULTS: list["CheckResult"] = []


class CheckFailed(AssertionError):
    """Raised inside a check body when the learner's answer is wrong."""


@dataclass
class CheckResult:
    """The outcome of one check call."""

    chapter: str
    question: str
    status: str
    message: str = ""
    points: float = 0.0
    max_points: float = 1.0
    manual: dict[str, str] = field(default_factory=dict)

    @property
    def passed(self) -> bool:
        return self.status == PASS

    def __bool__(self) -> bool:
        return self.passed

    def _ipython_display_(self) -> None:  # the printed line already said everything
        return None


def expect(condition: bool, message: str) -> None:
    """Fail the running check with ``message`` unless ``condition`` holds."""
    if not condition:
        raise CheckFailed(message)


def short(value: Any, limit: int = 120) -> str:
    """repr() cut to ``limit`` characters, for failure messages."""
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _record(result: CheckResult) -> CheckResult:
    _RESULTS.append(result)
    report = os.environ.get("LABSUPPORT_CHECK_REPORT")
    if report:
        with open(report, "a", encoding="utf-8") as fh:
            fh.write(json.dumps(asdict(result), ensure_ascii=False) + "\n")
    return result


def _raised_not_implemented(exc: BaseException) -> bool:
    while exc is not None:
        if isinstance(exc, NotImplementedError):
            return True
        exc = exc.__cause__ or exc.__context__
    return False


_PACKAGE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _blame(exc: BaseException) -> str:
    """Say whose code raised: the learner's (any frame outside labsupport) or the checker's."""
    frames = traceback.extract_tb(exc.__traceback__)[2:]  # drop the wrapper and the check body
    learner = [f for f in frames if not os.path.abspath(f.filename).startswith(_PACKAGE_DIR)]
    if learner:
        return f"your code raised {type(exc).__name__}: {exc} (line {learner[-1].lineno})"
    return (f"the check itself raised {type(exc).__name__}: {exc} — this is a bug in the checker, "
            "not in your answer; please report it")


def check(chapter: str, question: str, hint: str, points: float = 1.0) -> Callable:
    """Decorator turning ``body(*learner_objects) -> str | (str, dict)`` into a check.

    The body raises ``CheckFailed`` (via ``expect``) when the answer is wrong and returns a
    short success note (e.g. ``"25 random cases"``); it may return ``(note, manual)`` where
    ``manual`` maps free-text fields to the learner's text, flagged for manual grading.
    Any exception escaping the learner's code is reported, never re-raised, so an
    unfinished exercise notebook still runs top to bottom.
    """

    def decorate(body: Callable) -> Callable:
        @functools.wraps(body)
        def run(*args: Any, **kwargs: Any) -> CheckResult:
            manual: dict[str, str] = {}
            try:
                out = body(*args, **kwargs)
                note, manual = out if isinstance(out, tuple) else (out, {})
                result = CheckResult(chapter, question, PASS, note or "", points, points, manual)
            except CheckFailed as exc:
                result = CheckResult(chapter, question, FAIL, str(exc), 0.0, points)
            except Exception as exc:  # noqa: BLE001 - anything the learner's code raised
                if _raised_not_implemented(exc):
                    result = CheckResult(chapter, question, NOT_ATTEMPTED,
                                         "the stub still raises NotImplementedError", 0.0, points)
                else:
                    result = CheckResult(chapter, question, FAIL, _blame(exc), 0.0, points)
            line = f"{_ICON[result.status]} {question} {result.status}"
            if result.message:
                line += f" — {result.message}"
            print(line)
            if result.status == FAIL:
                print(f"   hint: {hint}")
            for name, text in manual.items():
                print(f"   📝 {name}: {len(text.split())} words recorded for manual grading")
            return _record(result)

        run.hint = hint
        run.question = question
        return run

    return decorate


def results(chapter: str | None = None) -> list[CheckResult]:
    """The checks run so far in this process (optionally of one chapter)."""
    return [r for r in _RESULTS if chapter is None or r.chapter == chapter]


def summary(chapter: str | None = None) -> None:
    """Print one line per question (latest attempt) and the score."""
    latest: dict[tuple[str, str], CheckResult] = {}
    for r in results(chapter):
        latest[(r.chapter, r.question)] = r
    if not latest:
        print("no checks run yet")
        return
    got = sum(r.points for r in latest.values())
    total = sum(r.max_points for r in latest.values())
    for (ch, q), r in latest.items():
        print(f"{_ICON[r.status]} {ch} {q}: {r.status}")
    print(f"score: {got:g} / {total:g} (free-text answers are graded by hand)")
