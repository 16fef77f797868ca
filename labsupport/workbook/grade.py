"""Grade a class's exercise notebooks (workbook tooling, every chapter).

    python -m labsupport.grade submissions/ --out grades/grades.csv --seed 2718

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
unless ``--no-sandbox`` is given.  One grader at a time writes a gradebook (a lock beside ``--out``).

Exit status: 0 graded (whatever the grades), 1 no sandbox or the gradebook is locked by another
grader, 2 bad command line, 130 interrupted (what was graded is written).
"""
from __future__ import annotations

import argparse
import csv
import fcntl
import hashlib
import io
import json
import os
import re
import secrets
import shutil
import sys
import tempfile
import time
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from multiprocessing import get_context
from pathlib import Path

from labsupport.fileio import atomic_write
from labsupport.paths import REPO_ROOT
from labsupport.workbook.grading.exercise import Chapter, Unreadable, discover, read_submission
from labsupport.workbook.grading.grader import (SOLUTIONS, Graded, Options, _unreadable_rows, close_warm, grade_file,
                                                identify, solution_answers)
from labsupport.workbook.grading.sandbox import Limits, enforcement, sandbox_mode
from labsupport.workbook.grading.similarity import similar_pairs
from labsupport.workbook.grading.stubs import hidden_references

FIELDS = ["student", "chapter", "question", "status", "points", "max_points", "reason", "flags", "manual_grading"]
SUMMARY_FIELDS = ["student", "chapter", "points", "max_points"]


_FORMULA = ("=", "+", "-", "@", "\t", "\r", "'")
# CSI and OSC sequences first (their text goes with them), then any other control character
_CONTROL = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)?|[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def neutralise(value: object) -> object:
    """A CSV cell a spreadsheet will not run as a formula (``=``, ``+``, ``-``, ``@`` …): a ``'`` in
    front.  A value that itself starts with ``'`` gets one more, so :func:`restore` is exact."""
    if isinstance(value, str) and value[:1] in _FORMULA:
        return "'" + value
    return value


def restore(value: str) -> str:
    """The value :func:`neutralise` protected (reading a gradebook back: the same student id)."""
    return value[1:] if value[:1] == "'" and value[1:2] in _FORMULA else value


def plain(text: object) -> str:
    """``text`` without terminal escape sequences and control characters (what the grader prints)."""
    return _CONTROL.sub("", str(text))


def _csv_text(fields: list[str], rows: list[dict]) -> str:
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=fields, lineterminator="\n")
    writer.writeheader()
    for row in rows:
        writer.writerow({k: neutralise(row.get(k, "")) for k in fields})
    return buf.getvalue()


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
    """Hold an exclusive lock on ``OUT.lock`` for this run (released when the process ends)."""
    out.parent.mkdir(parents=True, exist_ok=True)
    fh = open(out.with_name(out.name + ".lock"), "a+")
    try:
        fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        fh.seek(0)
        other = fh.read().strip() or "?"
        fh.close()
        raise GradebookLocked(f"{out} is being written by another grader (pid {other})") from None
    fh.seek(0)
    fh.truncate()
    fh.write(str(os.getpid()))
    fh.flush()
    return fh


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


def _submissions(paths: list[str], book: Path | None = None) -> list[Path]:
    """The files to grade; folders are searched for notebooks (not the gradebook's own ``executed/``)."""
    out: list[Path] = []
    ours = (book.resolve() / "executed") if book is not None else None
    for raw in paths:
        p = Path(raw)
        if p.is_dir():
            out += sorted(q for q in p.rglob("*.ipynb") if ".ipynb_checkpoints" not in q.parts
                          and not (ours is not None and q.resolve().is_relative_to(ours)))
        else:
            out.append(p)
    return out


_CHAPTERS: dict[str, Chapter] | None = None


def _job(path: str, exercises: str | None, options: Options, chapter: str | None) -> Graded:
    """One submission in a pool process (``--jobs N``)."""
    global _CHAPTERS
    if _CHAPTERS is None:
        _CHAPTERS = discover(Path(exercises) if exercises else None)
        import atexit

        atexit.register(close_warm)
    return grade_file(Path(path), _CHAPTERS, options, chapter)


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
        self.done = set() if regrade else {(r["student"], r["chapter"]) for r in self.rows}

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
        atomic_write(base / "feedback" / f"{name}.txt", "\n".join(lines) + "\n")
        if graded.executed is not None:
            atomic_write(base / "executed" / f"{name}.ipynb", json.dumps(graded.executed, ensure_ascii=False, indent=1))
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
    ap = argparse.ArgumentParser(prog="python -m labsupport.grade", description=__doc__.split("\n\n")[0],
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
    try:
        return _main(argv)
    except KeyboardInterrupt:  # before or after the class loop (which reports its own progress)
        print("\ninterrupted", file=sys.stderr)
        return 130


def _main(argv: list[str] | None = None) -> int:
    args = _parse(argv)
    chapters = discover(Path(args.exercises) if args.exercises else None)
    files = _submissions(args.submissions, Path(args.out).parent)
    if not files:
        print("grade: no submissions found (give notebooks or folders holding .ipynb files)", file=sys.stderr)
        return 2
    forced = args.chapter.zfill(2) if args.chapter else None
    if forced and forced not in chapters:
        print(f"grade: --chapter {args.chapter}: no exercises/{forced}_*.ipynb (have {sorted(chapters)})",
              file=sys.stderr)
        return 2
    out = Path(args.out)
    seed = args.seed or secrets.token_hex(8)
    options = Options(seed=seed, rounds=args.rounds,
                      limits=Limits(cell_timeout=args.cell_timeout, question_timeout=args.timeout,
                                    submission_timeout=args.submission_timeout, memory_mb=args.memory_mb,
                                    max_procs=args.max_procs, disk_mb=args.disk_mb),
                      overrides=frozenset(tuple(o.split(":")) for o in args.override),
                      protect=tuple(dict.fromkeys([Path(args.out).resolve().parent] +
                                                  [Path(s).resolve() if Path(s).is_dir() else Path(s).resolve().parent
                                                   for s in args.submissions])))
    if sandbox_mode() == "none" and not args.no_sandbox:
        print("error: no sandbox on this machine (bubblewrap missing, or user namespaces disabled): install "
              "bubblewrap (apt-get install bubblewrap) or pass --no-sandbox to let students' code run as your user",
              file=sys.stderr)
        return 1
    try:
        lock = lock_gradebook(out)  # noqa: F841 - held until this process ends
    except GradebookLocked as exc:
        print(f"error: {exc}: wait for it to finish, or grade into another --out", file=sys.stderr)
        return 1
    except OSError as exc:
        print(f"error: cannot create the lock beside {out}: {exc.strerror}: choose a writable --out", file=sys.stderr)
        return 1
    book = Gradebook(out, chapters, args.regrade)
    todo, skipped = [], 0
    for f in files:
        student, number = identify(f, forced)
        key = (student, chapters[number].key if number in chapters else "")
        if key in book.done and not args.regrade:
            skipped += 1
        else:
            todo.append(f)
    seen: dict[tuple[str, str | None], Path] = {}
    for f in todo:
        key = identify(f, forced)
        if key in seen:
            print(plain(f"grade: {f} and {seen[key]} are both student {key[0]!r}, chapter {key[1]}; the later one counts"),
                  file=sys.stderr)
        seen[key] = f
    print(f"grading {len(todo)} submission(s) of chapter(s) {', '.join(sorted({plain(identify(f, forced)[1] or '?') for f in todo}))}"
          f"{f' ({skipped} already in {out.name}: --regrade to grade them again)' if skipped else ''}")
    unreadable = []
    for f in todo:  # every file is read and validated before the first one is graded
        try:
            read_submission(f)
        except Unreadable as exc:
            unreadable.append(f"{f}: {exc}")
    if unreadable:
        print(f"{len(unreadable)} file(s) are not readable notebooks (each gets rows saying why):")
        for line in unreadable[:10]:
            print(f"  {plain(line)}")
    enforced = enforcement(options.limits)
    for line in enforced:
        print(line)
    for number in sorted({identify(f, forced)[1] for f in todo if identify(f, forced)[1] in chapters}):
        kept = hidden_references(chapters[number])[1]
        if kept:  # the student's copy keeps these: the exercise itself (or the grader's codec) calls them
            print(f"{chapters[number].key}: kept importable for the exercise: "
                  + ", ".join(k.replace(":", ".") for k in kept))
    print(f"seed: {'given' if args.seed else 'fresh'} (saved in {out.with_name('grading-run.json').name}) · "
          f"{args.rounds} round(s) per check")
    out.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(out.with_name("grading-run.json"), json.dumps(
        {"seed": seed, "rounds": args.rounds, "sandbox": sandbox_mode(), "enforced": enforced,
         "chapters": sorted(chapters),
         "exercises": {n: hashlib.sha256(c.notebook.read_bytes()).hexdigest()[:16] for n, c in chapters.items()}},
        indent=1) + "\n")
    book.write()
    # with a sandbox the repository is read-only to the students' code; without one, put back
    # whatever a submission changed there and flag it
    guard = RepoGuard() if sandbox_mode() == "none" else None
    from labsupport.progress import progress

    bar = progress(total=len(todo), desc="grading", unit="notebook")
    answers: dict[tuple[str, str], dict[str, str]] = {}
    started = time.monotonic()
    done = 0

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

    workroot = tempfile.mkdtemp(prefix="labsupport-grade-")
    options.workroot = workroot
    options.prewarm = len(todo) > 1
    try:
        if args.jobs == 1:
            for f in todo:
                finish(grade_file(f, chapters, options, forced))
        else:
            pool = ProcessPoolExecutor(max_workers=args.jobs, mp_context=get_context("spawn"))
            try:
                pending = {pool.submit(_job, str(f), args.exercises, options, forced): f for f in todo}
                while pending:
                    ready, _ = wait(pending, return_when=FIRST_COMPLETED)
                    for fut in ready:
                        f = pending.pop(fut)
                        try:
                            finish(fut.result())
                        except Exception as exc:  # noqa: BLE001 - a pool process lost: this row only
                            student, number = identify(f, forced)
                            key = chapters[number].key if number in chapters else ""
                            finish(Graded(student, key, str(f), _unreadable_rows(
                                student, chapters.get(number or ""), f"grader error: {type(exc).__name__}: {exc}",
                                "error")))
            finally:  # on Ctrl-C: drop what has not started, do not wait for the class to finish
                pool.shutdown(wait=False, cancel_futures=True)
    except KeyboardInterrupt:
        bar.close()
        print(f"\ninterrupted: {done} of {len(todo)} graded; {out} holds them", file=sys.stderr)
        return 130
    finally:
        close_warm()
        shutil.rmtree(workroot, ignore_errors=True)
    bar.close()
    elapsed = time.monotonic() - started
    for key in sorted({ch for _, ch in answers if ch}):  # copying from the official solutions too
        chapter = next((c for c in chapters.values() if c.key == key), None)
        official = solution_answers(chapter) if chapter is not None else {}
        if official:
            answers[(SOLUTIONS, key)] = official
    pairs = similar_pairs(answers, args.similarity)
    fields = ["chapter", "question", "student_a", "student_b", "similarity", "matching_lines"]
    rows = [{"chapter": p.chapter, "question": p.question, "student_a": p.student_a, "student_b": p.student_b,
             "similarity": f"{p.similarity:.3f}", "matching_lines": "\n".join(p.matching_lines)} for p in pairs]
    similarity = out.with_name("similarity.csv")
    if similarity.is_file():  # pairs of students not graded in this run stay listed
        with open(similarity, newline="", encoding="utf-8") as fh:
            old = [{k: restore(v or "") for k, v in r.items()} for r in csv.DictReader(fh)]
        fresh = {key for key in answers if key[0] != SOLUTIONS}
        rows = [r for r in old if (r["student_a"], r["chapter"]) not in fresh
                and (r["student_b"], r["chapter"]) not in fresh] + rows
    atomic_write(similarity, _csv_text(fields, rows))
    print(f"graded {done} submission(s) in {elapsed:.1f} s; wrote {out}, {book.summary.name}, feedback/, executed/, "
          f"similarity.csv ({len(rows)} similar pair(s))")
    for key in sorted({(r['student'], r['chapter']) for r in book.rows}):
        pts = [r for r in book.rows if (r["student"], r["chapter"]) == key]
        got = sum(float(r["points"] or 0) for r in pts)
        flagged = sum(1 for r in pts if r["flags"])
        print(f"  {plain(key[0]):<24} {plain(key[1] or '?'):<5} {got:g}/{sum(float(r['max_points'] or 0) for r in pts):g}"
              + (f"  ({flagged} flagged)" if flagged else ""))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
