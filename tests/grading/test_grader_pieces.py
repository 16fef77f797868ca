"""The grading machinery piece by piece: plain-data codec, static flags, similarity, the CSV
guards, student ids, the sandbox without namespaces, Ctrl-C and --regrade."""
from __future__ import annotations

import csv
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from labsupport.paths import REPO_ROOT
from labsupport.workbook import grade
from labsupport.workbook.grading import codec, sandbox
from labsupport.workbook.grading.exercise import discover
from labsupport.workbook.grading.flags import static_flags
from labsupport.workbook.grading.grader import Options, grade_file, identify
from labsupport.workbook.grading.similarity import MIN_TOKENS, SHORT, normalise, similar_pairs, token_count
from labsupport.workbook.grading.submissions import collect


def roundtrip(value):
    return codec.decode(json.loads(json.dumps(codec.encode(value))))


def test_codec_keeps_types_that_checks_test():
    value = {"t": (1, 2.5, None, True), 3: [np.int64(7), np.float32(1.5)], ("k", 1): {"s", "t"},
             "a": np.arange(6, dtype=np.uint16).reshape(2, 3), "b": b"\x00MMIDIDX", "big": 2**70, "nan": float("inf")}
    back = roundtrip(value)
    assert back.keys() == value.keys() and back["t"] == (1, 2.5, None, True)
    assert type(back[3][0]) is np.int64 and type(back[3][1]) is np.float32
    assert back["a"].dtype == np.uint16 and back["a"].shape == (2, 3) and np.array_equal(back["a"], value["a"])
    assert back["b"] == value["b"] and back["big"] == 2**70 and back["nan"] == float("inf")
    assert roundtrip(range(4)) == [0, 1, 2, 3] and roundtrip(x for x in "ab") == ["a", "b"]


def test_codec_carries_omegaconf_configs_as_plain_containers():
    from omegaconf import DictConfig, OmegaConf
    cfg = OmegaConf.create({"trainer": {"devices": 8}, "model": {"micro_batch_size": 2, "prefix": [0.6, "web"]}})
    back = roundtrip(cfg)
    assert isinstance(back, DictConfig) and back.trainer.devices == 8 and list(back.model.prefix) == [0.6, "web"]
    with pytest.raises(codec.EncodeError, match="dict or a list"):
        codec.decode({"$t": "omegaconf", "v": 3})


def test_codec_strips_a_students_methods():
    class Always(int):
        def __eq__(self, other):
            return True
        __hash__ = int.__hash__

    class Thing:
        def __eq__(self, other):
            return True

    back = roundtrip([Always(3), Thing()])
    assert type(back[0]) is int and back[0] == 3 and back[0] != 4
    assert isinstance(back[1], codec.Opaque) and back[1] != 1 and "Thing" in repr(back[1])


def test_write_back_shows_mutation_of_arguments():
    ids, arr = [1, 2, 3], np.zeros(3)
    codec.write_back(ids, [9])
    codec.write_back(arr, np.ones(3))
    assert ids == [9] and arr.tolist() == [1, 1, 1]


@pytest.mark.parametrize("source, flag", [
    ("import labsupport.check._core as c", "check-module"),
    ("x = check._EFFECTS", "check-module"),
    ("for g in range(9):\n    check.q4(lambda: g)", "oracle"),
    ("import sys\nf = sys._getframe(1).f_locals['want']", "frames"),
    ("import inspect\ninspect.stack()", "frames"),
    ("import os, signal\nos.kill(os.getppid(), signal.SIGKILL)", "signals"),
    ("from labsupport.datasets.blending import greedy_step as g", "reference"),
    ("import labsupport.datasets.blending as B\ndef greedy_step(w, c, s):\n    return B.greedy_step(w, c, s)",
     "reference"),
])
def test_static_flags(source, flag):
    flags = static_flags(source, ["labsupport.datasets.blending:greedy_step"])
    assert any(f.startswith(flag) for f in flags), flags


def test_honest_code_is_not_flagged():
    src = "import numpy as np\nprint(check.EXERCISE_2_EFFECTS)\ndef greedy_step(w, c, s):\n    return int(np.argmax(w))"
    assert static_flags(src, ["labsupport.datasets.blending:greedy_step"]) == []


def test_similarity_ignores_names_comments_and_layout():
    a = "def f(xs):\n    # sum them\n    total = 0\n    for x in xs:\n        total += x\n    return total\n"
    b = "def g(values):\n    '''doc'''\n    acc=0\n    for v in values:  # loop\n        acc += v\n    return acc"
    assert normalise(a) == normalise(b)
    pairs = similar_pairs({("ann", "ch03"): {"q1": a}, ("bob", "ch03"): {"q1": b},
                           ("cid", "ch03"): {"q1": "def f(xs):\n    return sum(sorted(xs)[::-1])\n\n\n"
                                                   "print(1)\nprint(2)"}})
    assert [(p.student_a, p.student_b, p.similarity) for p in pairs] == [("ann", "bob", 1.0)]


def test_csv_cells_cannot_be_formulas():
    assert grade.neutralise("=HYPERLINK(\"x\")") == "'=HYPERLINK(\"x\")"
    assert [grade.neutralise(v) for v in ("+1", "-1", "@x", "ok", 3)] == ["'+1", "'-1", "'@x", "ok", 3]


@pytest.mark.parametrize("student", ["-bob", "=1+1", "+x", "@y", "'-bob", "''", "'", "plain", "a b", "\tx"])
def test_protected_ids_read_back_as_the_same_student(student):
    assert grade.restore(grade.neutralise(student)) == student
    assert grade.neutralise(student)[:1] not in "=+-@\t\r" or student == ""


def test_distinct_ids_get_distinct_file_names():
    ids = ["a b", "a_b", "a/b", "l" * 100, "l" * 101, "-bob", "bob", "Ünï", "a~b", "evil\x1b[31m"]
    names = [grade._safe(i) for i in ids]
    assert len(set(names)) == len(ids), names
    assert grade._safe("alice") == "alice" and all(len(n) <= 80 and "/" not in n for n in names)
    assert not any(n.startswith("-") for n in names)


def test_printed_text_has_no_terminal_escapes():
    assert grade.plain("evil\x1b[31mred\x1b]0;title\x07\x9b\x1bc") == "evilredc"
    assert grade.plain("a\tb\nc") == "a\tb\nc"


def test_a_second_grader_on_the_same_gradebook_is_refused(tmp_path, capsys):
    out = tmp_path / "book" / "grades.csv"
    held = grade.lock_gradebook(out)
    try:
        sub = _submission(tmp_path, "s0", "")
        assert grade.main([str(sub), "--out", str(out), "--seed", "1", "--no-sandbox"]) == 1
        err = capsys.readouterr().err
        assert err.startswith("error: ") and "another grader" in err and not out.exists()
    finally:
        held.close()


def test_without_a_sandbox_the_grader_refuses_unless_told(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv(sandbox.SANDBOX_ENV, "none")
    sandbox.sandbox_mode.cache_clear()
    try:
        sub = _submission(tmp_path, "s0", "")
        assert grade.main([str(sub), "--out", str(tmp_path / "b" / "grades.csv"), "--seed", "1"]) == 1
        assert "--no-sandbox" in capsys.readouterr().err and not (tmp_path / "b" / "grades.csv").exists()
    finally:
        sandbox.sandbox_mode.cache_clear()


def test_a_reply_with_too_many_values_is_refused_before_decoding(tmp_path):
    worker = sandbox.Worker(tmp_path, sandbox.Limits(reply_values=1000), mode="none")
    r, w = os.pipe()
    data = b"[" + b"0," * 5000 + b"0]"
    os.write(w, sandbox._HEADER.pack(len(data)) + data)
    worker._from = r
    with pytest.raises(sandbox.WorkerDied, match="over 1000 values"):
        worker.receive(5)
    os.close(w)


def test_nbformat_3_and_large_notebooks_are_read(tmp_path):
    import nbformat

    from labsupport.workbook.grading.exercise import read_submission

    nb4 = nbformat.read(REPO_ROOT / "solutions" / "00_orientation.ipynb", as_version=4)
    v3 = tmp_path / "v3.ipynb"
    v3.write_text(nbformat.writes(nbformat.convert(nbformat.from_dict(json.loads(json.dumps(nb4))), 3), version=3),
                  encoding="utf-8")
    cells = read_submission(v3)
    assert any("def memory_gb" in c["source"] for c in cells)
    nb4.cells[0].outputs = [nbformat.v4.new_output("display_data", data={"image/png": "A" * (24 << 20)})]
    big = tmp_path / "big.ipynb"
    nbformat.write(nb4, big)
    assert big.stat().st_size > 20 << 20 and any("def memory_gb" in c["source"] for c in read_submission(big))


def test_the_students_copy_holds_no_check_code_and_no_reference(tmp_path):
    from labsupport.workbook.grading.stubs import hidden_references

    chapter = discover()["03"]
    lib = sandbox.prepare_folder(tmp_path, chapter)
    stub = (lib / "labsupport" / "check" / "ch03.py").read_text(encoding="utf-8")
    assert not (lib / "labsupport" / "check" / "_core.py").exists()
    assert not (lib / "labsupport" / "check" / "texts").exists(), "no feedback text (model answers) for the student"
    assert not (lib / "labsupport" / "check" / "sealed.toml").exists(), "no answer key for the student"
    assert "EXERCISE_2_EFFECTS" in stub and "MODEL_ANSWER" not in stub and "Sealed" not in stub
    hidden, kept = hidden_references(chapter)
    assert "labsupport.datasets.blending:greedy_step" in hidden and not kept
    code = [sys.executable, "-I", "-c", "import sys; sys.path.insert(0, sys.argv[1]);"
            "from labsupport.datasets.blending import greedy_step; greedy_step([1.0], [0], 0)", str(lib)]
    run = subprocess.run(code, capture_output=True, text=True)
    assert run.returncode == 1 and "not available while grading" in run.stderr
    assert "greedy_step" not in run.stderr.splitlines()[-1], "the message names no function a sibling could replace"


@pytest.mark.skipif(sandbox.sandbox_mode() != "bwrap", reason="needs bubblewrap")
def test_the_sandbox_drops_every_privilege(tmp_path):
    """Whoever runs the grader (root in CI): uid 65534, no capabilities, no_new_privs, no network,
    no nested user namespace, a read-only file system (/dev too) but for the private home, /tmp and /dev/shm."""
    sandbox.prepare_folder(tmp_path)
    worker = sandbox.Worker(tmp_path, sandbox.Limits())
    worker.start()
    probe = ("import os, socket, subprocess\n"
             "status = dict(l.split(':\\t', 1) for l in open('/proc/self/status').read().splitlines() if ':\\t' in l)\n"
             "print(status['Uid'].split()[0], status['CapEff'].strip(), status['NoNewPrivs'].strip())\n"
             "print(subprocess.run(['unshare', '-U', 'true'], capture_output=True).returncode != 0)\n"
             "for d in ('/', '/etc', '/usr', '/grading/lib', os.path.expanduser('~'), '/tmp', '/dev/shm',\n"
             "          '/dev'):\n"
             "    try:\n        open(os.path.join(d, 'probe'), 'w').close(); print(d, 'rw')\n"
             "    except OSError:\n        print(d, 'ro')\n")
    try:
        assert worker.request({"op": "init"}, 30)["ok"]
        reply = worker.request({"op": "exec", "cell": 0, "source": probe}, 60)
    finally:
        worker.kill()
    lines = reply["output"].split("\n")
    assert lines[0] == f"{sandbox.SANDBOX_UID} 0000000000000000 1" and lines[1] == "True", reply
    assert lines[2:10] == ["/ ro", "/etc ro", "/usr ro", "/grading/lib ro", "/grading/home rw", "/tmp rw",
                           "/dev/shm rw", "/dev ro"]


def test_student_and_chapter_from_the_path():
    assert identify(Path("subs/alice/03_blending.ipynb"), None) == ("alice", "03")
    assert identify(Path("subs/bob.ipynb"), "04") == ("bob", "04")
    assert identify(Path("subs/carol_03_blending.ipynb"), None) == ("carol_03_blending", "03")


def test_chapters_are_discovered_from_exercises_and_checks():
    chapters = discover()
    assert sorted(chapters) == sorted(p.name[:2] for p in (REPO_ROOT / "exercises").glob("[0-9][0-9]_*.ipynb"))
    for ch in chapters.values():
        assert ch.questions and all(q.cells for q in ch.questions), ch.key
        assert ch.key == ch.module.CHAPTER


def _submission(tmp_path: Path, name: str, prepend: str) -> Path:
    nb = json.loads((REPO_ROOT / "solutions" / "00_orientation.ipynb").read_text(encoding="utf-8"))
    for cell in nb["cells"]:
        src = "".join(cell["source"]) if isinstance(cell["source"], list) else cell["source"]
        if cell["cell_type"] == "code" and "def data_parallel_size" in src:
            cell["source"] = prepend + "\n" + src
    path = tmp_path / name / "00_orientation.ipynb"
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps(nb), encoding="utf-8")
    return path


def test_without_namespaces_the_grader_still_survives_its_parent_being_killed(tmp_path, monkeypatch):
    """No unshare/bwrap: a go-between process is the student's parent, so killing it spares the grader."""
    monkeypatch.setenv(sandbox.SANDBOX_ENV, "none")
    sandbox.sandbox_mode.cache_clear()
    try:
        assert sandbox.sandbox_mode() == "none" and "NONE" in sandbox.sandbox_note()
        path = _submission(tmp_path, "mallory", "import os, signal\nos.kill(os.getppid(), signal.SIGKILL)")
        graded = grade_file(path, discover(), Options(seed="t", rounds=1))
    finally:
        sandbox.sandbox_mode.cache_clear()
    assert [r.question for r in graded.rows] == ["q1", "q2", "q3", "q4"]  # we are still here to read them
    assert all(r.points == 0 and any(f.startswith("signals") for f in r.flags) for r in graded.rows)


def test_repository_guard_restores_and_reports(tmp_path):
    guard = grade.RepoGuard()
    marker = REPO_ROOT / "labsupport" / "_guard_test_marker.py"
    marker.write_text("x = 1\n")
    try:
        assert guard.restore() == ["labsupport/_guard_test_marker.py"]
    finally:
        marker.unlink(missing_ok=True)
    assert not marker.exists() and guard.restore() == []


def test_regrade_and_interrupt(tmp_path):
    """A second run skips graded students unless --regrade; Ctrl-C exits 130 with the rows so far."""
    subs = [_submission(tmp_path, f"s{i}", "") for i in range(3)]
    out = tmp_path / "book" / "grades.csv"
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    cmd = [sys.executable, "-m", "labsupport", "grade", str(subs[0]), "--out", str(out), "--seed", "1", "--rounds", "1"]
    assert subprocess.run(cmd, env=env, cwd=tmp_path, capture_output=True, text=True).returncode == 0
    again = subprocess.run(cmd, env=env, cwd=tmp_path, capture_output=True, text=True)
    assert "1 already in grades.csv" in again.stdout and "grading 0 submission" in again.stdout
    rerun = [sys.executable, "-m", "labsupport", "grade", str(tmp_path), "--out", str(out), "--seed", "1",
             "--rounds", "1", "--regrade"]
    proc = subprocess.Popen(rerun, env=env, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    for line in proc.stdout:  # interrupt once the re-run has started grading
        if line.startswith("seed:"):
            break
    time.sleep(1.0)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode in (0, 130), err
    if proc.returncode == 130:
        assert "interrupted" in err and "Traceback" not in err
    rows = list(csv.DictReader(out.open(encoding="utf-8")))
    assert {r["student"] for r in rows} >= {"s0"} and all(r["question"] for r in rows)
    assert {r["student"] for r in rows} <= {"s0", "s1", "s2"}  # never the gradebook's executed/ copies
    assert [s.path for s in collect([str(tmp_path)], out.parent, None)] == sorted(subs)


def test_honest_habits_are_not_punished(tmp_path):
    """An import added to the notebook's first cell is kept; a check line left in an answer cell
    is neither an oracle nor a problem."""
    nb = json.loads((REPO_ROOT / "solutions" / "00_orientation.ipynb").read_text(encoding="utf-8"))
    code = [c for c in nb["cells"] if c["cell_type"] == "code"]
    code[0]["source"] = "".join(code[0]["source"]) + "\nimport math as _m"
    for cell in code:
        src = "".join(cell["source"]) if isinstance(cell["source"], list) else cell["source"]
        if "def memory_gb" in src:
            cell["source"] = ("def memory_gb(n_params, method, dp=1):\n"
                              "    return _m.fsum([n_params * {'bf16_weights': 2, 'megatron_adam': 18, "
                              "'megatron_distopt': 6 + 12 / dp}[method] / 1e9])\n"
                              "\ncheck.q2(memory_gb)\n")
    path = tmp_path / "honest" / "00_orientation.ipynb"
    path.parent.mkdir()
    path.write_text(json.dumps(nb), encoding="utf-8")
    graded = grade_file(path, discover(), Options(seed="t", rounds=1))
    assert [(r.question, r.status, r.flags) for r in graded.rows] == [
        ("q1", "passed", []), ("q2", "passed", []), ("q3", "passed", []), ("q4", "passed", [])]


def _with_memory_gb(tmp_path: Path, folder: str, source: str) -> Path:
    """solutions/00 as a submission in ``tmp_path/folder`` whose memory_gb answer cell is ``source``."""
    nb = json.loads((REPO_ROOT / "solutions" / "00_orientation.ipynb").read_text(encoding="utf-8"))
    for cell in nb["cells"]:
        src = "".join(cell["source"]) if isinstance(cell["source"], list) else cell["source"]
        if cell["cell_type"] == "code" and "def memory_gb" in src:
            cell["source"] = source
    path = tmp_path / folder / "00_orientation.ipynb"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(nb), encoding="utf-8")
    return path


def test_the_students_process_has_no_network(tmp_path):
    """With namespaces the student's code cannot reach even this machine's loopback."""
    import socket

    if sandbox.sandbox_mode() == "none":
        pytest.skip("no sandbox on this machine: the header of a grading run says so")
    server = socket.create_server(("127.0.0.1", 0))
    port = server.getsockname()[1]
    probe = (f"import socket\ntry:\n    socket.create_connection(('127.0.0.1', {port}), timeout=2).close()\n"
             "    _reached = True\nexcept OSError:\n    _reached = False\n")
    path = _with_memory_gb(tmp_path, "net", probe + ("def memory_gb(n_params, method, dp=1):\n"
                                                     "    assert not _reached, 'the network was reachable'\n"
                                                     "    return n_params * {'bf16_weights': 2, 'megatron_adam': 18, "
                                                     "'megatron_distopt': 6 + 12 / dp}[method] / 1e9\n"))
    try:
        graded = grade_file(path, discover(), Options(seed="t", rounds=1))
    finally:
        server.close()
    q2 = next(r for r in graded.rows if r.question == "q2")
    assert q2.status == "passed", q2.reason


@pytest.mark.parametrize("mode", ["bwrap"])
def test_sandbox_keeps_the_repository_and_other_students_read_only(tmp_path, monkeypatch, mode):
    """In the sandbox the student's code can write its own folder only: the repository and the
    submissions folder are not even there."""
    monkeypatch.setenv(sandbox.SANDBOX_ENV, mode)
    sandbox.sandbox_mode.cache_clear()
    try:
        if sandbox.sandbox_mode() != mode:
            pytest.skip(f"{mode} is not usable on this machine")
        other = tmp_path / "subs" / "bob" / "00_orientation.ipynb"
        other.parent.mkdir(parents=True)
        other.write_text("{}", encoding="utf-8")
        marker = REPO_ROOT / "labsupport" / "_sandbox_test_marker.py"
        probe = ("import os, pathlib, signal\n_written = []\n"
                 f"for target in ({str(marker)!r}, {str(other)!r}, 'mine.txt'):\n"
                 "    try:\n        pathlib.Path(target).write_text('x')\n        _written.append(target)\n"
                 "    except OSError:\n        pass\n")
        path = _with_memory_gb(tmp_path, "subs/eve", probe + ("def memory_gb(n_params, method, dp=1):\n"
                                                              "    assert _written == ['mine.txt'], _written\n"
                                                              "    return n_params * {'bf16_weights': 2, "
                                                              "'megatron_adam': 18, 'megatron_distopt': 6 + 12 / dp}"
                                                              "[method] / 1e9\n"))
        graded = grade_file(path, discover(), Options(seed="t", rounds=1, protect=(tmp_path / "subs",)))
    finally:
        sandbox.sandbox_mode.cache_clear()
        (REPO_ROOT / "labsupport" / "_sandbox_test_marker.py").unlink(missing_ok=True)
    q2 = next(r for r in graded.rows if r.question == "q2")
    assert q2.status == "passed", q2.reason
    assert other.read_text(encoding="utf-8") == "{}"


def test_the_sandbox_binds_the_environment_in_use_whatever_its_name(tmp_path, monkeypatch):
    """A checkout's virtualenv for another Python (``.venv-3.12``, as ``make test PYTHON=python3.12``
    builds it) is bound into the sandbox; the rest of the checkout is not (found by a CI run: only
    ``.venv`` was recognised, so every 3.12 student process failed to start)."""
    import sys as _sys

    from labsupport.workbook.grading import sandbox

    repo = tmp_path / "repo"
    venv = repo / ".venv-3.12"
    site = venv / "lib" / "python3.12" / "site-packages"
    site.mkdir(parents=True)
    (repo / "solutions").mkdir()
    monkeypatch.setattr(sandbox, "REPO_ROOT", repo)
    monkeypatch.setattr(_sys, "prefix", str(venv))
    monkeypatch.setattr(_sys, "path", [str(site), str(repo), str(repo / "solutions")])
    roots = sandbox._python_roots()
    assert str(venv.resolve()) in roots
    assert not any(r == str(repo.resolve()) or r.startswith(str((repo / "solutions").resolve())) for r in roots)


def test_no_op_lines_do_not_hide_a_copied_answer():
    copied = ("def f(xs, lo, hi):\n    total = 0\n    for x in xs:\n        if lo <= x < hi:\n"
              "            total += x * x - lo\n        elif x >= hi:\n            total -= (x - hi) // 2\n"
              "    return total, len(xs)\n")
    padded = ("def g(values, a, b):\n    _unused = None\n    acc = 0\n    'note'\n    for v in values:\n"
              "        if a <= v < b:\n            acc += v * v - a\n            pass\n        elif v >= b:\n"
              "            acc -= (v - b) // 2\n        _x = acc\n    _y: int = 3\n    return acc, len(values)\n"
              "_z = 1\n")
    assert token_count(normalise(copied)) >= MIN_TOKENS     # long enough to be scored, not only matched
    assert normalise(copied) == normalise(padded)
    # an assignment somebody reads is kept, and so is a call (it has an effect)
    assert len(normalise("a = 1\nprint(a)")) == 2 and len(normalise("f()\nx = None")) == 1
    pairs = similar_pairs({("ann", "ch03"): {"q1": copied}, ("bob", "ch03"): {"q1": padded}})
    assert [(p.student_a, p.student_b, p.similarity, p.note) for p in pairs] == [("ann", "bob", 1.0, "")]


def test_short_answers_are_compared_for_identity_and_marked_short_canonical():
    one = "def f(w):\n    return int(np.argmax(w))\n"
    pairs = similar_pairs({("ann", "ch03"): {"q1": one}, ("bob", "ch03"): {"q1": one.replace("w", "x")},
                           ("cid", "ch03"): {"q1": "def f(w):\n    return int(np.argmin(w))\n"}})
    found = [(p.student_a, p.student_b, p.similarity, p.note) for p in pairs]
    assert found == [("ann", "bob", 1.0, "short, canonical")]


def _solution_tokens() -> dict[tuple[str, str], int]:
    from labsupport.workbook.grading.grader import solution_answers

    return {(number, q): token_count(normalise(src)) for number, chapter in discover().items()
            for q, src in solution_answers(chapter).items() if src}


def test_the_short_threshold_is_measured_on_the_shortest_solutions():
    """docs/grading.md: the six shortest computed answers in solutions/ fall under MIN_TOKENS (24–50 tokens), the
    shortest with control flow of its own (ch00 q1) does not."""
    tokens = _solution_tokens()
    short = [("04", "q1"), ("06", "q1"), ("03", "q2"), ("01", "q2"), ("00", "q3"), ("02", "q2")]
    assert [tokens[k] for k in short] == sorted(tokens[k] for k in short) and tokens[short[0]] == 24
    assert max(tokens[k] for k in short) < MIN_TOKENS <= tokens[("00", "q1")], tokens


def test_similarity_csv_marks_a_short_canonical_pair_and_scores_a_long_copy(tmp_path):
    """Two students and solutions/ give chapter 4's one-line padding_share independently: listed only as identical,
    note "short, canonical"; a near-identical short answer is not listed; a long copy is scored with no note."""
    one = "def padding_share(lengths, seq_length):\n    return 1 - sum(lengths) / (len(lengths) * seq_length)\n"
    near = "def padding_share(lengths, seq_length):\n    return 1 - sum(lengths) / len(lengths) / seq_length\n"
    long_a = ("def f(xs, lo, hi):\n    total = 0\n    for x in xs:\n        if lo <= x < hi:\n"
              "            total += x * x - lo\n        elif x >= hi:\n            total -= (x - hi) // 2\n"
              "    return total, len(xs)\n")
    answers = {("ann", "ch04"): {"q1": one, "q2": long_a}, ("bob", "ch04"): {"q1": one.replace("lengths", "ls"),
                                                                           "q2": long_a.replace("total", "acc")},
               ("cid", "ch04"): {"q1": near}}
    out = tmp_path / "grades.csv"
    grade._write_similarity(out, answers, {}, 0.9)
    rows = list(csv.DictReader(out.with_name("similarity.csv").open(encoding="utf-8")))
    assert [(r["question"], r["student_a"], r["student_b"], r["similarity"], r["note"]) for r in rows] == [
        ("q1", "ann", "bob", "1.000", SHORT), ("q2", "ann", "bob", "1.000", "")]


def test_a_config_reply_is_literal_text_in_the_grader(monkeypatch):
    """N04: an interpolation a student sends is never resolved with the grader's environment."""
    monkeypatch.setenv("LABSUPPORT_CHECK_SEED", "the-secret-seed")
    cfg = codec.decode({"$t": "omegaconf", "v": {"$t": "list", "v": ["${oc.env:LABSUPPORT_CHECK_SEED}", "a${x}"]}})
    assert "the-secret-seed" not in repr(list(cfg)) and "the-secret-seed" not in str(cfg)
    assert list(cfg) == ["${oc.env:LABSUPPORT_CHECK_SEED}", "a${x}"]


@pytest.mark.parametrize("shape", [[2 ** 40, 0], [0, 2 ** 40], [4000, 4000, 0, 1], [-1], [1.5], "x"])
def test_an_array_reply_that_would_build_unbounded_lists_is_refused(shape):
    """N11: a 16-byte reply np.empty((2**40, 0)) would make 2^40 lists in a failure message."""
    with pytest.raises(codec.EncodeError):
        codec.decode({"$t": "nd", "dtype": "<f8", "shape": shape, "data": ""})
    assert codec.decode({"$t": "nd", "dtype": "<f8", "shape": [3, 0], "data": ""}).shape == (3, 0)


def test_a_reply_nested_too_deep_is_refused_not_a_recursion_error():
    deep: object = 1
    for _ in range(codec.MAX_DEPTH + 5):
        deep = {"$t": "list", "v": [deep]}
    with pytest.raises(codec.EncodeError, match="nested too deeply"):
        codec.decode(deep)


def test_text_with_a_lone_surrogate_travels_and_an_integer_no_float_holds_is_refused():
    """N10: a free-text answer with a lone surrogate arrives with U+FFFD (JSON in UTF-8 cannot hold it);
    A09: 10**400 is refused as the student's value before a check converts it to a float."""
    assert roundtrip("why \ud800 it holds \udcff") == "why \ufffd it holds \ufffd"
    assert roundtrip(["\ud800"]) == ["\ufffd"] and roundtrip("한국어") == "한국어"
    assert roundtrip(10**300) == 10**300 and roundtrip(-(10**300)) == -(10**300)
    with pytest.raises(codec.EncodeError, match="an integer of 401 digits"):
        roundtrip(10**400)


def test_a_reply_the_grader_refuses_is_the_students_error_not_the_checkers():
    """What the student's function returned and the grader cannot rebuild is blamed on the student's code."""
    from labsupport.check import _core
    from labsupport.workbook.grading import grader

    class _Worker:
        def request(self, message, timeout):
            return {"ok": True, "output": "", "warnings": [], "args": codec.encode([]),
                    "result": {"$t": "nd", "dtype": "<f8", "shape": [2 ** 40, 0], "data": ""}}

    class _Session:
        echo, call_output, submission_deadline = 0, {}, float("inf")

        def worker_ready(self):
            return _Worker()
    remote = grader._Remote(_Session(), "epochs", "q2", float("inf"))
    with pytest.raises(TypeError) as caught:
        remote()
    said = _core.blame(caught.value)
    assert said.startswith("your code raised TypeError: the value it returned cannot be graded: an array of shape")
    assert "bug in the checker" not in said


def _dead_pid() -> int:
    """A pid no process has (from the top of the pid range, where none has been handed out yet)."""
    top = int(Path("/proc/sys/kernel/pid_max").read_text()) - 1
    for pid in range(top, top - 1000, -1):
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return pid
        except OSError:
            continue
    raise AssertionError("no free pid")


def test_a_killed_graders_working_folder_is_removed_by_the_next(tmp_path):
    dead, alive = _dead_pid(), os.getpid()
    stale = tmp_path / f"labsupport-grade-{dead}-abc"
    (stale / "submission-x").mkdir(parents=True)
    live = tmp_path / f"labsupport-grade-{alive}-def"
    live.mkdir()
    other = tmp_path / "labsupport-grade-notapid"
    other.mkdir()
    removed = grade.sweep_stale(str(tmp_path))
    assert str(stale) in removed and not stale.exists()
    assert live.exists() and other.exists(), "a running grader's folder, or one not named by a pid, is kept"


def test_a_killed_graders_cgroups_are_removed_by_the_next():
    from labsupport.workbook.grading import cgroup

    info = cgroup.available()
    if not info:
        pytest.skip("no writable cgroup here")
    parent = Path(info.get("memory") or info["pids"])
    stale = parent / f"labsupport-grade-{_dead_pid()}-0"
    stale.mkdir()
    try:
        assert str(stale) in cgroup.sweep() and not stale.exists()
    finally:
        if stale.exists():
            stale.rmdir()
