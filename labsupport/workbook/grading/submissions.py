"""Which files a grading run grades, and whose they are (grading, every chapter).

A student's id comes from where the notebook was found, so that ids are unique by construction:

* under a folder given on the command line: the first folder below it (``subs/alice/04_….ipynb``
  and ``subs/alice/late/04_….ipynb`` are both alice's; ``subs/mallory/alice/04_….ipynb`` is
  mallory's — a submission cannot name a classmate by nesting folders);
* a file at the top of that folder, or named on the command line: as :func:`~.grader.identify` says
  (the folder holding a ``NN_topic.ipynb``, else the file's stem).

Two files that give the same student and chapter are never merged and neither silently wins: both
are reported, and the student gets ``error`` rows that say which files to keep one of.  The same
file reached twice (a folder and the file itself) counts once.  The gradebook's own ``executed/``
folder and ``.ipynb_checkpoints`` are passed over.  A name that is not UTF-8 gives the id the gradebook
writes: each undecodable byte is U+FFFD (so a re-run finds the student graded), and two folders that
differ only in such bytes are one id, reported as two notebooks of one student, never merged.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from labsupport.workbook.grading.grader import identify
from labsupport.workbook.grading.terminal import printable

@dataclass(frozen=True)
class Submission:
    """One file to grade: its path, whose it is, its chapter number (or None), and why it cannot
    be graded (``problem``; empty when it can)."""

    path: Path
    student: str
    number: str | None
    problem: str = ""


def _found(raw: str, skip: Path | None) -> list[tuple[Path, str | None]]:
    """``(notebook, student from its folder or None)`` for one command-line argument."""
    given = Path(raw)
    if not given.is_dir():
        return [(given, None)]
    out = []
    for path in sorted(given.rglob("*.ipynb")):
        rel = path.relative_to(given)
        if ".ipynb_checkpoints" in rel.parts or (skip is not None and _inside(path, skip)):
            continue
        out.append((path, printable(rel.parts[0]) if len(rel.parts) > 1 else None))
    return out


def _inside(path: Path, folder: Path) -> bool:
    try:
        return Path(os.path.abspath(path)).is_relative_to(folder)
    except OSError:
        return False


def collect(paths: list[str], book: Path | None, forced: str | None) -> list[Submission]:
    """Every submission under ``paths`` (files, or folders searched for ``*.ipynb``), with unique
    (student, chapter) pairs: duplicates carry a ``problem`` and are not graded."""
    skip = Path(os.path.abspath(book / "executed")) if book is not None else None
    seen: dict[str, Submission] = {}
    for raw in paths:
        for path, folder_student in _found(raw, skip):
            key = os.path.abspath(path)
            if key in seen:
                continue
            student, number = identify(path, forced)
            seen[key] = Submission(path, folder_student or printable(student), number)
    groups: dict[tuple[str, str | None], list[Submission]] = {}
    for sub in seen.values():
        groups.setdefault((sub.student, sub.number), []).append(sub)
    out = []
    for (student, number), subs in groups.items():
        if len(subs) == 1:
            out.append(subs[0])
            continue
        names = ", ".join(printable(s.path) for s in subs)
        problem = (f"{len(subs)} notebooks are student {printable(student)!r}'s chapter {number or '?'} ({names}): "
                   "none was graded; keep one and grade again")
        out += [Submission(s.path, s.student, s.number, problem) for s in subs]
    return sorted(out, key=lambda s: (printable(s.student), s.number or "", printable(s.path)))
