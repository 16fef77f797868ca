"""Grade a class's exercise notebooks (workbook tooling, every chapter).

    python -m labsupport grade submissions/ --out grades/grades.csv --seed 2718

Each submission's answer cells are put back into the instructor's pristine exercise notebook;
the student's code runs in a worker process of its own (own session, folder, memory/time/output
limits, no network where the machine allows it) and every check runs here, in the grader, on
inputs drawn from the instructor's ``--seed``.  Writes, beside ``--out``:

* ``grades.csv``  — one row per student × question: ``student, chapter, question, status, points,
  max_points, reason, flags, manual_grading``;
* ``summary.csv`` — one row per student × chapter: ``student, chapter, points, max_points``;
* ``feedback/STUDENT__chNN.txt`` — the check lines and hints the student would have seen;
* ``executed/STUDENT__chNN.ipynb`` — the rebuilt notebook as it ran (outputs trimmed);
* ``similarity.csv`` — pairs of students with near-identical answers (normalised code).

The run's header states what this machine enforces on the student's code (isolation, memory,
processes, disk, time); without an isolating sandbox (bubblewrap) the command refuses to start
unless ``--no-sandbox`` is given.  One grader at a time writes a gradebook's folder (``gradebook.lock`` there).

Exit status: 0 graded (whatever the grades), 1 no sandbox or the gradebook is locked by another
grader, 2 bad command line, 130 interrupted (what was graded is written).
"""
from __future__ import annotations

import argparse
import atexit
import csv
import hashlib
import io
import json
import os
import secrets
import shutil
import signal
import sys
import tempfile
import time
from multiprocessing import get_context
from multiprocessing.connection import wait
from pathlib import Path

from labsupport.fileio import atomic_write
from labsupport.fileio import LockHeld, hold_lock
from labsupport.paths import REPO_ROOT
from labsupport.progress import progress
from labsupport.workbook.grading.exercise import Chapter, Unreadable, discover, read_submission
from labsupport.workbook.grading.grader import (SOLUTIONS, Graded, Options, unreadable_rows, close_warm, grade_file,
                                                solution_answers)
from labsupport.workbook.grading.sandbox import Limits, enforcement, sandbox_mode
from labsupport.workbook.grading.similarity import similar_pairs
from labsupport.workbook.grading.stubs import hidden_references
from labsupport.workbook.grading import cgroup
from labsupport.workbook.grading.submissions import Submission, collect
from labsupport.workbook.grading.terminal import one_line, plain, printable

FIELDS = ["student", "chapter", "question", "status", "points", "max_points", "reason", "flags", "manual_grading"]
SUMMARY_FIELDS = ["student", "chapter", "points", "max_points"]


_FORMULA = ("=", "+", "-", "@", "\t", "\r", "'")
# CSI and OSC sequences first (their text goes with them), then any other control character
def neutralise(value: object) -> object:
    """A CSV cell a spreadsheet will not run as a formula (``=``, ``+``, ``-``, ``@`` …): a ``'`` in
    front.  A value that itself starts with ``'`` gets one more, so :func:`restore` is exact."""
    if isinstance(value, str) and value[:1] in _FORMULA:
        return "'" + value
    return value


def restore(value: str) -> str:
    """The value :func:`neutralise` protected (reading a gradebook back: the same student id)."""
    return value[1:] if value[:1] == "'" and value[1:2] in _FORMULA else value


def _csv_text(fields: list[str], rows: list[dict]) -> str:
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=fields, lineterminator="\n")
    writer.writeheader()
    for row in rows:
        writer.writerow({k: neutralise(_text(row.get(k, ""))) for k in fields})
    return buf.getvalue()


def _text(value: object) -> object:
    """A CSV cell's value, strings made writable as UTF-8 (a lone surrogate in a free-text answer)."""
    return printable(value) if isinstance(value, str) else value


def _safe(name: str) -> str:
    """A file name for ``name``: itself where it is short and plain; otherwise a cleaned prefix and
    ``~`` with a digest of the whole id (no plain name holds ``~``, so distinct ids never share)."""
    cleaned = "".join(ch if ch.isascii() and (ch.isalnum() or ch in "-_") else "_" for ch in name)
    if cleaned == name and 0 < len(name) <= 80 and not name.startswith("-"):
        return name
    return f"{cleaned[:60].lstrip('-')}~{hashlib.sha256(name.encode('utf-8', 'surrogatepass')).hexdigest()[:16]}"


class GradebookLocked(RuntimeError):
    """Another grader is writing the same gradebook."""


def lock_gradebook(out: Path):
    """Hold an exclusive lock on ``gradebook.lock`` in ``out``'s folder for this run (released when
    :func:`main` returns, or the process ends): the folder's summary.csv, similarity.csv, feedback/ and
    grading-run.json are shared by whatever ``--out`` is written there, so two graders in one folder are
    refused, whatever their ``--out``."""
    try:
        lock = hold_lock(out.with_name("gradebook.lock"), os.fspath(out.parent), remove=False)
    except LockHeld as exc:
        raise GradebookLocked(f"{out.parent} is being written by another grader "
                              f"(pid {exc.holder.get('pid', '?')})") from None
    _HELD_GRADEBOOKS.append(lock)
    return lock


#: the gradebook locks :func:`main` holds (released when it returns)
_HELD_GRADEBOOKS: list = []


class RepoGuard:
    """A snapshot of the repository's library, data and exercises: after each submission any
    change is put back, and the submission is flagged (defence in depth behind the sandbox)."""

    FOLDERS = ("labsupport", "data", "exercises", "configs")

    def __init__(self) -> None:
        self.files = self._read()

    def _read(self) -> dict[Path, bytes]:
        out = {}
        for folder in self.FOLDERS:
            base = REPO_ROOT / folder
            if base.is_dir():
                for p in base.rglob("*"):
                    if p.is_file() and "__pycache__" not in p.parts and p.suffix != ".pyc":
                        out[p] = p.read_bytes()
        return out

    def restore(self) -> list[str]:
        now = self._read()
        changed = sorted(str(p.relative_to(REPO_ROOT)) for p in set(now) | set(self.files)
                         if now.get(p) != self.files.get(p))
        for rel in changed:
            p = REPO_ROOT / rel
            if p in self.files:
                p.parent.mkdir(parents=True, exist_ok=True)
                p.write_bytes(self.files[p])
            else:
                p.unlink(missing_ok=True)
        return changed


_CHAPTERS: dict[str, Chapter] | None = None


# the reason of the rows of a submission whose pool process died: graded again by the next run
LOST = "grader error: the process grading this submission died"


def _pool_start() -> None:
    """A pool process leaves Ctrl-C to the grader, which reports it once (no traceback per process);
    SIGTERM (the grader stopping it) ends it through its ``finally`` blocks."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    atexit.register(close_warm)


def _pool_process(conn, exercises: str | None, options: Options, chapter: str | None) -> None:
    """One pool process: grade each ``(path, student)`` received until ``None``, sending back its Graded."""
    _pool_start()
    while True:
        try:
            task = conn.recv()
        except EOFError:
            return
        if task is None:
            return
        try:
            graded: object = _job(task[0], task[1], exercises, options, chapter)
        except Exception as exc:  # noqa: BLE001 - a grader failure: this submission's rows say which
            graded = f"grader error: {type(exc).__name__}: {exc}"
        conn.send(graded)


def _job(path: str, student: str, exercises: str | None, options: Options, chapter: str | None) -> Graded:
    """One submission in a pool process (``--jobs N``)."""
    global _CHAPTERS
    if _CHAPTERS is None:
        _CHAPTERS = discover(Path(exercises) if exercises else None)
    return grade_file(Path(path), _CHAPTERS, options, chapter, student=student)


def _refused(sub: Submission, chapters: dict[str, Chapter]) -> Graded:
    """The rows of a submission that is not graded (``sub.problem`` says why)."""
    chapter = chapters.get(sub.number or "")
    return Graded(sub.student, chapter.key if chapter else "", str(sub.path),
                  unreadable_rows(sub.student, chapter, sub.problem, "error"),
                  feedback=[f"your file was not graded: {sub.problem}"])


class Gradebook:
    """The two CSVs, feedback files and executed notebooks, rewritten atomically as rows arrive."""

    def __init__(self, out: Path, chapters: dict[str, Chapter], regrade: bool):
        self.out = out
        self.summary = out.with_name("summary.csv")
        self.chapters = {ch.key: ch for ch in chapters.values()}
        self.rows: list[dict] = []
        if out.is_file():  # kept until a student is graded again, so an interrupted --regrade loses nothing
            with open(out, newline="", encoding="utf-8") as fh:
                self.rows = [{k: restore(v or "") for k, v in r.items()} for r in csv.DictReader(fh)]
        lost = {(r["student"], r["chapter"]) for r in self.rows if r["reason"].startswith(LOST)}
        self.done = set() if regrade else {(r["student"], r["chapter"]) for r in self.rows} - lost

    def add(self, graded: Graded) -> None:
        key = (graded.student, graded.chapter)
        self.rows = [r for r in self.rows if (r["student"], r["chapter"]) != key]
        self.rows += [row.as_csv() for row in graded.rows]
        self.done.add(key)
        base = self.out.parent
        name = f"{_safe(graded.student)}__{_safe(graded.chapter or 'unknown')}"
        total = sum(r.points for r in graded.rows)
        top = sum(r.max_points for r in graded.rows)
        lines = [f"{graded.student} · {graded.chapter or '?'} · {total:g} / {top:g}", ""]
        lines += graded.feedback
        flagged = [r.question for r in graded.rows if r.flags]
        if flagged:  # which detector fired stays in grades.csv, for the instructor
            lines += ["", "held for your instructor's review (0 points until then): " + ", ".join(flagged)]
        atomic_write(base / "feedback" / f"{name}.txt", printable("\n".join(lines) + "\n"))
        if graded.executed is not None:
            atomic_write(base / "executed" / f"{name}.ipynb",
                         printable(json.dumps(graded.executed, ensure_ascii=False, indent=1)))
        self.write()

    def write(self) -> None:
        atomic_write(self.out, _csv_text(FIELDS, self.rows))
        totals: dict[tuple[str, str], list[float]] = {}
        for r in self.rows:
            t = totals.setdefault((r["student"], r["chapter"]), [0.0, 0.0])
            t[0] += float(r["points"] or 0)
            t[1] += float(r["max_points"] or 0)
        summary = []
        for (student, chapter), (got, _) in sorted(totals.items()):
            ch = self.chapters.get(chapter)
            top = ch.max_points if ch is not None else totals[(student, chapter)][1]
            summary.append({"student": student, "chapter": chapter, "points": f"{got:g}", "max_points": f"{top:g}"})
        atomic_write(self.summary, _csv_text(SUMMARY_FIELDS, summary))


def _parse(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="python -m labsupport grade", description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog="\n\n".join(__doc__.split("\n\n")[1:]))
    ap.add_argument("submissions", nargs="+", help="submitted notebooks, or folders holding them (one folder per "
                    "student, or files named after the student)")
    ap.add_argument("--out", default="grades.csv", help="gradebook CSV (default grades.csv); summary.csv, "
                    "feedback/, executed/ and similarity.csv go beside it")
    ap.add_argument("--chapter", help="grade every submission as this chapter (NN); default: from the file name")
    ap.add_argument("--seed", help="instructor seed for the checks' random inputs (default: a fresh one, printed "
                    "and saved in grading-run.json)")
    ap.add_argument("--rounds", type=int, default=2, help="runs of each check on different hidden seeds (default 2)")
    ap.add_argument("--timeout", type=float, default=30, help="seconds per question (default 30)")
    ap.add_argument("--cell-timeout", type=float, default=20, help="seconds per answer cell (default 20)")
    ap.add_argument("--submission-timeout", type=float, default=300, help="seconds per submission (default 300)")
    ap.add_argument("--memory-mb", type=int, default=3072, help="memory of one submission, all its processes "
                    "together where a cgroup is available (default 3072 MiB; the header says what is enforced)")
    ap.add_argument("--max-procs", type=int, default=64, help="processes of one submission (default 64)")
    ap.add_argument("--disk-mb", type=int, default=256, help="size of the submission's private home folder "
                    "(default 256 MiB; /tmp and /dev/shm get a quarter each)")
    ap.add_argument("--no-sandbox", action="store_true", help="grade even without isolation (no bubblewrap or no "
                    "user namespaces): the student's code then runs as your user")
    ap.add_argument("--jobs", type=int, default=1, help="submissions graded in parallel (default 1)")
    ap.add_argument("--regrade", action="store_true", help="grade again submissions already in --out")
    ap.add_argument("--override", action="append", default=[], metavar="STUDENT:CHAPTER:QUESTION",
                    help="accept a flagged answer's points (e.g. alice:ch03:q1); repeatable")
    ap.add_argument("--similarity", type=float, default=0.9, help="similarity threshold for similarity.csv "
                    "(default 0.9)")
    ap.add_argument("--exercises", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.jobs < 1 or args.rounds < 1 or args.max_procs < 8 or args.disk_mb < 16 or args.memory_mb < 256:
        ap.error("--jobs and --rounds must be at least 1, --max-procs 8, --disk-mb 16, --memory-mb 256")
    bad = [o for o in args.override if o.count(":") != 2]
    if bad:
        ap.error(f"--override {bad[0]!r}: write STUDENT:CHAPTER:QUESTION, e.g. alice:ch03:q1")
    return args


def main(argv: list[str] | None = None) -> int:
    before = len(_HELD_GRADEBOOKS)
    try:
        return _main(argv)
    except KeyboardInterrupt:  # before or after the class loop (which reports its own progress)
        print("\ninterrupted", file=sys.stderr)
        return 130
    finally:                   # the gradebook's lock is this run's: a next run in this process may take it
        while len(_HELD_GRADEBOOKS) > before:
            _HELD_GRADEBOOKS.pop().close()


def _main(argv: list[str] | None = None) -> int:
    args = _parse(argv)
    chapters = discover(Path(args.exercises) if args.exercises else None)
    out = Path(args.out)
    forced = args.chapter.zfill(2) if args.chapter else None
    if forced and forced not in chapters:
        print(f"grade: --chapter {args.chapter}: no exercises/{forced}_*.ipynb (have {sorted(chapters)})",
              file=sys.stderr)
        return 2
    subs = collect(args.submissions, out.parent, forced)
    if not subs:
        print("grade: no submissions found (give notebooks or folders holding .ipynb files)", file=sys.stderr)
        return 2
    seed = args.seed or secrets.token_hex(8)
    options = _options(args, seed)
    if sandbox_mode() == "none" and not args.no_sandbox:
        print("error: no sandbox on this machine (bubblewrap missing, or user namespaces disabled): install "
              "bubblewrap (apt-get install bubblewrap) or pass --no-sandbox to let students' code run as your user",
              file=sys.stderr)
        return 1
    try:
        lock_gradebook(out)  # held until main returns
    except GradebookLocked as exc:
        print(f"error: {exc}: wait for it to finish, or grade into another folder", file=sys.stderr)
        return 1
    except OSError as exc:
        print(f"error: cannot create the lock beside {out}: {exc.strerror}: choose a writable --out", file=sys.stderr)
        return 1
    other = _other_gradebook(out)
    if other:
        print(f"error: {out.parent} already holds the gradebook {other} (its summary.csv, feedback/ and "
              f"grading-run.json): grade into another folder, or pass --out {out.parent / other}", file=sys.stderr)
        return 1
    book = Gradebook(out, chapters, args.regrade)
    todo = [s for s in subs if args.regrade or (s.student, _key(s, chapters)) not in book.done]
    _header(args, todo, len(subs) - len(todo), chapters, options, out, seed)
    book.write()
    try:
        answers, done, elapsed = _grade_all(todo, chapters, options, args, book, forced)
    except KeyboardInterrupt as stop:
        print(f"\ninterrupted: {stop.args[0] if stop.args else 0} of {len(todo)} graded; {out} holds them",
              file=sys.stderr)
        return 130
    pairs = _write_similarity(out, answers, chapters, args.similarity)
    print(f"graded {done} submission(s) in {elapsed:.1f} s; wrote {out}, {book.summary.name}, feedback/, executed/, "
          f"similarity.csv ({pairs} similar pair(s))")
    _print_totals(book)
    return 0


def _options(args: argparse.Namespace, seed: str) -> Options:
    return Options(seed=seed, rounds=args.rounds,
                   limits=Limits(cell_timeout=args.cell_timeout, question_timeout=args.timeout,
                                 submission_timeout=args.submission_timeout, memory_mb=args.memory_mb,
                                 max_procs=args.max_procs, disk_mb=args.disk_mb),
                   overrides=frozenset(tuple(o.split(":")) for o in args.override),
                   protect=tuple(dict.fromkeys([Path(args.out).resolve().parent] +
                                               [Path(s).resolve() if Path(s).is_dir() else Path(s).resolve().parent
                                                for s in args.submissions])))


def _key(sub: Submission, chapters: dict[str, Chapter]) -> str:
    return chapters[sub.number].key if sub.number in chapters else ""


def _other_gradebook(out: Path) -> str:
    """The name of another gradebook whose run wrote ``out``'s folder (one gradebook per folder:
    summary.csv, similarity.csv, feedback/ and grading-run.json are shared), or ''."""
    run = out.with_name("grading-run.json")
    try:
        book = json.loads(run.read_text(encoding="utf-8")).get("gradebook")
    except (OSError, ValueError, AttributeError):
        return ""
    return book if isinstance(book, str) and book != out.name else ""


def _header(args: argparse.Namespace, todo: list[Submission], skipped: int, chapters: dict[str, Chapter],
            options: Options, out: Path, seed: str) -> None:
    """What the run will grade and enforce; writes grading-run.json."""
    for problem in sorted({s.problem for s in todo if s.problem}):
        print(plain(f"grade: {problem}"), file=sys.stderr)
    numbers = sorted({plain(s.number or "?") for s in todo})
    print(f"grading {len(todo)} submission(s) of chapter(s) {', '.join(numbers)}"
          f"{f' ({skipped} already in {out.name}: --regrade to grade them again)' if skipped else ''}")
    unreadable = []
    for sub in todo:  # every file is read and validated before the first one is graded
        try:
            read_submission(sub.path)
        except Unreadable as exc:
            unreadable.append(f"{sub.path}: {exc}")
    if unreadable:
        print(f"{len(unreadable)} file(s) are not readable notebooks (each gets rows saying why):")
        for line in unreadable[:10]:
            print(f"  {plain(line)}")
    enforced = enforcement(options.limits)
    for line in enforced:
        print(line)
    for number in sorted({s.number for s in todo if s.number in chapters}):
        kept = hidden_references(chapters[number])[1]
        if kept:  # the student's copy keeps these: the exercise itself (or the grader's codec) calls them
            shown = ", ".join(k.replace(":", ".") for k in kept[:4]) + (f" and {len(kept) - 4} more" * bool(kept[4:]))
            print(f"{chapters[number].key}: kept importable for the exercise: {shown}")
    print(f"seed: {'given' if args.seed else 'fresh'} (saved in {out.with_name('grading-run.json').name}) · "
          f"{args.rounds} round(s) per check")
    atomic_write(out.with_name("grading-run.json"), json.dumps(
        {"seed": seed, "rounds": args.rounds, "sandbox": sandbox_mode(), "enforced": enforced,
         "gradebook": out.name, "chapters": sorted(chapters),
         "exercises": {n: hashlib.sha256(c.notebook.read_bytes()).hexdigest()[:16] for n, c in chapters.items()}},
        indent=1) + "\n")


def _grade_all(todo: list[Submission], chapters: dict[str, Chapter], options: Options, args: argparse.Namespace,
               book: Gradebook, forced: str | None) -> tuple[dict, int, float]:
    """Grade ``todo`` into ``book``: ``(answers by (student, chapter), number graded, seconds)``.
    Ctrl-C raises KeyboardInterrupt(number graded) after the pool is stopped."""
    # with a sandbox the repository is read-only to the students' code; without one, put back
    # whatever a submission changed there and flag it
    guard = RepoGuard() if sandbox_mode() == "none" else None
    bar = progress(total=len(todo), desc="grading", unit="notebook")
    answers: dict[tuple[str, str], dict[str, str]] = {}
    started, done = time.monotonic(), 0

    def finish(graded: Graded) -> None:
        nonlocal done
        changed = guard.restore() if guard is not None else []
        if changed:
            flag = "wrote-outside: changed the repository's " + ", ".join(changed[:5]) + " (restored)" + (
                "; with --jobs > 1 this may be a submission graded at the same time" if args.jobs > 1 else "")
            for row in graded.rows:
                row.flags.insert(0, flag)
                row.points = 0.0
        book.add(graded)
        answers[(graded.student, graded.chapter)] = graded.answers
        done += 1
        bar.update(1)

    refused = [s for s in todo if s.problem]
    graded = [s for s in todo if not s.problem]
    for sub in refused:
        finish(_refused(sub, chapters))
    sweep_stale()   # what a killed grader (SIGKILL, OOM) left behind
    workroot = tempfile.mkdtemp(prefix=f"labsupport-grade-{os.getpid()}-")
    options.workroot = workroot
    options.prewarm = len(graded) > 1
    try:
        if args.jobs == 1:
            for sub in graded:
                finish(grade_file(sub.path, chapters, options, forced, student=sub.student))
        else:
            _grade_in_pool(graded, chapters, options, args, forced, finish)
    except KeyboardInterrupt:
        bar.close()
        raise KeyboardInterrupt(done) from None
    finally:
        close_warm()
        shutil.rmtree(workroot, ignore_errors=True)
    bar.close()
    return answers, done, time.monotonic() - started


def _grade_in_pool(subs: list[Submission], chapters: dict[str, Chapter], options: Options, args: argparse.Namespace,
                   forced: str | None, finish) -> None:
    """``--jobs N``: N pool processes, one submission each at a time.  A process that dies (the OOM
    killer, a signal) costs only the submission it held: that one gets ``error`` rows saying so (and
    is graded again by the next run), a fresh process takes its place, the class goes on."""
    ctx = get_context("spawn")
    queue = list(reversed(subs))
    held: dict[object, tuple[object, object, Submission | None]] = {}   # conn → (process, conn, its submission)

    def spawn() -> None:
        ours, theirs = ctx.Pipe()
        proc = ctx.Process(target=_pool_process, args=(theirs, args.exercises, options, forced), daemon=False)
        proc.start()
        theirs.close()
        held[ours] = (proc, ours, None)

    def hand_out() -> None:  # until every process is busy or nothing is left to hand out
        while queue:
            conn = next((c for c, (_, _, sub) in held.items() if sub is None), None)
            if conn is None:
                return
            proc, nxt = held[conn][0], queue.pop()
            try:
                conn.send((str(nxt.path), nxt.student))
            except OSError:   # it died while idle: the submission goes to its successor
                queue.append(nxt)
                del held[conn]
                conn.close()
                proc.join(10)
                spawn()
                continue
            held[conn] = (proc, conn, nxt)

    try:
        for _ in range(min(args.jobs, len(subs))):
            spawn()
        hand_out()
        while any(sub is not None for _, _, sub in held.values()):
            busy = [(proc, conn, sub) for proc, conn, sub in held.values() if sub is not None]
            ready = set(wait([conn for _, conn, _ in busy] + [proc.sentinel for proc, _, _ in busy]))
            for proc, conn, sub in busy:
                if conn in ready or proc.sentinel in ready:
                    try:
                        graded = conn.recv() if conn.poll() else None
                    except (EOFError, OSError):
                        graded = None
                    if graded is not None:
                        held[conn] = (proc, conn, None)
                        finish(graded if isinstance(graded, Graded) else _failed(sub, chapters, str(graded)))
                        continue
                    proc.join(10)
                    del held[conn]
                    conn.close()
                    finish(_lost(sub, chapters, proc.exitcode))
                    cgroup.sweep()     # the cgroups the dead process made for its student
                    if queue:
                        spawn()
            hand_out()
    finally:  # done, or Ctrl-C: stop every pool process (their finally blocks clean up)
        for proc, conn, sub in held.values():
            try:
                if sub is None:
                    conn.send(None)
                else:
                    proc.terminate()
            except (OSError, ValueError):
                pass
        for proc, conn, _ in held.values():
            proc.join(15)
            if proc.is_alive():
                proc.kill()
                proc.join(5)
            conn.close()


def _lost(sub: Submission, chapters: dict[str, Chapter], exitcode: int | None) -> Graded:
    """The rows of a submission whose pool process died while grading it."""
    if exitcode is not None and exitcode < 0:
        try:
            how = f"killed by {signal.Signals(-exitcode).name}"
        except ValueError:
            how = f"killed by signal {-exitcode}"
        if exitcode == -signal.SIGKILL:
            how += " (the out-of-memory killer, or the submission's code)"
    else:
        how = f"exit status {exitcode}"
    return _failed(sub, chapters, f"{LOST} ({how}); not graded: the next run grades it again",
                   "your file could not be graded this time (the grader's process ended); it will be graded again")


def _failed(sub: Submission, chapters: dict[str, Chapter], reason: str, note: str = "") -> Graded:
    """``error`` rows with ``reason`` for every question of ``sub``'s chapter."""
    chapter = chapters.get(sub.number or "")
    return Graded(sub.student, chapter.key if chapter else "", str(sub.path),
                  unreadable_rows(sub.student, chapter, reason, "error"), feedback=[note] if note else [])


def _write_similarity(out: Path, answers: dict, chapters: dict[str, Chapter], threshold: float) -> int:
    """similarity.csv beside ``out`` (pairs of students not graded in this run stay listed)."""
    for key in sorted({ch for _, ch in answers if ch}):  # copying from the official solutions too
        chapter = next((c for c in chapters.values() if c.key == key), None)
        official = solution_answers(chapter) if chapter is not None else {}
        if official:
            answers[(SOLUTIONS, key)] = official
    pairs = similar_pairs(answers, threshold)
    fields = ["chapter", "question", "student_a", "student_b", "similarity", "note", "matching_lines"]
    rows = [{"chapter": p.chapter, "question": p.question, "student_a": p.student_a, "student_b": p.student_b,
             "similarity": f"{p.similarity:.3f}", "note": p.note, "matching_lines": "\n".join(p.matching_lines)}
            for p in pairs]
    similarity = out.with_name("similarity.csv")
    if similarity.is_file():
        with open(similarity, newline="", encoding="utf-8") as fh:
            old = [{k: restore(v or "") for k, v in r.items()} for r in csv.DictReader(fh)]
        fresh = {key for key in answers if key[0] != SOLUTIONS}
        rows = [r for r in old if (r["student_a"], r["chapter"]) not in fresh
                and (r["student_b"], r["chapter"]) not in fresh] + rows
    atomic_write(similarity, _csv_text(fields, rows))
    return len(rows)


def sweep_stale(tmp: str | None = None) -> list[str]:
    """Remove the working folders and cgroups of graders that no longer run (killed before their
    ``finally`` could): folders ``labsupport-grade-<pid>-*`` in the temporary folder whose pid is
    gone and that this user owns.  Returns what was removed."""
    removed = cgroup.sweep()
    for folder in sorted(Path(tmp or tempfile.gettempdir()).glob("labsupport-grade-*")):
        pid = cgroup.owner_pid(folder.name)
        try:
            mine = folder.is_dir() and not folder.is_symlink() and folder.stat().st_uid == os.getuid()
        except OSError:
            continue
        if mine and pid is not None and not cgroup.is_running(pid):
            shutil.rmtree(folder, ignore_errors=True)
            removed.append(str(folder))
    return removed


def _print_totals(book: Gradebook) -> None:
    for key in sorted({(r['student'], r['chapter']) for r in book.rows}):
        pts = [r for r in book.rows if (r["student"], r["chapter"]) == key]
        got = sum(float(r["points"] or 0) for r in pts)
        flagged = sum(1 for r in pts if r["flags"])
        worth = sum(float(r['max_points'] or 0) for r in pts)
        print(f"  {one_line(key[0]):<24} {one_line(key[1] or '?'):<5} {got:g}/{worth:g}"
              + (f"  ({flagged} flagged)" if flagged else ""))


if __name__ == "__main__":
    raise SystemExit(main())
