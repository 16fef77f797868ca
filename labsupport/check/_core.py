"""The exercise-check machinery shared by every chapter's ``labsupport.check.chNN`` module.

A check takes the learner's *function* (never a value), runs it on fresh random inputs and
compares with the ``labsupport`` reference, so a hard-coded answer fails.  It prints one line:

    ✅ q1 passed — 25 random cases
    ❌ q1 failed — merge_step((…)) returned …, expected …   (then a hint line)
    🟡 q1 not attempted — the stub still raises NotImplementedError

Results are also kept for ``summary()`` and, when ``$LABSUPPORT_CHECK_REPORT`` names a file,
appended to it as JSON lines (a convenience for scripts; ``python -m labsupport grade`` does not
read it: the grader runs every check itself, in its own process).

Grading support, used by :mod:`labsupport.workbook.grading`:

* :func:`check_seed` — the checks draw random inputs from ``random.Random(check_seed())`` /
  ``np.random.default_rng(check_seed())``: fresh randomness for a learner, a reproducible stream
  derived from ``$LABSUPPORT_CHECK_SEED``, the chapter and the question when that variable is set
  (tests; the grader sets it from its ``--seed``, which the student never sees);
* :class:`Sealed` — accepted answers of conceptual questions stored as salted SHA-256 digests, so
  the key is not written out in the module; with a few options anyone can recover it by trying them
  all, so this is a courtesy, not a secret (an open-source course cannot hide such a key; the
  grader grades the submitted value and never lets the student's process import this module);
* tiered hints — ``hint=`` takes one text or a sequence of texts: the first failure of a question
  shows the first tier (a nudge), each further failure the next one (up to the formula);
* named mistakes — a :class:`Mistake` (raised by a rule of :mod:`labsupport.check.rules`) for a
  wrong answer the check recognises; its feedback has its own tiers, counted per mistake: the first
  time the learner makes it, the *symptom* (what their result shows, on the smallest input that
  shows it) and a question; on a repeat of the same mistake, the fix; from the third time on, the formula;
* answers that did not run — a check given a function whose answer cell last failed (a
  SyntaxError, an exception at the cell's top level) says so instead of grading the older
  definition (see :mod:`labsupport.check._cells`);
* :func:`plain` — values as a learner writes them (``1``, not ``np.int64(1)``) in every message;
* :func:`parts` — collect every failing part of a structured answer into one message;
* :func:`reset` — forget the results and attempts of this process (tests, the grader);
* a time limit — a check that runs longer than ``DEFAULT_TIME_LIMIT_S`` (180 s; the environment
  variable ``LABSUPPORT_CHECK_TIME_LIMIT`` changes it, ``0`` turns it off) stops the learner's code
  and fails, saying so: an endless loop does not hang the notebook.  The grader turns it off
  (:func:`time_limit`): its own clocks stop a student's code.
"""
from __future__ import annotations

import contextvars
import functools
import hashlib
import inspect
import json
import os
import signal
import threading
import traceback
from collections import Counter
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Sequence

from labsupport.check import _cells
from labsupport.env import for_the_page
from labsupport.check.texts import tomllib, translate

PASS, FAIL, NOT_ATTEMPTED = "passed", "failed", "not attempted"
#: 🟡 (not attempted) stands out on a white page, unlike the pale ⬜ it replaces.
_ICON = {PASS: "✅", FAIL: "❌", NOT_ATTEMPTED: "🟡"}
SEED_ENV = "LABSUPPORT_CHECK_SEED"
_RESULTS: list["CheckResult"] = []
_FAILURES: Counter = Counter()        # failed attempts per (chapter, question): picks the hint tier
_ATTEMPTS: Counter = Counter()        # every run of a check per (chapter, question)
_MISTAKES: Counter = Counter()        # occurrences per (chapter, question, mistake name): its tier
_CURRENT: contextvars.ContextVar[tuple[str, str] | None] = contextvars.ContextVar("labsupport_check", default=None)
_SINK: contextvars.ContextVar[Callable[[str], None] | None] = contextvars.ContextVar("labsupport_sink", default=None)
# set by the grader: the most characters a failure message may show of a value (the length of the
# largest input the check passed to the learner's code), so a return value cannot smuggle more out
_ECHO: contextvars.ContextVar[Callable[[], int] | None] = contextvars.ContextVar("labsupport_echo", default=None)


class CheckFailed(AssertionError):
    """Raised inside a check body when the learner's answer is wrong."""


#: how long one check may run in a notebook before it stops the learner's code (seconds); the
#: environment variable overrides it, the grader (which has clocks of its own) turns it off
TIME_LIMIT_ENV, DEFAULT_TIME_LIMIT_S = "LABSUPPORT_CHECK_TIME_LIMIT", 180.0
_LIMIT: contextvars.ContextVar[float | None] = contextvars.ContextVar("labsupport_limit", default=DEFAULT_TIME_LIMIT_S)


class CheckTimedOut(BaseException):
    """Raised by the alarm when a check runs past its time limit (a BaseException, so the learner's
    own ``except Exception`` cannot swallow it)."""


@contextmanager
def time_limit(seconds: float | None) -> Iterator[None]:
    """Run the checks inside with at most ``seconds`` each (``None``: no limit, as the grader does)."""
    token = _LIMIT.set(seconds)
    try:
        yield
    finally:
        _LIMIT.reset(token)


def _limit_s() -> float | None:
    """The limit in force: none under :func:`time_limit(None) <time_limit>`, else the environment's
    (``0``: none), else the default."""
    limit = _LIMIT.get()
    raw = os.environ.get(TIME_LIMIT_ENV)
    if limit is None or raw is None:
        return limit
    try:
        return float(raw) if float(raw) > 0 else None
    except ValueError:
        return limit


@contextmanager
def _alarm(seconds: float | None) -> Iterator[None]:
    """SIGALRM after ``seconds`` raises :class:`CheckTimedOut` (main thread on POSIX only; else no limit)."""
    if not seconds or threading.current_thread() is not threading.main_thread() or not hasattr(signal, "setitimer"):
        yield
        return

    def fire(signum: int, frame: Any) -> None:
        raise CheckTimedOut(seconds)

    previous = signal.signal(signal.SIGALRM, fire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


class StepDone(Exception):
    """Raised by a check body when the learner's answer is right so far but a later step is still to write (e.g.
    chapter 4's q3 returning no mask yet): shown as 🟡 with its message, no hint, not counted as a failure."""


class Mistake(CheckFailed):
    """A wrong answer the check recognises by name, with feedback in tiers of its own.

    ``symptom`` is always shown (what the learner's result shows); the tier line is ``ask`` (a
    question that points at the cause) the first time this mistake is made, ``fix`` on its second
    time and ``formula`` from its third time on (``fix`` again when there is no formula).
    """

    def __init__(self, name: str, symptom: str, ask: str, fix: str, formula: str = ""):
        super().__init__(symptom)
        self.name, self.symptom, self.ask, self.fix, self.formula = name, symptom, ask, fix, formula

    def tier(self, times: int) -> str:
        """The tier line for the ``times``-th occurrence (1-based) of this mistake."""
        tiers = [self.ask, self.fix] + ([self.formula] if self.formula else [])
        return tiers[min(max(times, 1), len(tiers)) - 1]


#: what :func:`try_call` returns when the learner's code raised on the input
RAISED = object()


def try_call(fn: Callable, *args: Any) -> Any:
    """The learner's result on a small input a failure is shrunk to, or :data:`RAISED` (the check
    then skips that input: an exception there says nothing about the mistake being named)."""
    try:
        return fn(*args)
    except Exception:  # noqa: BLE001 - the learner's code
        return RAISED


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
    attempt: int = 1
    hint: str = ""
    mistake: str = ""      # the named mistake recognised, if any
    tier: int = 0          # which occurrence of that mistake (1: symptom + question, 2: fix, 3+: formula)

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


def expect_keys(got: Any, keys: Iterable[str], say: Callable[..., str], **facts: Any) -> None:
    """Fail unless ``got`` is a dict holding every one of ``keys``, with the question's ``not_dict`` text (facts:
    ``got``, its ``type``) or its ``lacks`` text (the missing ``key``); ``facts`` fill both."""
    expect(isinstance(got, dict), say("not_dict", got=short(got), type=type(got).__name__, **facts))
    for key in keys:
        expect(key in got, say("lacks", key=key, **facts))


@contextmanager
def parts() -> Iterator[Callable[[bool, str], bool]]:
    """Check every part of a structured answer and name *all* the failing ones at once::

        with parts() as part:
            part(answer["cause"] in CAUSES, "cause: …")
            part(checks == right, "checks: …")

    ``part(condition, message)`` records ``message`` when ``condition`` is false (and returns the
    condition); leaving the block raises one :class:`CheckFailed` listing every recorded message.
    """
    problems: list[str] = []

    def part(condition: bool, message: str) -> bool:
        if not condition:
            problems.append(message)
        return bool(condition)

    try:
        yield part
    except CheckFailed as exc:  # a part that cannot be read at all (via expect) ends the block
        problems.append(str(exc))
    if len(problems) == 1:
        raise CheckFailed(problems[0])
    if problems:
        raise CheckFailed(f"{len(problems)} parts to fix: " + " | ".join(problems))


def plain(value: Any) -> Any:
    """``value`` with NumPy/torch scalars and arrays turned into Python numbers and lists
    (recursively through lists, tuples and dicts), so messages print ``1`` and ``[1, 2]``,
    never ``np.int64(1)`` or ``array([1, 2])``.  A float32 prints its own shortest form (``0.1``,
    not ``0.10000000149011612``); nothing is rounded beyond that."""
    if value is None or isinstance(value, (bool, str, bytes)):
        return value
    if isinstance(value, (int, float)):   # np.float64 is a float subclass: print it as a float
        return int(value) if isinstance(value, int) else float(value)
    dtype = getattr(value, "dtype", None)
    if dtype is not None and getattr(value, "ndim", None) is not None and type(value).__module__ == "numpy":
        if value.ndim:
            return [plain(v) for v in value]
        if dtype.kind == "f" and dtype.itemsize < 8:
            return float(str(value))          # the shortest text that reads back as this float32
        return plain(value.item())
    if isinstance(value, dict):
        return {plain(k): plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        out = [plain(v) for v in value]
        return tuple(out) if isinstance(value, tuple) else out
    tolist = getattr(value, "tolist", None)   # numpy / torch scalars and arrays
    if callable(tolist):
        try:
            return plain(tolist())
        except (TypeError, ValueError, RuntimeError):
            return value
    return value


def short(value: Any, limit: int = 120) -> str:
    """repr() of :func:`plain` ``(value)`` cut to ``limit`` characters, for failure messages (fewer
    while grading: see ``echo_limit``)."""
    cap = _ECHO.get()
    if cap is not None:
        limit = max(8, min(limit, cap()))
    try:
        text = repr(plain(value))
    except Exception:  # noqa: BLE001 - a learner's object whose repr raises
        text = f"<{type(value).__name__}>"
    return text if len(text) <= limit else text[: limit - 1] + "…"


def check_seed() -> int | None:
    """The seed for the running check's random inputs: ``None`` (fresh randomness) for a learner;
    when ``$LABSUPPORT_CHECK_SEED`` is set, a 64-bit seed derived from it, the chapter and the
    question (so each question gets its own reproducible stream)."""
    base = os.environ.get(SEED_ENV, "")
    if not base:
        return None
    chapter, question = _CURRENT.get() or ("", "")
    digest = hashlib.sha256(f"{base}\x00{chapter}\x00{question}".encode()).digest()
    return int.from_bytes(digest[:8], "little")


# ---------------------------------------------------------------------------------------------
# Answer keys out of reach: salted digests
def _digest(salt: str, value: Any) -> str:
    text = json.dumps(value, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(f"{salt}\x00{text}".encode()).hexdigest()


@functools.lru_cache(maxsize=1)
def _sealed_file() -> dict[str, list[str]]:
    with open(Path(__file__).with_name("sealed.toml"), "rb") as handle:
        return tomllib.load(handle)


class Sealed:
    """A set of accepted answers kept as salted SHA-256 digests: ``value in sealed`` and
    ``len(sealed)`` work, the values themselves cannot be read back from the module.

    Build the digests once with :meth:`seal` (authors only) and paste them into ``sealed.toml`` under their
    salt; :meth:`load` reads them.  Values are compared through their JSON form: strings, numbers, and lists
    such as ``[key, option]`` pairs.
    """

    def __init__(self, salt: str, digests: Iterable[str]):
        self.salt = salt
        self._digests = frozenset(digests)

    @classmethod
    def seal(cls, salt: str, values: Iterable[Any]) -> "Sealed":
        return cls(salt, (_digest(salt, v) for v in values))

    @classmethod
    def load(cls, salt: str) -> "Sealed":
        """The digests kept under ``salt`` in ``labsupport/check/sealed.toml``."""
        return cls(salt, _sealed_file()[salt])

    @property
    def digests(self) -> list[str]:
        return sorted(self._digests)

    def __contains__(self, value: Any) -> bool:
        try:
            return _digest(self.salt, value) in self._digests
        except (TypeError, ValueError):
            return False

    def __len__(self) -> int:
        return len(self._digests)

    def __repr__(self) -> str:
        return f"Sealed({self.salt!r}, {len(self)} answers)"


def same_set(chosen: Iterable[Any], right: Sealed) -> bool:
    """Is ``chosen`` exactly the sealed set (no wrong member, none missing)?"""
    try:
        chosen = set(chosen)
    except TypeError:  # unhashable members: not a set of option keys
        return False
    return len(chosen) == len(right) and all(c in right for c in chosen)


# ---------------------------------------------------------------------------------------------
def _emit(line: str) -> None:
    sink = _SINK.get()
    if sink is None:
        print(for_the_page(line))
    else:
        sink(line)


@contextmanager
def capture(sink: Callable[[str], None]) -> Iterator[None]:
    """Send the lines the checks print to ``sink`` instead of stdout (the grader's feedback)."""
    token = _SINK.set(sink)
    try:
        yield
    finally:
        _SINK.reset(token)


@contextmanager
def echo_limit(cap: Callable[[], int]) -> Iterator[None]:
    """While grading: :func:`short` shows at most ``cap()`` characters of any value."""
    token = _ECHO.set(cap)
    try:
        yield
    finally:
        _ECHO.reset(token)


def _record(result: CheckResult) -> CheckResult:
    _RESULTS.append(result)
    report = os.environ.get("LABSUPPORT_CHECK_REPORT")
    if report:
        with open(report, "a", encoding="utf-8") as fh:
            fh.write(json.dumps(asdict(result), ensure_ascii=False) + "\n")
    return result


def reset() -> None:
    """Forget every result and attempt recorded in this process."""
    _RESULTS.clear()
    _FAILURES.clear()
    _ATTEMPTS.clear()
    _MISTAKES.clear()


def _raised_not_implemented(exc: BaseException) -> bool:
    seen = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        if isinstance(exc, NotImplementedError):
            return True
        exc = exc.__cause__ or exc.__context__
    return False


_PACKAGE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _in_package(filename: str) -> bool:
    path = os.path.abspath(filename)
    return path == _PACKAGE_DIR or path.startswith(_PACKAGE_DIR + os.sep)


def blame(exc: BaseException, body: Callable | None = None) -> str:
    """Say whose code raised: the learner's (a frame outside labsupport below the check body, or
    an exception the grader carried back from the learner's process) or the checker's.

    The frames are searched for the check body's own frame, so any number of wrapper frames
    above it (decorators, the grader) does not matter."""
    where = getattr(exc, "learner_where", None)
    if where is not None:  # raised in the learner's process and re-raised here by the grader
        return f"your code raised {type(exc).__name__}: {exc} ({where})"
    frames = traceback.extract_tb(exc.__traceback__)
    code = getattr(inspect.unwrap(body), "__code__", None) if body is not None else None
    if code is not None:
        for i, f in enumerate(frames):
            if f.filename == code.co_filename and f.name == code.co_name:
                frames = frames[i + 1:]
                break
    learner = [f for f in frames if not _in_package(f.filename)]
    if learner:
        return f"your code raised {type(exc).__name__}: {exc} (line {learner[-1].lineno})"
    return (f"the check itself raised {type(exc).__name__}: {exc} — this is a bug in the checker, "
            "not in your answer; please report it")


def _hint_for(hint: str | Sequence[str], failures: int) -> str:
    if isinstance(hint, str):
        return translate(hint)
    tiers = list(hint)
    return translate(tiers[min(max(failures, 1), len(tiers)) - 1]) if tiers else ""


def check(chapter: str, question: str, hint: str | Sequence[str], points: float = 1.0) -> Callable:
    """Decorator turning ``body(*learner_objects) -> str | (str, dict)`` into a check.

    The body raises ``CheckFailed`` (via ``expect``) when the answer is wrong and returns a
    short success note (e.g. ``"25 random cases"``); it may return ``(note, manual)`` where
    ``manual`` maps free-text fields to the learner's text, flagged for manual grading.
    Any exception escaping the learner's code is reported, never re-raised, so an
    unfinished exercise notebook still runs top to bottom.

    ``hint`` is one text, or tiers from a nudge to the formula: the n-th failure of this
    question shows tier n (the last tier from then on).
    """

    def decorate(body: Callable) -> Callable:
        @functools.wraps(body)
        def run(*args: Any, **kwargs: Any) -> CheckResult:
            manual: dict[str, str] = {}
            key = (chapter, question)
            _ATTEMPTS[key] += 1
            token = _CURRENT.set(key)
            named: Mistake | None = None
            unrun = _cells.broken_answer(*args, *kwargs.values())
            if unrun:  # not a wrong answer: no hint, and the hint tiers do not move
                _CURRENT.reset(token)
                result = CheckResult(chapter, question, FAIL, unrun, 0.0, points, attempt=_ATTEMPTS[key])
                _emit(f"{_ICON[FAIL]} {question} {FAIL} — {unrun}")
                return _record(result)
            limit = _limit_s()
            try:
                with _alarm(limit):
                    out = body(*args, **kwargs)
                note, manual = out if isinstance(out, tuple) else (out, {})
                result = CheckResult(chapter, question, PASS, note or "", points, points, manual)
            except CheckTimedOut:
                result = CheckResult(chapter, question, FAIL, f"stopped after {limit:g} s: your function did not "
                                     f"return (an endless loop, or work that grows too fast?); "
                                     f"{TIME_LIMIT_ENV}=<seconds> changes the limit", 0.0, points)
            except StepDone as exc:
                result = CheckResult(chapter, question, NOT_ATTEMPTED, str(exc), 0.0, points)
            except Mistake as exc:
                named = exc
                result = CheckResult(chapter, question, FAIL, exc.symptom, 0.0, points, mistake=exc.name)
            except CheckFailed as exc:
                result = CheckResult(chapter, question, FAIL, str(exc), 0.0, points)
            except Exception as exc:  # noqa: BLE001 - anything the learner's code raised
                if _raised_not_implemented(exc):
                    result = CheckResult(chapter, question, NOT_ATTEMPTED,
                                         "the stub still raises NotImplementedError", 0.0, points)
                else:
                    result = CheckResult(chapter, question, FAIL, blame(exc, body), 0.0, points)
            finally:
                _CURRENT.reset(token)
            result.attempt = _ATTEMPTS[key]
            line = f"{_ICON[result.status]} {question} {result.status}"
            if result.message:
                line += f" — {result.message}"
            _emit(line)
            if result.status == FAIL:
                _FAILURES[key] += 1
                if named is not None:
                    _MISTAKES[(chapter, question, named.name)] += 1
                    result.tier = _MISTAKES[(chapter, question, named.name)]
                    result.hint = named.tier(result.tier)
                else:
                    result.hint = _hint_for(hint, _FAILURES[key])
                _emit(f"   hint: {result.hint}")
            for name, text in manual.items():
                _emit(f"   📝 {name}: {len(text.split())} words recorded for manual grading")
            return _record(result)

        run.hint = hint
        run.question = question
        run.points = points
        run.chapter = chapter
        run.is_check = True
        return run

    return decorate


def report_unrun(chapter: str, question: str, reason: str) -> CheckResult:
    """A check cell that could not even call its check (its answer was never defined): one failed
    line, recorded like any failure (used by :mod:`labsupport.check._cells`)."""
    key = (chapter, question)
    _ATTEMPTS[key] += 1
    result = CheckResult(chapter, question, FAIL, reason, 0.0, 1.0, attempt=_ATTEMPTS[key])
    _emit(f"{_ICON[FAIL]} {question} {FAIL} — {reason}")
    return _record(result)


def results(chapter: str | None = None) -> list[CheckResult]:
    """The checks run so far in this process (optionally of one chapter)."""
    return [r for r in _RESULTS if chapter is None or r.chapter == chapter]


def attempts(chapter: str, question: str) -> int:
    """How many times this process ran the check of ``chapter``/``question``."""
    return _ATTEMPTS[(chapter, question)]


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


def chapter_summary(chapter: str) -> Callable[[], None]:
    """The ``summary()`` of a chapter's check module: ``summary = chapter_summary(CHAPTER)``."""

    def summary_of_chapter() -> None:
        """Print this chapter's check results and score (last cell of the solutions notebook)."""
        summary(chapter)

    summary_of_chapter.__name__ = summary_of_chapter.__qualname__ = "summary"
    return summary_of_chapter
