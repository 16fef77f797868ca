"""One submission is one submission (issue #31): ids unique by construction, duplicates refused, and no
file, name or text a student sends stops the run — a nested or duplicated notebook, a folder named like a
notebook, a symbolic link, an unreadable file, a byte-order mark, a name that is not UTF-8, a lone
surrogate in free text, a cell built to exhaust the parser; one gradebook per folder."""
from __future__ import annotations

import csv
import json
import os
import shutil
from pathlib import Path

import pytest

from labsupport.paths import REPO_ROOT
from labsupport.workbook import grade
from labsupport.workbook.grading import exercise
from labsupport.workbook.grading.exercise import Unreadable, discover, read_submission, student_imports
from labsupport.workbook.grading.flags import static_flags
from labsupport.workbook.grading.similarity import normalise
from labsupport.workbook.grading.source import parse
from labsupport.workbook.grading import reach, sandbox, stubs
from labsupport.workbook.grading.stubs import hidden_references
from labsupport.workbook.grading.submissions import collect
from labsupport.workbook.grading.terminal import printable

EXERCISE = REPO_ROOT / "exercises" / "04_packing_and_masks.ipynb"
DEEP = "x = a" + ".b" * 100_000 + "\n"


def _put(path: Path, source: Path = EXERCISE) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    shutil.copy(source, path)
    return path


def test_a_nested_folder_is_the_top_folders_student_not_a_classmate(tmp_path):
    _put(tmp_path / "alice" / EXERCISE.name)
    _put(tmp_path / "mallory" / "alice" / EXERCISE.name)
    subs = {(s.student, s.number): s for s in collect([str(tmp_path)], None, None)}
    assert set(subs) == {("alice", "04"), ("mallory", "04")}
    assert not any(s.problem for s in subs.values())


def test_two_notebooks_for_one_student_and_chapter_are_both_refused_and_named(tmp_path):
    a = _put(tmp_path / "bob" / EXERCISE.name)
    b = _put(tmp_path / "bob" / "late" / EXERCISE.name)
    subs = collect([str(tmp_path)], None, None)
    assert [s.path for s in subs] == sorted([a, b], key=str) and {s.student for s in subs} == {"bob"}
    assert all(s.problem.startswith("2 notebooks are student 'bob''s chapter 04") and "none was graded" in s.problem
               and str(a) in s.problem and str(b) in s.problem for s in subs)


def test_the_same_file_reached_twice_counts_once_and_the_gradebooks_own_notebooks_are_passed_over(tmp_path):
    a = _put(tmp_path / "subs" / "carol" / EXERCISE.name)
    _put(tmp_path / "subs" / "executed" / "carol__ch04.ipynb")
    subs = collect([str(tmp_path / "subs"), str(a)], tmp_path / "subs", None)
    assert [(s.path, s.student, s.problem) for s in subs] == [(a, "carol", "")]


@pytest.mark.parametrize("make, says", [
    (lambda p: p.mkdir(parents=True), "a folder named like a notebook"),
    (lambda p: (p.parent.mkdir(parents=True), p.symlink_to(REPO_ROOT / "solutions" / EXERCISE.name)),
     "a symbolic link"),
])
def test_what_is_not_a_notebook_file_is_unreadable_with_a_reason(tmp_path, make, says):
    path = tmp_path / "dave" / EXERCISE.name
    make(path)
    with pytest.raises(Unreadable, match=says):
        read_submission(path)


def test_a_file_the_grader_cannot_read_is_unreadable_not_a_crash(tmp_path, monkeypatch):
    path = _put(tmp_path / "erin" / EXERCISE.name)

    def refuse(self):
        raise PermissionError(13, "Permission denied")
    monkeypatch.setattr(Path, "read_bytes", refuse)
    with pytest.raises(Unreadable, match="cannot read the file: Permission denied"):
        read_submission(path)


def test_a_byte_order_mark_is_read_as_the_notebook_it_is(tmp_path):
    path = tmp_path / "frank" / EXERCISE.name
    path.parent.mkdir()
    path.write_bytes(b"\xef\xbb\xbf" + EXERCISE.read_bytes())
    assert read_submission(path) == read_submission(EXERCISE)


def test_json_nested_too_deep_is_unreadable(tmp_path):
    path = tmp_path / "gina" / EXERCISE.name
    path.parent.mkdir()
    path.write_text("[" * 200_000 + "]" * 200_000, encoding="utf-8")
    with pytest.raises(Unreadable, match="nested too deeply"):
        read_submission(path)


def test_a_cell_built_to_exhaust_the_parser_is_no_tree_and_no_crash():
    assert parse(DEEP) is None and parse("x = 1\x00") is None and parse("def (") is None
    assert parse("x = 1") is not None
    assert static_flags(DEEP, []) == [] and normalise(DEEP)
    assert exercise._defined(DEEP) == [] and exercise._check_calls(DEEP) == []
    chapter = discover()["04"]
    assert student_imports(chapter, [{"index": 0, "id": None, "source": DEEP}], {}) == ""


def test_text_that_is_not_utf8_is_written_and_printed_with_a_replacement():
    assert printable("ok \udcff") == "ok \ufffd" and printable("한국어") == "한국어"
    assert grade.plain("x\x1b]52;c;Zm9v\x07y \ud800") == "xy \ufffd"
    text = grade._csv_text(["student", "manual_grading"], [{"student": "a\udcff", "manual_grading": "\ud800 free"}])
    assert text.encode("utf-8") and "\ufffd free" in text


def test_a_kept_function_keeps_the_references_it_calls():
    hidden, kept = hidden_references(discover()["05"])
    assert "labsupport.distributed.collectives:bus_bandwidth" in kept
    assert "labsupport.distributed.collectives:bus_factor" in kept and not set(hidden) & set(kept)
    for chapter in discover().values():             # the closure holds in every chapter
        hidden, kept = hidden_references(chapter)
        assert not reach.reached(kept) & set(hidden), chapter.key


def _run(tmp_path, subs, out, *extra):
    return grade.main([str(subs), "--out", str(out), "--no-sandbox", "--seed", "1", *extra])


def test_a_name_that_is_not_utf8_and_an_empty_notebook_are_rows_not_a_crash(tmp_path, capsys):
    subs = tmp_path / "subs"
    odd = os.fsencode(subs) + b"/h\xffi"
    os.makedirs(odd)
    (Path(os.fsdecode(odd)) / EXERCISE.name).write_bytes(b"")
    assert _run(tmp_path, subs, tmp_path / "book" / "grades.csv") == 0
    with open(tmp_path / "book" / "grades.csv", newline="", encoding="utf-8") as fh:
        rows = list(csv.DictReader(fh))
    assert rows and {r["student"] for r in rows} == {"h\ufffdi"} and {r["status"] for r in rows} == {"unreadable"}
    assert "h\ufffdi" in capsys.readouterr().out


def test_a_name_that_is_not_utf8_is_graded_once_and_two_such_names_are_one_student_reported(tmp_path, capsys):
    """The id is what the gradebook writes (U+FFFD), so a re-run skips the student; two folders that differ only
    in undecodable bytes are one id: two notebooks of one student, neither graded."""
    subs = tmp_path / "subs"
    for raw in (b"/h\xffi", b"/k\xffo", b"/k\xfeo"):
        where = Path(os.fsdecode(os.fsencode(subs) + raw))
        _put(where / EXERCISE.name)
    book = tmp_path / "book" / "grades.csv"
    assert _run(tmp_path, subs, book) == 0
    first = list(csv.DictReader(open(book, newline="", encoding="utf-8")))
    assert {r["student"] for r in first} == {"h\ufffdi", "k\ufffdo"}
    assert {r["status"] for r in first if r["student"] == "k\ufffdo"} == {"error"}
    assert all("2 notebooks are student" in r["reason"] for r in first if r["student"] == "k\ufffdo")
    capsys.readouterr()
    assert _run(tmp_path, subs, book) == 0
    again = list(csv.DictReader(open(book, newline="", encoding="utf-8")))
    assert len(again) == len(first) and "grading 0 submission" in capsys.readouterr().out


def test_one_gradebook_per_folder(tmp_path, capsys):
    subs = tmp_path / "subs"
    (subs / "ivan").mkdir(parents=True)
    (subs / "ivan" / EXERCISE.name).write_bytes(b"")
    book = tmp_path / "book"
    assert _run(tmp_path, subs, book / "grades.csv") == 0
    capsys.readouterr()
    before = {p.name: p.read_bytes() for p in book.iterdir() if p.is_file()}
    assert _run(tmp_path, subs, book / "other.csv") == 1
    err = capsys.readouterr().err
    assert err.startswith("error: ") and "already holds the gradebook grades.csv" in err and err.count("\n") == 1
    assert {p.name: p.read_bytes() for p in book.iterdir() if p.is_file() and p.suffix != ".lock"} == \
           {k: v for k, v in before.items() if not k.endswith(".lock")}
    assert json.loads((book / "grading-run.json").read_text())["gradebook"] == "grades.csv"
    assert _run(tmp_path, subs, book / "grades.csv", "--regrade") == 0   # the same gradebook again: fine


@pytest.mark.parametrize("chapter, question, spec", [
    ("01", "q1", "labsupport.datasets.bpe:merge_step"),              # called by a check helper, not the body
    ("01", "q2", "labsupport.datasets.tokenizer:tokens_per_character"),
    ("03", "q1", "labsupport.datasets.blending:reference_blending_indices"),
    ("03", "q1", "labsupport.datasets.blending_loop:sequential_steps"),   # the engine a reference runs
    ("03", "q5", "labsupport.datasets.blending_loop:sequential_steps"),
    ("03", "q1", "labsupport.datasets.blending:build_blending_indices"),  # a caller: another way to the answer
    ("04", "q2", "labsupport.datasets.bin_packing:_decreasing_fit"),      # a private helper of the reference
    ("05", "q5", "labsupport.distributed.collectives:bus_factor"),   # reached through the rule engine's `right`
    ("06", "q1", "labsupport.training.sampler:MegatronPretrainingSampler.__iter__"),   # slices with rank_slice
    ("06", "q4", "labsupport.datasets.blending:build_blending_indices"),  # chapter 3's blend, through blend_order
    ("06", "q5", "labsupport.training.data_plan:check_plan"),
])
def test_a_reference_reached_through_helpers_is_a_reference(chapter, question, spec):
    q = next(q for q in discover()[chapter].questions if q.name == question)
    assert spec in q.references, q.references


def test_references_are_the_closure_of_what_the_check_calls():
    """Each question's references, enumerated: what the check body and its labsupport.check helpers name, every
    labsupport function those call (never the plumbing), and their callers in the same module — computed, not
    listed by hand, and each one a function written in labsupport that the student's copy can strip."""
    import inspect

    for chapter in discover().values():
        assert not hasattr(chapter.module, "REFERENCES"), "references are found, not listed"
        for q in chapter.questions:
            body = inspect.unwrap(getattr(chapter.module, q.name))
            direct = reach.named(reach.code_names(body.__code__), body.__globals__)
            roots = exercise.check_roots(body)
            refs = set(q.references)
            assert direct <= roots <= refs, (chapter.key, q.name)
            assert reach.reached(roots, skip=reach.PLUMBING) <= refs and reach.callers(roots) <= refs
            assert refs == reach.reached(roots, skip=reach.PLUMBING) | reach.callers(roots)
            assert not {r for r in refs if r.startswith(reach.PLUMBING)} - roots, (chapter.key, q.name)
            for spec in refs:
                fn = reach.resolve(spec)
                assert fn is not None and spec.startswith("labsupport.") and inspect.getsourcefile(fn), spec


def test_every_hidden_reference_raises_in_the_students_copy(tmp_path):
    """What the closure finds is what the student's copy strips: each hidden function's body is gone."""
    import ast

    for number in ("03", "04", "06"):
        chapter = discover()[number]
        lib = sandbox.prepare_folder(tmp_path / number, chapter)
        hidden, _ = hidden_references(chapter)
        for spec in hidden:
            module, _, qual = spec.partition(":")
            tree = ast.parse(Path(lib, *module.split(".")).with_suffix(".py").read_text(encoding="utf-8"))
            node = stubs._find(tree, qual)
            assert node is not None and len(node.body) == 1 and isinstance(node.body[0], ast.Raise), spec


def test_a_second_grader_in_the_same_folder_is_refused_whatever_its_out(tmp_path, capsys):
    subs = tmp_path / "subs"
    (subs / "judy").mkdir(parents=True)
    (subs / "judy" / EXERCISE.name).write_bytes(b"")
    book = tmp_path / "book"
    held = grade.lock_gradebook(book / "grades.csv")      # a first grader, still running
    try:
        assert _run(tmp_path, subs, book / "other.csv") == 1
        err = capsys.readouterr().err
        assert err.startswith("error: ") and "another grader" in err and not (book / "other.csv").exists()
    finally:
        held.close()


def test_ctrl_c_with_jobs_2_prints_one_line(tmp_path):
    """Pool processes leave Ctrl-C to the grader: one line, exit 130 (or 0 if the class was done first)."""
    import signal
    import subprocess
    import sys

    subs = tmp_path / "subs"
    for name in ("kim", "lee", "min"):
        _put(subs / name / EXERCISE.name, REPO_ROOT / "solutions" / EXERCISE.name)
    cmd = [sys.executable, "-m", "labsupport", "grade", str(subs), "--out", str(tmp_path / "book" / "grades.csv"),
           "--seed", "1", "--rounds", "1", "--jobs", "2"]
    proc = subprocess.Popen(cmd, env={**os.environ, "PYTHONPATH": str(REPO_ROOT)}, cwd=tmp_path,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    for line in proc.stdout:
        if line.startswith("seed:"):
            break
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=300)
    assert proc.returncode in (0, 130), err
    lines = [l for l in err.splitlines() if l.strip() and not l.lstrip("\r").startswith("grading:")]
    if proc.returncode == 130:
        assert len(lines) == 1 and lines[0].startswith("interrupted") and "Traceback" not in err, lines


def test_a_student_id_with_a_newline_stays_on_one_summary_line():
    from labsupport.workbook.grading.terminal import one_line

    assert one_line("x\ny\tz\x1b[2J") == "x\\ny\\tz"
