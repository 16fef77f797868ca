"""The grader against a class of adversarial submissions (issues #12 and #22): every one gets the
grade an honest instructor would give, every escape attempt fails (the submission scores what its
honest code earns, and nothing outside its sandbox changed), the grader survives all of them, and
both CSVs are complete with one row per student × question however often the grader runs.

The class is generated from solutions/ and exercises/ by tests/grading/adversarial_class.py.  The escape
attempts need the bubblewrap sandbox; without it the class is not graded (the CLI refuses)."""
from __future__ import annotations

import contextlib
import csv
import hashlib
import io
import os
import socket
import sys
import sysconfig
import time
from pathlib import Path

import pytest

from labsupport.paths import REPO_ROOT
from labsupport.workbook import grade
from labsupport.workbook.grading.sandbox import sandbox_mode
from tests.grading.adversarial_class import (ABSTRACT, MARKER, NAME, ODD_IDS, QUESTIONS, SOCKET, build_class,
                                             memory_per_submission, student_names)

STUDENTS = student_names()
ARGS = ["--seed", "class-test", "--jobs", "2", "--cell-timeout", "8", "--timeout", "10", "--memory-mb", "1536"]

if sandbox_mode() != "bwrap" and os.environ.get("LABSUPPORT_REQUIRE_SANDBOX"):
    raise RuntimeError("LABSUPPORT_REQUIRE_SANDBOX is set but bubblewrap is not usable: apt-get install bubblewrap")
pytestmark = pytest.mark.skipif(sandbox_mode() != "bwrap", reason="needs bubblewrap (apt-get install bubblewrap)")


def _fingerprint() -> dict[str, str]:
    """What an escape would change: the checker, the library, the venv's top level, /etc and /root."""
    out = {}
    for p in sorted((REPO_ROOT / "labsupport").rglob("*.py")):
        out[str(p)] = hashlib.sha256(p.read_bytes()).hexdigest()
    for folder in (sysconfig.get_paths()["purelib"], sys.prefix, sys.base_prefix, "/etc", "/root", "/usr/lib"):
        try:
            out[folder] = " ".join(sorted(os.listdir(folder)))
        except OSError:
            pass
    return out


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    folder = tmp_path_factory.mktemp("class")
    book = folder / "book"
    expected = build_class(folder / "submissions", book)
    classmate = folder / "submissions" / "a01_correct" / NAME
    before, classmate_before = _fingerprint(), classmate.read_bytes()
    out = book / "grades.csv"
    listeners = []
    with contextlib.suppress(OSError):
        os.unlink(SOCKET)
    for address in (SOCKET, "\0" + ABSTRACT):  # host sockets the students try to reach
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.bind(address)
        s.listen(8)
        listeners.append(s)
    started = time.monotonic()
    printed = io.StringIO()
    try:
        with contextlib.redirect_stdout(printed):
            status = grade.main([str(folder / "submissions"), "--out", str(out), *ARGS])
    finally:
        for s in listeners:
            s.close()
        with contextlib.suppress(OSError):
            os.unlink(SOCKET)
    print(f"\ngraded a class of {len(expected)} chapter-3 submissions in {time.monotonic() - started:.1f} s")
    assert status == 0, printed.getvalue()[-2000:]
    rows = list(csv.DictReader(out.open(encoding="utf-8")))
    summary = list(csv.DictReader(out.with_name("summary.csv").open(encoding="utf-8")))
    again = io.StringIO()
    with contextlib.redirect_stdout(again):  # a second run: every student already graded, none twice
        assert grade.main([str(folder / "submissions"), "--out", str(out), *ARGS]) == 0
    return {"expected": expected, "rows": rows, "summary": summary, "out": out, "printed": printed.getvalue(),
            "again": again.getvalue(), "before": before, "after": _fingerprint(),
            "classmate": (classmate_before, classmate.read_bytes())}


def test_escapes_changed_nothing_outside_the_sandbox(graded):
    assert graded["after"] == graded["before"]
    assert graded["classmate"][0] == graded["classmate"][1]
    assert not any(Path(f, "zz_labsupport_adversary.pth").exists() for f in ("/etc", "/root", sys.prefix))


def test_the_header_says_what_is_enforced(graded):
    head = graded["printed"].split("seed:")[0]
    assert "isolation: bwrap" in head and "memory:" in head and "processes:" in head and "disk:" in head
    # e06_memory_children's expected grade follows this line: bounded, or per process only
    per_submission = "for the whole submission" in next(x for x in head.splitlines() if x.startswith("memory:"))
    assert per_submission == memory_per_submission()


def test_a_second_run_grades_nobody_twice(graded):
    rows = list(csv.DictReader(graded["out"].open(encoding="utf-8")))
    keys = [(grade.restore(r["student"]), r["question"]) for r in rows]
    assert len(keys) == len(set(keys)) == len(graded["rows"])
    assert "grading 0 submission" in graded["again"]
    assert {grade.restore(r["student"]) for r in rows} == set(graded["expected"])


def test_odd_ids_keep_their_own_files_and_print_no_escapes(graded):
    out = graded["out"]
    names = {p.name for p in (out.parent / "feedback").iterdir()}
    assert len(names) == len(graded["expected"])
    assert "\x1b" not in graded["printed"] and "\x1b" not in graded["again"]
    for odd in (i for i in ODD_IDS if i in graded["expected"]):
        assert f"{grade._safe(odd)}__ch03.txt" in names, odd


def _need(graded, *students):
    missing = [s for s in students if s not in graded["expected"]]
    if missing:
        pytest.skip(f"not in this run's subset of the class: {missing}")


def _unpack(graded):
    rows = [{**r, "student": grade.restore(r["student"])} for r in graded["rows"]]
    summary = [{**r, "student": grade.restore(r["student"])} for r in graded["summary"]]
    return graded["expected"], rows, summary, graded["out"]


def test_every_student_and_question_has_a_row(graded):
    expected, rows, summary, _ = _unpack(graded)
    assert list(rows[0]) == grade.FIELDS
    got = {(r["student"], r["question"]) for r in rows}
    assert got == {(s, q) for s in expected for q in QUESTIONS}
    assert len(rows) == len(got)
    assert {r["student"] for r in summary} == set(expected)
    assert all(r["max_points"] == "5" and r["chapter"] == "ch03" for r in summary)


@pytest.mark.parametrize("student", STUDENTS)
def test_the_honest_grade(graded, student):
    expected, rows, summary, _ = _unpack(graded)
    want = expected[student]
    mine = {r["question"]: r for r in rows if r["student"] == student}
    got = tuple(float(mine[q]["points"]) for q in QUESTIONS)
    timed_out = any(mine[q]["status"] == "timed out" for q in QUESTIONS)
    if want.if_timed_out is not None and timed_out and got == tuple(float(p) for p in want.if_timed_out):
        return  # a time limit fired first on a loaded machine: also the honest grade
    assert got == tuple(float(p) for p in want.points), {
        q: (mine[q]["status"], mine[q]["reason"][:160]) for q in QUESTIONS}
    for q, status in want.status.items():
        assert mine[q]["status"] in ((status,) if isinstance(status, str) else status), (q, mine[q]["reason"])
    for q, text in want.flags.items():
        assert text in mine[q]["flags"], (q, mine[q]["flags"])
    for q, text in want.reason.items():
        assert text in mine[q]["reason"], (q, mine[q]["reason"])
    total = next(r for r in summary if r["student"] == student)
    assert float(total["points"]) == sum(want.points)


def test_unflagged_honest_answers_carry_no_flags(graded):
    _, rows, _, _ = _unpack(graded)
    _need(graded, "a01_correct", "a02_untouched", "a03_partial", "a29_markers_rewritten")
    for student in ("a01_correct", "a02_untouched", "a03_partial", "a29_markers_rewritten"):
        assert not any(r["flags"] for r in rows if r["student"] == student), student


def test_the_repository_is_left_as_it_was(graded):
    assert not MARKER.exists()


def test_similar_answers_are_listed(graded):
    *_, out = _unpack(graded)
    _need(graded, "a01_correct", "a31_near_copy")
    pairs = list(csv.DictReader(out.with_name("similarity.csv").open(encoding="utf-8")))
    assert any({p["student_a"], p["student_b"]} == {"a01_correct", "a31_near_copy"} and p["question"] == "q1"
               for p in pairs)
    assert any({p["student_a"], p["student_b"]} == {"a31_near_copy", "solutions/"} and p["question"] == "q1"
               for p in pairs), "copying from solutions/ is listed"
    _need(graded, "a32_no_op_copy")
    assert any({p["student_a"], p["student_b"]} == {"a32_no_op_copy", "solutions/"} and p["question"] == "q1"
               and float(p["similarity"]) == 1.0 for p in pairs), "no-op lines hide nothing"


def test_feedback_and_executed_notebooks_are_kept(graded):
    *_, out = _unpack(graded)
    _need(graded, "a26_hard_coded", "a19_reference_function", "a01_correct", "a27_huge_output")
    feedback = (out.parent / "feedback" / "a26_hard_coded__ch03.txt").read_text(encoding="utf-8")
    assert "❌ q1 failed" in feedback and "hint:" in feedback and "✅ q2 passed" in feedback
    flagged = (out.parent / "feedback" / "a19_reference_function__ch03.txt").read_text(encoding="utf-8")
    assert "review" in flagged and "reference" not in flagged.split("review")[-1]  # no detector named
    assert (out.parent / "executed" / "a01_correct__ch03.ipynb").is_file()
    huge = (out.parent / "executed" / "a27_huge_output__ch03.ipynb").stat().st_size
    assert huge < 200_000
