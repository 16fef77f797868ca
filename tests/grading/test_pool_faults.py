"""``--jobs N`` when a pool process dies (issue #31): a submission that kills the process grading it
(as the OOM killer would) costs only its own rows, marked ``error`` with the reason; the classmates
are graded normally, a fresh process takes the dead one's place, and the next run grades the lost
submission again (it is not skipped as graded)."""
from __future__ import annotations

import csv
import io
import json
from contextlib import redirect_stdout
from pathlib import Path

from labsupport.paths import REPO_ROOT
from labsupport.workbook import grade
from labsupport.workbook.grading import sandbox

SOLUTION = REPO_ROOT / "solutions" / "00_orientation.ipynb"
# without namespaces the student's process can find its grader: the go-between's parent
KILL_THE_GRADER = ("import os, signal\n"
                   "_grader = int(open(f'/proc/{os.getppid()}/stat').read().rsplit(')', 1)[1].split()[1])\n"
                   "os.kill(_grader, signal.SIGKILL)\n")


def _submission(folder: Path, student: str, prepend: str = "") -> None:
    nb = json.loads(SOLUTION.read_text(encoding="utf-8"))
    for cell in nb["cells"]:
        src = "".join(cell["source"]) if isinstance(cell["source"], list) else cell["source"]
        if cell["cell_type"] == "code" and "def data_parallel_size" in src:
            cell["source"] = prepend + src
    path = folder / student / SOLUTION.name
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps(nb), encoding="utf-8")


def _grade(subs: Path, out: Path) -> tuple[int, str, dict]:
    printed = io.StringIO()
    with redirect_stdout(printed):
        status = grade.main([str(subs), "--out", str(out), "--seed", "pool", "--rounds", "1", "--jobs", "2",
                             "--no-sandbox"])
    rows: dict[str, list[dict]] = {}
    for r in csv.DictReader(out.open(encoding="utf-8")):
        rows.setdefault(r["student"], []).append(r)
    return status, printed.getvalue(), rows


def test_a_dead_pool_process_costs_only_its_own_submission(tmp_path, monkeypatch):
    monkeypatch.setenv(sandbox.SANDBOX_ENV, "none")   # the pool processes (spawned) inherit it
    sandbox.sandbox_mode.cache_clear()
    subs, out = tmp_path / "subs", tmp_path / "book" / "grades.csv"
    for student in ("alice", "bob", "carol"):
        _submission(subs, student)
    _submission(subs, "mallory", KILL_THE_GRADER)
    try:
        status, printed, rows = _grade(subs, out)
        assert status == 0, printed[-2000:]
        lost = rows["mallory"]
        assert lost and all(r["status"] == "error" and r["reason"].startswith(grade.LOST) for r in lost), lost
        assert "SIGKILL" in lost[0]["reason"]
        for student in ("alice", "bob", "carol"):   # before and after the loss, in the other process and its successor
            assert all(r["status"] == "passed" for r in rows[student]), (student, rows[student])
        feedback = (out.parent / "feedback" / "mallory__ch00.txt").read_text(encoding="utf-8")
        assert "graded again" in feedback

        status, printed, rows = _grade(subs, out)   # the next run: only the lost submission again
        assert status == 0 and "grading 1 submission(s)" in printed and "3 already in" in printed, printed[:500]
        assert all(r["status"] == "error" and r["reason"].startswith(grade.LOST) for r in rows["mallory"])
        assert all(r["status"] == "passed" for s in ("alice", "bob", "carol") for r in rows[s])
    finally:
        sandbox.sandbox_mode.cache_clear()
