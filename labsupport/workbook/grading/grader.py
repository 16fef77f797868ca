"""Grading one submission: rebuild it from the pristine exercise notebook, run the student's code
in a worker process, run every check here, in the grader's process, against that code.

The student's notebook says nothing about its own grade: check cells, report files, patched
modules and printed lines of the submission are never read.  Only its answer cells are taken.
"""
from __future__ import annotations

import re
import builtins
import hashlib
import json
import os
import shutil
import tempfile
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from labsupport.check import _core
from labsupport.paths import REPO_ROOT
from labsupport.workbook.grading import codec
from labsupport.workbook.grading.exercise import (
    Chapter,
    Question,
    Unreadable,
    answer_sources,
    chapter_of,
    read_submission,
    strip_magics,
    student_imports,
)
from labsupport.workbook.grading.flags import static_flags
from labsupport.workbook.grading.terminal import plain
from labsupport.workbook.grading.sandbox import (
    Limits,
    Worker,
    WorkerDied,
    WorkerTimeout,
    prepare_folder,
    raise_learner_exception,
)

# statuses of a gradebook row (besides the checks' own "passed", "failed", "not attempted")
MISSING, UNPARSABLE, TIMED_OUT, NOT_RUN, FLAGGED, UNREADABLE, ERROR = (
    "missing", "unparsable", "timed out", "not run", "flagged", "unreadable", "error")


FEEDBACK_LINE = 600  # characters of one check line kept in the feedback (messages, never whole values)


@dataclass
class Options:
    seed: str = "0"
    rounds: int = 2                 # each check runs this many times on different hidden seeds
    limits: Limits = field(default_factory=Limits)
    overrides: frozenset = frozenset()  # {(student, chapter, question)} whose flags are accepted
    workroot: str | None = None         # folder for the per-submission working folders
    protect: tuple = ()                 # more folders the student's process may only read
    prewarm: bool = False               # start the next submission's process while this one is graded


@dataclass
class Row:
    student: str
    chapter: str
    question: str
    status: str
    points: float
    max_points: float
    reason: str = ""
    flags: list[str] = field(default_factory=list)
    manual: dict[str, str] = field(default_factory=dict)

    def as_csv(self) -> dict[str, Any]:
        return {"student": self.student, "chapter": self.chapter, "question": self.question, "status": self.status,
                "points": f"{self.points:g}", "max_points": f"{self.max_points:g}", "reason": self.reason,
                "flags": "; ".join(self.flags),
                "manual_grading": json.dumps(self.manual, ensure_ascii=False) if self.manual else ""}


@dataclass
class Graded:
    """Everything the grader learned about one submission."""

    student: str
    chapter: str
    path: str
    rows: list[Row]
    feedback: list[str] = field(default_factory=list)
    executed: dict | None = None
    answers: dict[str, str] = field(default_factory=dict)   # question → answer source (similarity)
    seconds: float = 0.0


def _manifest(folder: Path) -> dict[str, str]:
    out = {}
    for p in sorted(folder.rglob("*")):
        if p.is_file() and "__pycache__" not in p.parts:
            out[str(p.relative_to(folder))] = hashlib.sha256(p.read_bytes()).hexdigest()
    return out


class _Remote:
    """The student's function as the check sees it: a call carries plain data to the worker."""

    def __init__(self, session: "Session", name: str, question: str, deadline: float):
        self.session, self.name, self.question, self.deadline = session, name, question, deadline
        self.__name__ = name

    def __repr__(self) -> str:
        return f"<your function {self.name}>"

    def __call__(self, *args: Any) -> Any:
        s = self.session
        worker = s.worker_ready()
        left = min(self.deadline, s.submission_deadline) - time.monotonic()
        if left <= 0:
            raise WorkerTimeout
        try:
            s.echo = max(s.echo, max((len(repr(a)) for a in args), default=0))
        except Exception:  # noqa: BLE001 - an input without a repr
            pass
        reply = worker.request({"op": "call", "name": self.name, "question": self.question,
                                "args": codec.encode(list(args))}, left)
        if reply.get("output"):
            s.call_output.setdefault(self.question, []).append(reply["output"])
        for w in reply.get("warnings", []):   # re-emitted here, so a check can expect a warning
            category = getattr(builtins, str(w.get("category")), None)
            if not (isinstance(category, type) and issubclass(category, Warning)):
                category = UserWarning
            warnings.warn(plain(str(w.get("message", "")))[:2000], category, stacklevel=2)  # no escapes, bounded
        if not reply.get("ok"):
            raise_learner_exception(reply.get("raise") or {"type": "RuntimeError", "message": reply.get("error", "")})
        try:
            result, changed_args = codec.decode(reply["result"]), codec.decode(reply["args"])
        except codec.EncodeError as exc:   # what the student's code returned: its error, not the checker's
            raise_learner_exception({"type": "TypeError", "bases": ["TypeError"], "where": "its return value",
                                     "message": f"the value it returned cannot be graded: {exc}"})
        for original, changed in zip(args, changed_args):
            codec.write_back(original, changed)
        return result


IMPORTS = "__student_imports__"


def _leading_setup(chapter: Chapter) -> list[tuple[int, Any, str]]:
    """The instructor's setup cells before the first answer cell: the same for every submission."""
    out = []
    for pos, cell in enumerate(c for c in chapter.cells if c.kind != "check"):
        if cell.kind != "setup":
            break
        out.append((pos, cell, cell.source))
    return out


class _Warm:
    """A worker started ahead of its submission: own folder prepared, the chapter's leading setup
    cells (instructor code, run before any student code) already sent. Nothing of a student is in
    it until :class:`Session` adopts it for exactly one submission."""

    def __init__(self, chapter: Chapter, options: Options):
        self.key = _warm_key(chapter, options)
        self.workdir = Path(tempfile.mkdtemp(prefix="submission-", dir=options.workroot))
        self.worker: Worker | None = None
        try:
            prepare_folder(self.workdir, chapter)
            self.library = _manifest(self.workdir / "lib" / "labsupport")
            self.leading = _leading_setup(chapter)
            self.worker = Worker(self.workdir, options.limits, protect=options.protect)
            self.worker.start()
            self.worker.send({"op": "init"}, 30)
            for pos, _, source in self.leading:
                self.worker.send({"op": "exec", "cell": pos, "source": source}, 30)
        except BaseException:
            self.discard()
            raise

    def discard(self) -> None:
        if self.worker is not None:
            self.worker.kill()
        shutil.rmtree(self.workdir, ignore_errors=True)


_WARM: _Warm | None = None


def _warm_key(chapter: Chapter, options: Options) -> tuple:
    return (chapter.key, repr(options.limits), options.protect, options.workroot)


def _take_warm(chapter: Chapter, options: Options) -> _Warm | None:
    global _WARM
    warm, _WARM = _WARM, None
    if warm is not None and (warm.key != _warm_key(chapter, options) or warm.worker is None or not warm.worker.alive):
        warm.discard()
        warm = None
    return warm


def _prewarm(chapter: Chapter, options: Options) -> None:
    global _WARM
    close_warm()
    try:
        _WARM = _Warm(chapter, options)
    except Exception:  # noqa: BLE001 - no head start; the next submission starts its worker itself
        _WARM = None


def close_warm() -> None:
    """Stop a worker started ahead for a submission that never came."""
    global _WARM
    if _WARM is not None:
        _WARM.discard()
        _WARM = None


class _ImportsCell:
    """The import lines of the student's other cells (a helper import outside the answer cells)."""

    id, kind, source, defines = IMPORTS, "imports", "", []


class Session:
    """One submission's worker and the rebuilt notebook it runs."""

    def __init__(self, chapter: Chapter, answers: dict[str, str], options: Options, workdir: Path,
                 warm: "_Warm | None" = None):
        self.chapter, self.answers, self.options, self.workdir = chapter, answers, options, workdir
        self.warm = warm
        self.limits = options.limits
        self.program: list[tuple[int, Any, str]] = []
        self.syntax: dict[str, str] = {}
        imports = answers.get(IMPORTS, "")
        for pos, cell in enumerate(c for c in chapter.cells if c.kind != "check"):
            if imports and cell.kind == "answer":  # the student's own imports, before the first answer
                self.program.append((pos, _ImportsCell(), imports))
                imports = ""
            source = cell.source
            if cell.kind == "answer":
                if cell.id not in answers:
                    continue
                source = strip_magics(answers[cell.id])
                try:
                    compile(source, f"<cell {pos}>", "exec")
                except (SyntaxError, ValueError) as exc:
                    self.syntax[cell.id] = f"{type(exc).__name__}: {getattr(exc, 'msg', exc)} " \
                                           f"(line {getattr(exc, 'lineno', '?')})"
                    continue
                except (RecursionError, MemoryError) as exc:  # built to exhaust the compiler
                    self.syntax[cell.id] = (f"{type(exc).__name__}: the cell is too deeply nested or too large "
                                            "to compile")
                    continue
            self.program.append((pos, cell, source))
        self.state: dict[str, str] = {}
        self.cell_output: dict[str, str] = {}
        self.stop_at: int | None = None
        self.stop_reason = ""
        self.call_output: dict[str, list[str]] = {}
        self.worker: Worker | None = None
        self.echo = 0   # the largest input (repr characters) passed to the student's code in this question
        self.started = time.monotonic()
        self.submission_deadline = self.started + self.limits.submission_timeout

    # ------------------------------------------------------------------
    def worker_ready(self) -> Worker:
        if self.worker is not None and self.worker.alive:
            return self.worker
        for _ in range(len(self.program) + 2):
            if self._boot():
                return self.worker
        raise WorkerDied("the student's process could not be started (see worker.log)")

    def _boot(self) -> bool:
        """Start a worker and run the program's cells; False when it had to be killed (retry)."""
        if self.worker is not None:
            self.worker.kill()
        done = 0
        if self.warm is not None:  # adopt the worker started ahead: collect its setup cells' replies
            warm, self.warm = self.warm, None
            self.worker = warm.worker
            try:
                self.worker.receive(max(self.limits.cell_timeout, 30))
                for pos, cell, _ in warm.leading:
                    reply = self.worker.receive(max(self.limits.cell_timeout, 60))
                    self.cell_output.setdefault(cell.id, reply.get("output", ""))
                    self.state.setdefault(cell.id, "ok" if reply.get("ok") else f"error: {reply.get('error', '')}")
                    done += 1
            except (WorkerTimeout, WorkerDied):
                return False
        else:
            self.worker = Worker(self.workdir, self.limits, protect=self.options.protect)
            self.worker.start()
            try:
                self.worker.request({"op": "init"}, max(self.limits.cell_timeout, 30))
            except (WorkerTimeout, WorkerDied):
                return False
        for pos, cell, source in self.program[done:]:
            if self.stop_at is not None and pos >= self.stop_at:
                break
            if self.state.get(cell.id, "").startswith(("timeout", "died", "memory")):
                continue
            left = min(self.limits.cell_timeout if cell.kind == "answer" else max(self.limits.cell_timeout, 60),
                       self.submission_deadline - time.monotonic())
            try:
                reply = self.worker.request({"op": "exec", "cell": pos, "source": source}, left)
            except WorkerTimeout:
                self.state[cell.id] = f"timeout: cell {pos} ran past its {self.limits.cell_timeout:g} s limit"
                return False
            except WorkerDied:
                if self.worker.out_of_memory:  # like a time-out: that cell failed, the notebook goes on
                    self.state[cell.id] = (f"memory: cell {pos} used more than the submission's "
                                           f"{self.limits.memory_mb} MiB")
                    return False
                self.state[cell.id] = "died"
                self.stop_at, self.stop_reason = pos, f"cell {pos} ended the student's process"
                return False
            self.cell_output.setdefault(cell.id, reply.get("output", ""))
            if reply.get("stop"):
                self.state[cell.id] = f"stopped: {reply['error']}"
                self.stop_at, self.stop_reason = pos, f"cell {pos} raised {reply['stop']}"
                break
            self.state.setdefault(cell.id, "ok" if reply.get("ok") else f"error: {reply.get('error', '')}")
        return True

    def close(self) -> None:
        if self.worker is not None:
            self.worker.kill()

    def position(self, cell_id: str) -> int:
        return next(pos for pos, c in enumerate(c for c in self.chapter.cells if c.kind != "check") if c.id == cell_id)

    # ------------------------------------------------------------------
    def grade(self, q: Question, student: str, feedback: list[str]) -> Row:
        ch, max_points = self.chapter.key, q.points
        try:  # a (re)started process has run the cells: where the notebook stopped is known
            self.worker_ready()
        except (WorkerDied, WorkerTimeout):
            pass
        row = Row(student, ch, q.name, "", 0.0, max_points)
        missing = [c for c in q.cells if c not in self.answers]
        if missing:
            names = ", ".join(f"{n}()" for n in q.functions)
            row.status, row.reason = MISSING, f"no answer cell defining {names}"
        elif any(c in self.syntax for c in q.cells):
            row.status, row.reason = UNPARSABLE, next(self.syntax[c] for c in q.cells if c in self.syntax)
        elif any(self.state.get(c, "").startswith("timeout") for c in q.cells):
            row.status, row.reason = TIMED_OUT, next(self.state[c] for c in q.cells if c in self.state)
        elif any(self.state.get(c, "").startswith("memory") for c in q.cells):
            row.status, row.reason = "failed", next(self.state[c] for c in q.cells if c in self.state)
        elif self.stop_at is not None and any(self.position(c) >= self.stop_at for c in q.cells):
            row.status, row.reason = NOT_RUN, f"not reached: {self.stop_reason}"
        elif time.monotonic() >= self.submission_deadline:
            row.status = TIMED_OUT
            row.reason = f"the submission ran past its {self.limits.submission_timeout:g} s limit"
        else:
            self._run_check(q, row, feedback)
        if row.status in (MISSING, UNPARSABLE, TIMED_OUT, NOT_RUN) or row.reason.startswith("memory:"):
            feedback.append(f"{q.name} {row.status} — {row.reason}")
        for cid in q.cells:
            if cid in self.answers:
                row.flags += [f for f in static_flags(self.answers[cid], q.references) if f not in row.flags]
        return row

    def _run_check(self, q: Question, row: Row, feedback: list[str]) -> None:
        fn = getattr(self.chapter.module, q.name)
        try:
            self.worker_ready()  # (re)starting the student's process is not the question's time
        except WorkerDied as exc:
            row.status, row.reason = "failed", f"your notebook's process could not be run ({exc})"
            return
        deadline = time.monotonic() + self.limits.question_timeout
        proxies = [_Remote(self, name, q.name, deadline) for name in q.functions]
        lines: list[str] = []
        saved = os.environ.get(_core.SEED_ENV)
        result = None
        self.echo = 0
        try:
            for r in range(max(1, self.options.rounds)):
                os.environ[_core.SEED_ENV] = f"{self.options.seed}:{r}"
                _core._FAILURES.clear()
                round_lines: list[str] = []
                with _core.capture(round_lines.append), _core.echo_limit(lambda: max(self.echo, 8)), \
                        _core.time_limit(None):   # the grader's own clocks stop a student's code
                    result = fn(*proxies)
                if r == 0 or not result.passed:
                    lines += round_lines
                if not result.passed:
                    break
        except WorkerTimeout:
            row.status, row.reason = TIMED_OUT, f"{q.name} ran past its {self.limits.question_timeout:g} s limit"
            return
        except WorkerDied as exc:
            row.status, row.reason = "failed", f"your code ended its process while {q.name} ran ({exc})"
            feedback.append(f"❌ {q.name} failed — {row.reason}")
            return
        finally:
            if saved is None:
                os.environ.pop(_core.SEED_ENV, None)
            else:
                os.environ[_core.SEED_ENV] = saved
        feedback.extend(line if len(line) <= FEEDBACK_LINE else line[:FEEDBACK_LINE - 1] + "…" for line in lines)
        row.status, row.reason = result.status, result.message
        row.points = result.points if result.passed else 0.0
        row.manual = dict(result.manual)


def identify(path: Path, forced_chapter: str | None) -> tuple[str, str | None]:
    """(student id, chapter number or None) from the file's name and folder."""

    path = Path(path)
    m = re.match(r"^(\d\d)_", path.name)
    if m:
        student = path.parent.name or path.stem
    else:
        student = path.stem
        m = re.search(r"(?:^|[^0-9])(\d\d)_[a-z]", path.stem)
    return student, forced_chapter or (m.group(1) if m else None)


def unreadable_rows(student: str, chapter: Chapter | None, reason: str, status: str = UNREADABLE) -> list[Row]:
    if chapter is None:
        return [Row(student, "", "", status, 0.0, 0.0, reason)]
    return [Row(student, chapter.key, q.name, status, 0.0, q.points, reason) for q in chapter.questions]


def grade_file(path: Path, chapters: dict[str, Chapter], options: Options, forced_chapter: str | None = None,
               student: str | None = None) -> Graded:
    """Grade one submitted notebook. Never raises for anything the submission holds."""
    started = time.monotonic()
    sid, number = identify(path, forced_chapter)
    student = student or sid
    chapter = chapters.get(number) if number else None
    if number and chapter is None:
        graded = Graded(student, number, str(path), unreadable_rows(
            student, None, f"no exercise notebook for chapter {number} in exercises/", ERROR))
        graded.rows[0].chapter = f"ch{number}"
        return graded
    try:
        cells = read_submission(path)
    except Unreadable as exc:
        return Graded(student, chapter.key if chapter else "", str(path), unreadable_rows(student, chapter, str(exc)),
                      feedback=[f"your file could not be graded: {exc}"])
    guess = chapter_of(cells, chapters)
    flags: list[str] = []
    if chapter is None:
        if guess is None:
            return Graded(student, "", str(path), unreadable_rows(
                student, None, "cannot tell the chapter: name the file NN_topic.ipynb or pass --chapter", ERROR))
        chapter = chapters[guess]
    elif guess is not None and guess != chapter.number:
        flags.append(f"wrong-chapter: submitted as chapter {chapter.number}, "
                     f"but its cells are chapter {guess}'s exercises")
    answers, how = answer_sources(chapter, cells)
    for source in answers.values():  # trying to signal other processes taints the whole submission
        flags += [f for f in static_flags(source, []) if f.startswith("signals") and f not in flags]
    extra_imports = student_imports(chapter, cells, answers)
    if extra_imports:
        answers = {**answers, IMPORTS: extra_imports}
    warm = _take_warm(chapter, options) if options.prewarm else None
    workdir = warm.workdir if warm else Path(tempfile.mkdtemp(prefix="submission-", dir=options.workroot))
    feedback: list[str] = []
    rows: list[Row] = []
    session = None
    _core.reset()
    try:
        if warm is None:
            prepare_folder(workdir, chapter)
        library = warm.library if warm else _manifest(workdir / "lib" / "labsupport")  # its copy, as handed over
        session = Session(chapter, answers, options, workdir, warm)
        try:
            session.worker_ready()  # adopt (or start) this submission's process ...
        except (WorkerDied, WorkerTimeout):
            pass  # each question reports it
        if options.prewarm:
            _prewarm(chapter, options)  # ... and start the next one's while this one is graded
        for q in chapter.questions:
            rows.append(session.grade(q, student, feedback))
        now = _manifest(workdir / "lib" / "labsupport")
        changed = sorted(k for k in set(now) | set(library) if now.get(k) != library.get(k))
        if changed:
            flags.append("wrote-outside: changed its copy of labsupport/" + ", labsupport/".join(changed[:5]))
    except Exception as exc:  # noqa: BLE001 - a grader failure stays this submission's failure
        done = {r.question for r in rows}
        rows += [Row(student, chapter.key, q.name, ERROR, 0.0, q.points, f"grader error: {type(exc).__name__}: {exc}")
                 for q in chapter.questions if q.name not in done]
    finally:
        if session is not None:
            session.close()
        shutil.rmtree(workdir, ignore_errors=True)
    for row in rows:
        row.flags = flags + row.flags
        if row.flags and (student, chapter.key, row.question) not in options.overrides:
            if row.status == "passed":
                row.status, row.reason = FLAGGED, "passed the check, but flagged for the instructor (see flags)"
            elif row.status == "failed" and any(f.startswith("reference") for f in row.flags):
                # its check failed because the reference it called is not there while grading
                row.status, row.reason = FLAGGED, f"used labsupport's reference (see flags); {row.reason}"
            row.points = 0.0
    if any(v == "function name" for v in how.values()):
        feedback.append("note: some answer cells were found by the function they define (their cell ids changed)")
    graded = Graded(student, chapter.key, str(path), rows, feedback, seconds=time.monotonic() - started)
    graded.answers = {q.name: "\n\n".join(answers[c] for c in q.cells if c in answers) for q in chapter.questions}
    answers.pop(IMPORTS, None)
    graded.executed = _executed(chapter, answers, session, feedback) if session is not None else None
    return graded


SOLUTIONS = "solutions/"  # the official answers' name in similarity.csv (no student id holds a "/")


def solution_answers(chapter: Chapter) -> dict[str, str]:
    """``{question: answer source}`` of ``solutions/NN_topic.ipynb`` (empty when there is none)."""
    path = REPO_ROOT / "solutions" / chapter.notebook.name
    try:
        cells = read_submission(path)
    except Unreadable:
        return {}
    answers, _ = answer_sources(chapter, cells)
    return {q.name: "\n\n".join(answers[c] for c in q.cells if c in answers) for q in chapter.questions}


def _executed(chapter: Chapter, answers: dict[str, str], session: "Session", feedback: list[str]) -> dict:
    """The rebuilt notebook with what ran (outputs trimmed), for the instructor's review."""
    nb = json.loads(chapter.notebook.read_text(encoding="utf-8"))
    by_question: dict[str, list[str]] = {}
    for line in feedback:
        key = line.split(" ")[1] if line[:1] in "✅❌🟡" else line.split(" ")[0]
        by_question.setdefault(key, []).append(line)
    for raw in nb["cells"]:
        if raw.get("cell_type") != "code":
            continue
        cid = raw.get("id")
        if cid in answers:
            raw["source"] = answers[cid]
        text = session.cell_output.get(cid, "")
        state = session.state.get(cid, "")
        if state and state != "ok":
            text += f"\n[grader] {state}\n"
        for c in chapter.cells:
            if c.id == cid and c.kind == "check":
                for q in chapter.questions:
                    if f"check.{q.name}(" in c.source:
                        text += "\n".join(by_question.get(q.name, [])) + "\n"
        raw["outputs"] = [{"output_type": "stream", "name": "stdout", "text": text[:8000]}] if text.strip() else []
    return nb
