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
from tests.grading.adversarial_class import (ABSTRACT, GRADER_ATTACKS, MARKER, NAME, ODD_IDS, QUESTIONS, SECRET_ENV,
                                             SOCKET, SUBSET_ENV, build_class, memory_per_submission, student_names)

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
    with pytest.MonkeyPatch.context() as env:
        for key, value in SECRET_ENV.items():   # what a leak would show (n04_env_config_reply)
            env.setenv(key, value)
        yield _grade_the_class(tmp_path_factory)


def _grade_the_class(tmp_path_factory):
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


# ------------------------------------------------------------ issue #31: attacks on the grader's own process

def _leaks(text: str) -> list[str]:
    """What must never reach a student's feedback or a row: the seed and the grader's environment."""
    secrets = {"the seed": ARGS[ARGS.index("--seed") + 1], **{k: v for k, v in SECRET_ENV.items()}}
    return [name for name, value in secrets.items() if value in text]


def _feedback(out: Path, student: str) -> str:
    return (out.parent / "feedback" / f"{grade._safe(student)}__ch03.txt").read_text(encoding="utf-8")


def test_the_grader_attacks_leak_nothing_and_name_nothing(graded):
    """N04: the config reply is literal text; N08: the blocked helper is not named; N19/A09: the student's
    own answer, not a RecursionError or "a bug in the checker"; N03: no escape reaches the terminal."""
    _need(graded, "n04_env_config_reply", "n05_helper_reference", "n18_nested_reply", "n19_huge_int",
          "n03_terminal_escapes", "n07_lone_surrogate")
    expected, rows, _, out = _unpack(graded)
    for student in (s for s in GRADER_ATTACKS if s in expected):
        text = _feedback(out, student) + "".join(r["reason"] + r["flags"] for r in rows if r["student"] == student)
        assert _leaks(text) == [], (student, _leaks(text))
    home = os.environ.get("HOME", "")
    assert len(home) < 2 or home not in _feedback(out, "n04_env_config_reply")   # ${oc.env:HOME} not resolved
    assert "sequential_steps" not in _feedback(out, "n05_helper_reference")
    reasons = {r["student"]: r["reason"] for r in rows if r["question"] == "q2"}
    assert "RecursionError" not in reasons["n18_nested_reply"] and "checker" not in reasons["n19_huge_int"]
    assert not any(c in _feedback(out, "n03_terminal_escapes") for c in "\x1b\x07")
    assert "\x1b" not in graded["printed"] and "\x07" not in graded["printed"]


def _ordinary_user() -> int:
    import pwd

    try:
        return pwd.getpwnam("learner").pw_uid
    except KeyError:
        return 65534


def _as_user(uid: int, command: list[str]) -> list[str]:
    """``command`` run by ``uid`` (setpriv). Where the Python environment lives under /root (0700: no ordinary
    user may enter it, as with pyenv), it runs in a private mount namespace in which /root holds only the
    folders this environment and checkout need, bound read-only as they are, so the user can start them."""
    import shlex

    drop = ["setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups", *command]
    needed = sorted({Path(p).relative_to("/root").parts[0] for p in (sys.base_prefix, sys.prefix, REPO_ROOT)
                     if Path(p).is_relative_to("/root") and Path(p) != Path("/root")})
    if not needed:
        return drop
    stage = "/tmp/labsupport-class-root-stage"
    binds = " && ".join(f"mkdir -p /root/{shlex.quote(n)} && mount --rbind {stage}/{shlex.quote(n)} "
                        f"/root/{shlex.quote(n)}" for n in needed)
    script = (f"mkdir -p {stage} && mount --rbind /root {stage} && mount -t tmpfs -o mode=755 tmpfs /root && "
              f"{binds} && umount -l {stage} && exec {shlex.join(drop)}")
    return ["unshare", "--mount", "--propagation", "private", "sh", "-c", script]


@pytest.fixture(scope="module")
def graded_as_user(tmp_path_factory):
    """Issue #31's attacks (and an honest classmate) graded by an ordinary user: root starts the grader as
    ``learner`` (or uid 65534) with setpriv; an ordinary user's run of the whole class above is already one."""
    import shutil
    import subprocess
    import tempfile

    if os.geteuid() != 0:
        pytest.skip("this suite runs as an ordinary user: the class above was graded as one")
    if shutil.which("setpriv") is None or shutil.which("unshare") is None:
        pytest.skip("needs setpriv and unshare (util-linux) to start the grader as an ordinary user")
    uid = _ordinary_user()
    probe = subprocess.run(_as_user(uid, [sys.executable, "-c", "import labsupport.workbook.grade"]),
                           cwd=REPO_ROOT, capture_output=True, text=True)
    if probe.returncode != 0:
        pytest.skip(f"uid {uid} cannot read this checkout or its environment ({probe.stderr.strip()[-200:]})")
    folder = Path(tempfile.mkdtemp(prefix="labsupport-class-user-"))
    try:
        folder.chmod(0o755)
        who = ["a01_correct", "e06_memory_children", *GRADER_ATTACKS]
        with pytest.MonkeyPatch.context() as env:
            env.setenv(SUBSET_ENV, ",".join(who))
            expected = build_class(folder / "submissions", folder / "book", grader_is_root=False, cgroup_memory=False)
        for owned in (folder / "book", folder / "home"):
            owned.mkdir()
            os.chown(owned, uid, uid)
        before = _fingerprint()
        out = folder / "book" / "grades.csv"
        command = [sys.executable, "-m", "labsupport", "grade", str(folder / "submissions"), "--out", str(out), *ARGS]
        run = subprocess.run(_as_user(uid, command), cwd=REPO_ROOT, capture_output=True, text=True,
                             env={**os.environ, **SECRET_ENV, "HOME": str(folder / "home")}, timeout=900)
        rows = list(csv.DictReader(out.open(encoding="utf-8"))) if out.exists() else []
        feedback = {p.name: p.read_text(encoding="utf-8") for p in (out.parent / "feedback").glob("*.txt")} \
            if out.exists() else {}
        yield {"run": run, "expected": expected, "rows": rows, "feedback": feedback, "before": before,
               "after": _fingerprint(), "uid": uid}
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def test_as_an_ordinary_user_every_attack_gets_the_honest_grade(graded_as_user):
    g = graded_as_user
    assert g["run"].returncode == 0, (g["run"].stdout[-1500:], g["run"].stderr[-1500:])
    assert "isolation: bwrap" in g["run"].stdout and f"your uid {g['uid']} on the host" in g["run"].stdout
    assert "MiB across the submission's processes" in g["run"].stdout    # no cgroup: e06's grade follows
    wrong = {}
    for student, want in g["expected"].items():
        mine = {r["question"]: r for r in g["rows"] if grade.restore(r["student"]) == student}
        got = tuple(float(mine[q]["points"]) for q in QUESTIONS) if set(mine) == set(QUESTIONS) else None
        statuses_ok = all(mine.get(q, {}).get("status") in ((s,) if isinstance(s, str) else s)
                          for q, s in want.status.items())
        flags_ok = all(text in mine.get(q, {}).get("flags", "") for q, text in want.flags.items())
        if got != tuple(float(p) for p in want.points) or not statuses_ok or not flags_ok:
            wrong[student] = {q: (r["points"], r["status"], r["reason"][:120]) for q, r in mine.items()}
    assert wrong == {}, wrong
    assert g["after"] == g["before"]
    assert "\x1b" not in g["run"].stdout + g["run"].stderr
    leaked = {name: _leaks(text) for name, text in g["feedback"].items() if _leaks(text)}
    assert leaked == {} and len(g["feedback"]) == len(g["expected"])
