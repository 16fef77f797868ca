"""A class of adversarial submissions of chapter 3, generated from ``solutions/03_blending.ipynb``
and ``exercises/03_blending.ipynb`` (never hand-edited notebooks), with the grade each must get.

``build_class(folder)`` writes one folder per student (``folder/<student>/03_blending.ipynb``, plus
whatever else that student left beside it) and returns ``{student: Expected}``.
"""
from __future__ import annotations

import ast

import copy
import json
import re
import textwrap
from dataclasses import dataclass, field
from pathlib import Path

from labsupport.paths import REPO_ROOT

NAME = "03_blending.ipynb"
# q5 (resume_blend) calls the learner's own greedy_step from q1: a broken q1 breaks q5 too
QUESTIONS = ("q1", "q2", "q3", "q4", "q5")
FUNCTIONS = {"q1": "greedy_step", "q2": "epochs", "q3": "cap_weights", "q4": "exercise_2", "q5": "resume_blend"}
_MARK = re.compile(r"^[ \t]*### (BEGIN|END) SOLUTION[ \t]*$")


SOCKET = "/tmp/labsupport-adversary.sock"       # a host unix socket the test listens on
ABSTRACT = "labsupport-adversary"                # and an abstract one
ODD_IDS = ("-bob", "=1+1", "a b", "a_b", "l" * 100, "evil\x1b[31mred")


@dataclass
class Expected:
    points: tuple[float, float, float, float, float]
    status: dict[str, str | tuple[str, ...]] = field(default_factory=dict)  # question → status (or any of several)
    flags: dict[str, str] = field(default_factory=dict)      # question → a text its flags must hold
    reason: dict[str, str] = field(default_factory=dict)     # question → a text its reason must hold
    why: str = ""
    # the grade when a time limit fires first on a loaded machine (then some question says "timed out")
    if_timed_out: tuple[float, float, float, float, float] | None = None


def _load(folder: str) -> dict:
    return json.loads((REPO_ROOT / folder / NAME).read_text(encoding="utf-8"))


def _padded_with_no_ops(source: str) -> str:
    """``source`` with ``_unused = None`` after every statement, the padding that hid a copy (N09)."""
    tree = ast.parse(source)
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if isinstance(body, list) and body and isinstance(body[0], ast.stmt):
            node.body = [s for stmt in body for s in (stmt, ast.parse("_unused = None").body[0])]
    return ast.unparse(tree)


def _solution_code() -> dict[str, str]:
    """Each question's solved answer cell: the solution cell with its marker lines removed."""
    out = {}
    for cell in _load("solutions")["cells"]:
        src = "".join(cell["source"]) if isinstance(cell["source"], list) else cell["source"]
        for q, fn in FUNCTIONS.items():
            if cell["cell_type"] == "code" and f"def {fn}(" in src:
                out[q] = "\n".join(line for line in src.split("\n") if not _MARK.match(line))
    assert set(out) == set(QUESTIONS), "solutions/03 changed: every question needs its solved cell"
    return out


def _source(cell: dict) -> str:
    return "".join(cell["source"]) if isinstance(cell["source"], list) else cell["source"]


class _Notebook:
    """The pristine exercise notebook, edited the way a student would."""

    def __init__(self) -> None:
        self.nb = copy.deepcopy(_load("exercises"))
        self.solved = _solution_code()

    def answer_cell(self, q: str) -> dict:
        return next(c for c in self.nb["cells"] if c["cell_type"] == "code" and f"def {FUNCTIONS[q]}(" in _source(c))

    def check_cell(self, q: str) -> dict:
        return next(c for c in self.nb["cells"] if c["cell_type"] == "code" and f"check.{q}(" in _source(c))

    def solve(self, *qs: str) -> "_Notebook":
        for q in qs:
            self.answer_cell(q)["source"] = self.solved[q]
        return self

    def set(self, q: str, source: str) -> "_Notebook":
        self.answer_cell(q)["source"] = textwrap.dedent(source).strip("\n")
        return self

    def prepend(self, q: str, code: str) -> "_Notebook":
        cell = self.answer_cell(q)
        cell["source"] = textwrap.dedent(code).strip("\n") + "\n" + _source(cell)
        return self

    def add_cell(self, after: int, code: str) -> "_Notebook":
        self.nb["cells"].insert(after, {"cell_type": "code", "id": f"added{after}", "metadata": {},
                                        "execution_count": None, "outputs": [],
                                        "source": textwrap.dedent(code).strip("\n")})
        return self

    def text(self) -> str:
        return json.dumps(self.nb, indent=1, ensure_ascii=False)


def _all() -> _Notebook:
    return _Notebook().solve(*QUESTIONS)


_TRY = """
import os, sys
_escaped = []


def _try(label, attempt):
    try:
        if attempt():
            _escaped.append(label)
    except BaseException:  # noqa: BLE001 - the attack failed, as it must
        pass
"""
# after the solved greedy_step: an attack that succeeded fails q1 (and q5) with what it did
_VERDICT = """

if _escaped:
    def greedy_step(weights, counts, step):
        raise RuntimeError("escaped: " + ", ".join(_escaped))
"""


def _attack(code: str) -> str:
    """A fully solved notebook whose q1 cell first tries ``code`` (``_try(label, fn)`` lines): if any
    attempt succeeds, q1 and q5 fail naming it; the honest grade is 5/5."""
    nb = _all()
    cell = nb.answer_cell("q1")
    cell["source"] = textwrap.dedent(_TRY).strip("\n") + "\n" + textwrap.dedent(code).strip("\n") + "\n\n" + \
        _source(cell) + textwrap.dedent(_VERDICT)
    return nb.text()


def _escapes(book: Path, classmate: Path) -> dict[str, str]:
    """The escape attempts of issue #22, one submission each (each must fail: 5/5, no 'escaped')."""
    repo = str(REPO_ROOT)
    out: dict[str, str] = {}
    out["e01_writes_everywhere"] = _attack(f"""
        import pathlib, site, sysconfig, labsupport

        def _append(path):  # opening for append proves write access without changing a byte
            with open(path, "a"):
                return True

        def _create(folder):
            target = pathlib.Path(folder) / "zz_labsupport_adversary.pth"
            target.write_text("import os\\n")
            target.unlink()
            return True

        _try("own labsupport/check", lambda: _append(pathlib.Path(labsupport.__file__).parent / "check" / "ch03.py"))
        _try("own labsupport", lambda: _create(pathlib.Path(labsupport.__file__).parent))
        _try("repository labsupport/check", lambda: _append({repo!r} + "/labsupport/check/ch03.py"))
        _try("virtualenv", lambda: _create(sysconfig.get_paths()["purelib"]))
        _try("virtualenv site", lambda: _create(site.getsitepackages()[0]))
        _try("interpreter", lambda: _create(sys.base_prefix))
        _try("gradebook", lambda: _append({str(book / "grades.csv")!r}))
        _try("gradebook folder", lambda: _create({str(book)!r}))
        _try("classmate", lambda: _append({str(classmate)!r}))
        _try("/etc", lambda: _create("/etc"))
        _try("/root", lambda: _create("/root"))
        _try("/usr", lambda: _create("/usr/lib"))
    """)
    out["e02_mounts_and_secrets"] = _attack(f"""
        import ctypes, glob, subprocess
        libc = ctypes.CDLL(None, use_errno=True)
        MS_REMOUNT, MS_BIND, MNT_DETACH = 32, 4096, 2
        _try("remount rw", lambda: libc.mount(None, b"/grading/lib", None, MS_REMOUNT | MS_BIND, None) == 0)
        _try("umount", lambda: libc.umount2(b"/grading/lib", MNT_DETACH) == 0)
        _try("umount /", lambda: libc.umount2(b"/", MNT_DETACH) == 0)
        _try("new user namespace",
             lambda: subprocess.run(["unshare", "-Urm", "true"], capture_output=True).returncode == 0)
        _try("capabilities", lambda: "CapEff:\\t0000000000000000" not in open("/proc/self/status").read())
        _try("uid 0", lambda: os.getuid() == 0 or os.geteuid() == 0)
        _try("no_new_privs off", lambda: "NoNewPrivs:\\t1" not in open("/proc/self/status").read())
        _try("mountinfo names the run", lambda: "grading-run" in open("/proc/self/mountinfo").read()
             or {str(book)!r} in open("/proc/self/mountinfo").read())
        _try("seed in environment", lambda: "LABSUPPORT_CHECK_SEED" in os.environ
             or any("class-test" in v for v in os.environ.values()))
        _try("seed in a process",
             lambda: any(b"class-test" in open(p, "rb").read()
                         for p in glob.glob("/proc/[0-9]*/cmdline") + glob.glob("/proc/[0-9]*/environ")))
        _try("grader visible", lambda: len(glob.glob("/proc/[0-9]*")) > 12)
        _try("solutions/", lambda: len(open({repo!r} + "/solutions/03_blending.ipynb").read()) > 0)
        _try("executed/", lambda: len(glob.glob({str(book)!r} + "/executed/*")) > 0)
        _try("gradebook readable", lambda: len(open({str(book / "grading-run.json")!r}).read()) > 0)
        _try("check code", lambda: __import__("importlib.util").util.find_spec("labsupport.check._core") is not None)
        _try("model answer", lambda: hasattr(check, "MODEL_ANSWER_Q4"))
    """)
    out["e03_shm_writer"] = _attack("""
        def _leave():
            for folder in ("/dev/shm", "/tmp", os.path.expanduser("~")):
                with open(os.path.join(folder, "labsupport-note"), "w") as fh:
                    fh.write("the answer")
            return False  # writing its own private folders is allowed; being read by a classmate is not
        _try("leave a note", _leave)
    """)
    out["e04_shm_reader"] = _attack("""
        _try("/dev/shm shared", lambda: os.path.exists("/dev/shm/labsupport-note"))
        _try("/tmp shared", lambda: os.path.exists("/tmp/labsupport-note"))
    """)
    out["e05_sockets"] = _attack(f"""
        import glob, socket

        def _connect(address):
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
                s.settimeout(2)
                s.connect(address)
                return True

        _try("host unix socket", lambda: _connect({SOCKET!r}))
        _try("abstract socket", lambda: _connect("\\0" + {ABSTRACT!r}))
        for _p in glob.glob("/run/**", recursive=True) + glob.glob("/var/run/**", recursive=True) + glob.glob("/tmp/*"):
            if not os.path.isdir(_p):
                _try(f"socket {{_p}}", lambda: _connect(_p))
        _try("network", lambda: socket.create_connection(("127.0.0.1", 22), timeout=2) and True)
    """)
    out["e06_memory_children"] = _attack("""
        import subprocess

        def _three_children():  # 3 × 700 MiB: each under a per-process cap, together over the submission's
            # (each child offers itself to the OOM killer first, so the grade does not depend on
            # which process the kernel picks: the notebook's own process lives on)
            code = ("open('/proc/self/oom_score_adj', 'w').write('1000'); b = bytearray(700 << 20); "
                    "b[::4096] = b'x' * len(b[::4096]); print('ok', flush=True); import time; time.sleep(2)")
            kids = [subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
                    for _ in range(3)]
            return sum(b"ok" in k.communicate(timeout=60)[0] for k in kids) == 3
        _try("3 children x 700 MiB", _three_children)
    """)
    out["e07_processes"] = _attack("""
        def _many(n=300):
            r, w = os.pipe()
            started = 0
            for _ in range(n):
                try:
                    pid = os.fork()
                except OSError:
                    break
                if pid == 0:
                    os.close(w)
                    os.read(r, 1)   # until the parent closes the pipe
                    os._exit(0)
                started += 1
            os.close(w)
            os.close(r)
            for _ in range(started):
                os.wait()
            return started >= n
        _try("300 processes", _many)
    """)
    out["e08_disk"] = _attack("""
        def _fill():
            total, chunk = 0, b"x" * (8 << 20)
            for folder in (os.path.expanduser("~"), "/tmp", "/dev/shm"):
                for i in range(90):
                    try:
                        with open(os.path.join(folder, f"fill{i}"), "wb") as fh:
                            for _ in range(4):
                                fh.write(chunk)
                                total += len(chunk)
                    except OSError:
                        break
            for folder in (os.path.expanduser("~"), "/tmp", "/dev/shm"):
                for i in range(90):
                    try:
                        os.unlink(os.path.join(folder, f"fill{i}"))
                    except OSError:
                        pass
            return total >= 720 << 20
        _try("720 MB of files", _fill)
    """)
    return out


def build_class(folder: Path, book: Path | None = None, grader_is_root: bool | None = None,
                cgroup_memory: bool | None = None) -> dict[str, Expected]:
    """The class in ``folder``; ``book`` is the gradebook folder the escape attempts aim at; ``grader_is_root``
    (default: whether this process is root) decides the grade of the mode-000 notebook (root reads it);
    ``cgroup_memory`` (default: :func:`memory_per_submission` here) whether the grader has a memory cgroup."""
    import os

    grader_is_root = os.geteuid() == 0 if grader_is_root is None else grader_is_root
    folder = Path(folder)
    book = Path(book) if book is not None else folder.parent / "book"
    subs: dict[str, tuple[str | bytes, Expected]] = {}
    extra: dict[str, dict[str, str]] = {}
    exp = Expected

    subs["a01_correct"] = (_all().text(), exp((1, 1, 1, 1, 1), why="the solutions' answers"))
    subs["a02_untouched"] = (_Notebook().text(), exp((0, 0, 0, 0, 0), {q: "not attempted" for q in QUESTIONS}))
    subs["a03_partial"] = (_Notebook().solve("q1", "q2").text(), exp((1, 1, 0, 0, 0), {"q3": "not attempted"}))

    nb = _Notebook().solve("q1", "q2")
    nb.nb["cells"] = [c for c in nb.nb["cells"] if not re.search(r"check\.(q3|q4|summary)\(", _source(c))]
    subs["a04_deleted_checks"] = (nb.text(), exp((1, 1, 0, 0, 0), {"q3": "not attempted", "q4": "not attempted"},
                                               why="deleted questions keep their rows"))

    forged = """
    import json, os
    report = os.environ.get("LABSUPPORT_CHECK_REPORT", "report.jsonl")
    with open(report, "a") as fh:
        for q in ("q1", "q2", "q3", "q4") * 7:
            fh.write(json.dumps({"chapter": "ch03", "question": q, "status": "passed", "message": "",
                                 "points": 1.0, "max_points": 1.0, "manual": {}}) + "\\n")
    print("✅ q1 passed\\n✅ q2 passed\\n✅ q3 passed\\n✅ q4 passed\\nscore: 4 / 4")
    """
    subs["a05_forged_report"] = (_Notebook().prepend("q1", forged).text(), exp((0, 0, 0, 0, 0)))

    patch = """
    import labsupport.check._core as core
    from labsupport.check import ch03
    core.expect = lambda *a, **k: None
    core.CheckResult.passed = property(lambda self: True)
    for q in ("q1", "q2", "q3", "q4"):
        setattr(ch03, q, lambda *a, **k: True)
    check.q1 = lambda f: True
    """
    subs["a06_monkeypatch"] = (_Notebook().prepend("q1", patch).text(), exp((0, 0, 0, 0, 0)))

    nb = _Notebook()
    for q, ref in (("q1", "greedy_step"), ("q2", "expected_epochs"), ("q3", "cap_weights")):
        nb.check_cell(q)["source"] = f"import labsupport.datasets.blending as B\ncheck.{q}(B.{ref})"
    subs["a07_edited_check_cells"] = (nb.text(), exp((0, 0, 0, 0, 0), {"q1": "not attempted"}))

    subs["a08_shadow_package"] = (_Notebook().text(), exp((0, 0, 0, 0, 0), {"q1": "not attempted"}))
    fake = ("def _ok(*a, **k):\n    return True\nq1 = q2 = q3 = q4 = _ok\nCHAPTER = 'ch03'\n"
            "summary = lambda: print('score: 4 / 4')\n")
    extra["a08_shadow_package"] = {"labsupport/__init__.py": "def setup(**k):\n    return 'cpu'\n",
                                   "labsupport/check/__init__.py": "", "labsupport/check/ch03.py": fake}

    marker = REPO_ROOT / "labsupport" / "_adversary_was_here.py"
    vandal = f"""
    import pathlib, labsupport
    lib = pathlib.Path(labsupport.__file__).parent
    (lib / "check" / "ch03.py").write_text("raise SystemExit('vandalised')\\n")
    (lib / "datasets" / "blending.py").write_text("raise SystemExit('vandalised')\\n")
    try:
        pathlib.Path({str(marker)!r}).write_text("x = 1\\n")
    except OSError:
        pass
    (pathlib.Path.home() / "sitecustomize.py").write_text("raise SystemExit('vandalised')\\n")
    """
    subs["a09_writes_outside"] = (_Notebook().prepend("q1", vandal).text(),
                                  exp((0, 0, 0, 0, 0), {"q1": "failed"}, why="its first write fails: read-only"))
    subs["a10_next_untouched"] = (_Notebook().text(), exp((0, 0, 0, 0, 0), {q: "not attempted" for q in QUESTIONS},
                                                         why="graded after the vandal: unharmed"))

    for name, stop in (("a11_sys_exit", "import sys\nsys.exit()"), ("a12_os_exit", "import os\nos._exit(1)"),
                       ("a13_keyboard_interrupt", "raise KeyboardInterrupt")):
        subs[name] = (_all().prepend("q3", stop).text(),
                      exp((1, 1, 0, 0, 0), {"q1": "passed", "q3": "not run", "q4": "not run"},
                          why="graded up to the exit"))

    subs["a14_loop_in_cell"] = (_all().prepend("q2", "while True:\n    pass").text(),
                                exp((1, 0, 1, 1, 1), {"q2": "timed out"}))
    subs["a15_loop_in_function"] = (_all().set("q1", """
        def greedy_step(weights, counts, step):
            while True:
                pass
        """).text(), exp((0, 1, 1, 1, 0), {"q1": "timed out"}))

    ch01 = json.loads((REPO_ROOT / "exercises" / "01_tokenization.ipynb").read_text(encoding="utf-8"))
    subs["a16_wrong_chapter"] = (json.dumps(ch01), exp((0, 0, 0, 0, 0), {"q1": "missing"},
                                                       flags={"q1": "wrong-chapter"}))

    subs["a17_reads_answer_keys"] = (_all().set("q4", """
        def exercise_2(total_tokens, code_tokens, code_weight):
            return {"a": list(check._EFFECTS), "b": list(check._RISKS), "c": list(check._STEPS),
                    "b_code_epochs": code_weight * total_tokens / code_tokens,
                    "a_why": "w " * 12, "b_why": "w " * 12, "c_why": "w " * 12}
        """).text(), exp((1, 1, 1, 0, 1), flags={"q4": "check-module"}))

    subs["a18_oracle"] = (_all().set("q4", """
        import contextlib, io, itertools
        EFFECTS, RISKS = list(check.EXERCISE_2_EFFECTS), list(check.EXERCISE_2_RISKS)
        STEPS = list(check.EXERCISE_2_STEPS)
        _found = {}
        for a in itertools.combinations(EFFECTS, 3):
            guess = {"a": list(a), "b": ["memorise", "overfit", "little_new"],
                     "c": ["dedup_filter", "epoch_budget", "per_domain_eval", "ablations", "realised_blend"],
                     "a_why": "w " * 12, "b_why": "w " * 12, "c_why": "w " * 12}
            with contextlib.redirect_stdout(io.StringIO()):
                if check.q4(lambda t, c, w, g=guess: {**g, "b_code_epochs": w * t / c}):
                    _found = guess
                    break

        def exercise_2(total_tokens, code_tokens, code_weight):
            return {**_found, "b_code_epochs": code_weight * total_tokens / code_tokens}
        """).text(), exp((1, 1, 1, 0, 1), flags={"q4": "oracle"}, why="the stub check answers nothing"))

    subs["a19_reference_function"] = (_all().set("q1", """
        from labsupport.datasets.blending import greedy_step as _library

        def greedy_step(weights, counts, step):
            return _library(weights, counts, step)
        """).text(), exp((0, 1, 1, 1, 0), {"q1": "flagged"}, flags={"q1": "reference"},
                         why="the sandbox's copy of the reference raises; the import is flagged too"))
    subs["a20_getframe"] = (_all().set("q2", """
        import sys

        def epochs(weights, dataset_tokens, total_tokens):
            frame = sys._getframe(1)
            while frame is not None and "want" not in frame.f_locals:
                frame = frame.f_back
            return frame.f_locals["want"] if frame is not None else []
        """).text(), exp((1, 0, 1, 1, 1), flags={"q2": "frames"}))

    subs["a21_invalid_json"] = (b'{"cells": [ {"cell_type": "code", "source": "oops"',
                                exp((0, 0, 0, 0, 0), {"q1": "unreadable"}))
    subs["a22_not_a_notebook"] = (json.dumps({"hello": "world"}), exp((0, 0, 0, 0, 0), {"q1": "unreadable"}))
    subs["a23_malformed_cells"] = (json.dumps({"cells": [{"cell_type": "code", "source": 42}], "nbformat": 4}),
                                   exp((0, 0, 0, 0, 0), {"q1": "unreadable"}))
    subs["a24_empty_file"] = (b"", exp((0, 0, 0, 0, 0), {"q1": "unreadable"}))

    subs["a25_kills_parent"] = (_all().prepend("q1", "import os, signal\nos.kill(os.getppid(), signal.SIGKILL)").text(),
                                exp((0, 0, 0, 0, 0), {"q2": "flagged"}, flags={"q1": "signals", "q4": "signals"},
                                    why="that student 0; the grader lives on"))
    subs["a26_hard_coded"] = (_all().set("q1", """
        def greedy_step(weights, counts, step):
            return 0
        """).text(), exp((0, 1, 1, 1, 0), {"q1": "failed"}))
    subs["a27_huge_output"] = (_all().prepend("q1", "print('x' * 30_000_000)").prepend(
        "q2", "import sys\n_print = print\n").set("q2", """
        def epochs(weights, dataset_tokens, total_tokens):
            print("noise " * 100_000)
            total_weight = sum(weights)
            return [w / total_weight * total_tokens / size for w, size in zip(weights, dataset_tokens)]
        """).text(), exp((1, 1, 1, 1, 1)))
    subs["a28_memory_hog"] = (_all().prepend("q1", "_hog = []\nwhile True:\n"
                                                   "    _hog.append(bytearray(64 * 2**20))").text(),
                              exp((0, 1, 1, 1, 0), {"q1": ("failed", "timed out")},
                                  why="killed at the memory limit, or by the cell limit first on a loaded machine"))

    nb = _all()
    for i, cell in enumerate(nb.nb["cells"]):  # new ids everywhere, markers written in and around the answers
        cell["id"] = f"student-{i:03d}"
        if cell["cell_type"] == "code" and "def " in _source(cell):
            cell["source"] = "### BEGIN SOLUTION\n" + _source(cell) + "\n### END SOLUTION\n### BEGIN SOLUTION"
    subs["a29_markers_rewritten"] = (nb.text(), exp((1, 1, 1, 1, 1)))

    subs["a30_eq_override"] = (_all().set("q1", """
        class Always(int):
            def __eq__(self, other):
                return True
            __hash__ = int.__hash__

        def greedy_step(weights, counts, step):
            return Always(0)
        """).text(), exp((0, 1, 1, 1, 0), {"q1": "failed"}))

    copy_nb = _all()
    src = _solution_code()["q1"].replace("best_error", "top_err").replace("best", "winner")
    copy_nb.set("q1", "# my own work\n" + src.replace("# strictly greater", "# greater"))
    subs["a31_near_copy"] = (copy_nb.text(), exp((1, 1, 1, 1, 1), why="listed in similarity.csv with a01_correct"))
    padded = _all()
    padded.set("q1", _padded_with_no_ops(_solution_code()["q1"]))
    subs["a32_no_op_copy"] = (padded.text(), exp((1, 1, 1, 1, 1), why="listed in similarity.csv with solutions/"))

    for student, text in _escapes(book, folder / "a01_correct" / NAME).items():
        slow = student == "e06_memory_children"  # reclaim at the memory limit can outlast the cell limit
        subs[student] = (text, exp((1, 1, 1, 1, 1), {} if slow else {q: "passed" for q in QUESTIONS},
                                   why="the attempt fails", if_timed_out=(0, 1, 1, 1, 0) if slow else None))
    if "e06_memory_children" in subs and not (memory_per_submission() if cgroup_memory is None else cgroup_memory):
        # no writable cgroup (an ordinary user): the grader adds up the processes' memory (memwatch) and stops
        # the whole submission past the limit, so q1's cell fails at the memory limit and q5 with it
        subs["e06_memory_children"] = (subs["e06_memory_children"][0], exp(
            (0, 1, 1, 1, 0), {"q1": ("failed", "timed out")},
            why="stopped by the grader's sum over processes (the header's memory line)", if_timed_out=(0, 1, 1, 1, 0)))

    subs["e09_reference_in_a_thread"] = (_all().set("q1", """
        import importlib, inspect, threading
        _library = importlib.import_module("labsupport.datasets." + "blend" + "ing")

        def greedy_step(weights, counts, step):
            found = []
            target = inspect.unwrap(getattr(_library, "greedy" + "_step"))
            worker = threading.Thread(target=lambda: found.append(target(weights, counts, step)))
            worker.start()
            worker.join()
            return found[0]
        """).text(), exp((0, 1, 1, 1, 0), {"q1": "failed"}, why="the sandbox's copy has no reference to call"))
    subs["e10_huge_reply"] = (_all().set("q2", """
        def epochs(weights, dataset_tokens, total_tokens):
            return [0] * 4_500_000
        """).text(), exp((1, 0, 1, 1, 1), {"q2": ("failed", "timed out")},
                         why="a reply over the value limit is refused (or a loaded machine times out encoding it)"))
    big = json.loads(_all().text())
    big["cells"][0].setdefault("outputs", []).append({"output_type": "display_data", "metadata": {},
                                                       "data": {"image/png": "iVBORw0KGgo" + "A" * (24 << 20)}})
    subs["e11_notebook_over_20_mb"] = (json.dumps(big), exp((1, 1, 1, 1, 1)))
    import nbformat

    subs["e12_nbformat_3"] = (nbformat.writes(nbformat.convert(nbformat.reads(_all().text(), as_version=4), 3),
                                              version=3),
                              exp((1, 1, 1, 1, 1), why="upgraded with nbformat"))
    for i, odd in enumerate(ODD_IDS):
        subs[odd] = ((_all() if i % 2 == 0 else _Notebook()).text(),
                     exp((1, 1, 1, 1, 1) if i % 2 == 0 else (0, 0, 0, 0, 0), why="the same student on every run"))

    grader_attacks, layouts = _grader_attacks(grader_is_root)
    subs.update(grader_attacks)

    only = subset()
    if only is not None:
        subs = {k: v for k, v in subs.items() if k in only}
    for student, (content, _) in subs.items():
        if student in layouts:
            layouts[student](folder, content)
            continue
        target = folder / student / NAME
        target.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, bytes):
            target.write_bytes(content)
        else:
            target.write_text(content, encoding="utf-8")
        for rel, text in extra.get(student, {}).items():
            p = folder / student / rel
            p.parent.mkdir(parents=True, exist_ok=True)
            p.write_text(text, encoding="utf-8")
    return {student: e for student, (_, e) in subs.items()}


MARKER = REPO_ROOT / "labsupport" / "_adversary_was_here.py"

#: the environment values a leaked message would show (tests/grading/test_adversarial_class.py sets them)
SECRET_ENV = {"LABSUPPORT_ADVERSARY_TOKEN": "index-token-8d1f"}
#: issue #31's attacks on the grader's own process (N01–N23, A09, A23) as students of the class; they are
#: also graded by an ordinary user (test_adversarial_class.py, ``graded_as_user``)
GRADER_ATTACKS = ("n01_dev_fill", "n02_memfd", "n03_terminal_escapes", "n04_env_config_reply", "n05_helper_reference",
                  "n06_root_only_files", "n07_lone_surrogate", "n08_parser_exhaustion", "n09_empty_2_40",
                  "n10_huge_literal", "n11_mallory", "n12_symlink_to_solutions", "n13_bom", "n14_h\ufffdi",
                  "n15_folder_named_notebook", "n16_mode_000", "n17_symlink_root_only", "n18_nested_reply",
                  "n19_huge_int")


def _grader_attacks(grader_is_root: bool):
    """Issue #31's attacks: ``({student: (content, Expected)}, {student: layout(folder, content)})`` — a layout
    writes that student's files itself (links, nested folders, odd names, modes)."""
    import os

    exp, subs, layouts = Expected, {}, {}
    subs["n01_dev_fill"] = (_attack("""
        def _fill_dev():
            total, chunk = 0, b"x" * (8 << 20)
            for i in range(160):
                try:
                    with open(f"/dev/fill{i}", "wb") as fh:
                        fh.write(chunk)
                        total += len(chunk)
                except OSError:
                    break
            for i in range(160):
                try:
                    os.unlink(f"/dev/fill{i}")
                except OSError:
                    pass
            return total >= 1200 << 20
        _try("1.2 GB in /dev", _fill_dev)
    """), exp((1, 1, 1, 1, 1), why="/dev is not a writable, unbounded tmpfs (N01)"))
    subs["n02_memfd"] = (_attack("""
        import subprocess

        def _memfd_child():  # memory no address space holds: memfd, then SysV shared memory (N02)
            code = ("import os, ctypes; open('/proc/self/oom_score_adj', 'w').write('1000'); "
                    "fd = os.memfd_create('hold'); chunk = b'x' * (64 << 20)\\n"
                    "for _ in range(36): os.write(fd, chunk)\\n"
                    "libc = ctypes.CDLL(None, use_errno=True); libc.shmget.restype = ctypes.c_int\\n"
                    "shm = libc.shmget(0, ctypes.c_size_t(1 << 30), 0o1600)\\n"
                    "print('ok' if shm >= 0 else 'no shm', flush=True)")
            kid = subprocess.run([sys.executable, "-c", code], capture_output=True, timeout=60)
            return b"ok" in kid.stdout
        _try("2.3 GB in memfd + 1 GB SysV", _memfd_child)
    """), exp((1, 1, 1, 1, 1), why="bounded by the cgroup, or refused without one (N02)"))
    escapes = "\\x1b]52;c;ZXZpbA==\\x07\\x1b]0;pwned\\x07\\x1b[2J\\x1b[1;1H"
    subs["n03_terminal_escapes"] = (_all().prepend("q1", f"""
        import warnings
        warnings.warn("{escapes} clipboard")
        print("{escapes} screen")
    """).text(), exp((1, 1, 1, 1, 1), why="escapes stripped from everything echoed (N03, A23)"))
    subs["n04_env_config_reply"] = (_all().set("q2", f"""
        from omegaconf import OmegaConf

        def epochs(weights, dataset_tokens, total_tokens):
            return OmegaConf.create([{", ".join(repr("${oc.env:" + k + ",unset}") for k in (
                "LABSUPPORT_CHECK_SEED", "HOME", "PWD", *SECRET_ENV))}])
    """).text(), exp((1, 0, 1, 1, 1), {"q2": "failed"}, why="a config reply is literal text, never resolved (N04)"))
    subs["n05_helper_reference"] = (_all().set("q1", """
        from labsupport.datasets import blending_loop as _loop

        def greedy_step(weights, counts, step):
            datasets, _, _ = _loop.sequential_steps(list(weights), 1, list(counts), step)
            return datasets[0]
    """).text(), exp((0, 1, 1, 1, 0), {"q1": "flagged"}, flags={"q1": "reference"},
                     why="a helper the check's reference calls is a reference too (N08)"))
    # the host's /proc/cmdline is the root grader's to hide; any ordinary user may read it anyway
    cmdline = '_try("/proc/cmdline", lambda: len(open("/proc/cmdline").read()) > 0)' if grader_is_root else ""
    subs["n06_root_only_files"] = (_attack(f"""
        {cmdline}
        _try("/etc/shadow", lambda: len(open("/etc/shadow").read()) > 0)
        _try("/etc/ssl/private", lambda: os.listdir("/etc/ssl/private") is not None)
        _try("pip.conf", lambda: len(open(sys.prefix + "/pip.conf").read()) >= 0)
    """), exp((1, 1, 1, 1, 1), why="as root the student is uid 65534 outside too (N06)"))
    nb = _all()
    cell = nb.answer_cell("q4")
    cell["source"] = _source(cell).replace('"The blend is the distribution', '"\\ud800 The blend is the distribution')
    subs["n07_lone_surrogate"] = (nb.text(), exp((1, 1, 1, 1, 1), why="a lone surrogate is written as U+FFFD (N10)"))
    subs["n08_parser_exhaustion"] = (_all().add_cell(1, "x = a" + ".b" * 100_000).text(),
                                     exp((1, 1, 1, 1, 1), why="a cell ast.parse cannot take is no tree (N12)"))
    subs["n09_empty_2_40"] = (_all().set("q2", """
        import numpy as np

        def epochs(weights, dataset_tokens, total_tokens):
            return np.empty((2**40, 0))
    """).text(), exp((1, 0, 1, 1, 1), {"q2": "failed"}, why="no structure proportional to a claimed shape (N11)"))
    subs["n10_huge_literal"] = (_all().add_cell(1, "_big = [" + "0," * 2_000_000 + "]").text(),
                                exp((1, 1, 1, 1, 1), why="a huge literal is parsed once, bounded (N13)"))
    subs["n11_mallory"] = (_Notebook().text(), exp((0, 0, 0, 0, 0), {q: "not attempted" for q in QUESTIONS},
                                                   why="mallory/a01_correct/… is mallory's, not a01_correct's (N14)"))

    def _nested(folder: Path, content: str) -> None:
        target = folder / "n11_mallory" / "a01_correct" / NAME
        target.parent.mkdir(parents=True)
        target.write_text(content, encoding="utf-8")
    layouts["n11_mallory"] = _nested

    def _link_to(target: Path):
        def make(folder: Path, content: str, student: str) -> None:
            (folder / student).mkdir(parents=True)
            (folder / student / NAME).symlink_to(target)
        return make
    unreadable = exp((0, 0, 0, 0, 0), {"q1": "unreadable"})
    subs["n12_symlink_to_solutions"] = ("", unreadable)
    layouts["n12_symlink_to_solutions"] = lambda f, c: _link_to(REPO_ROOT / "solutions" / NAME)(
        f, c, "n12_symlink_to_solutions")
    subs["n17_symlink_root_only"] = ("", unreadable)
    layouts["n17_symlink_root_only"] = lambda f, c: _link_to(Path("/etc/shadow"))(f, c, "n17_symlink_root_only")
    subs["n13_bom"] = (b"\xef\xbb\xbf" + _all().text().encode("utf-8"), exp((1, 1, 1, 1, 1), why="a BOM is read (N16)"))

    def _odd_name(folder: Path, content: str) -> None:
        where = os.fsencode(folder) + b"/n14_h\xffi"
        os.makedirs(where)
        Path(os.fsdecode(where), NAME).write_text(content, encoding="utf-8")
    subs["n14_h\ufffdi"] = (_all().text(), exp((1, 1, 1, 1, 1), why="a folder name that is not UTF-8 (N17)"))
    layouts["n14_h\ufffdi"] = _odd_name
    subs["n15_folder_named_notebook"] = ("", unreadable)
    layouts["n15_folder_named_notebook"] = lambda f, c: (f / "n15_folder_named_notebook" / NAME).mkdir(parents=True)

    def _mode_000(folder: Path, content: str) -> None:
        target = folder / "n16_mode_000" / NAME
        target.parent.mkdir(parents=True)
        target.write_text(content, encoding="utf-8")
        target.chmod(0)
    subs["n16_mode_000"] = (_all().text(), exp((1, 1, 1, 1, 1), why="root reads it") if grader_is_root else unreadable)
    layouts["n16_mode_000"] = _mode_000
    subs["n18_nested_reply"] = (_all().set("q2", """
        def epochs(weights, dataset_tokens, total_tokens):
            deep = []
            for _ in range(100_000):
                deep = [deep]
            return deep
    """).text(), exp((1, 0, 1, 1, 1), {"q2": "failed"}, why="refused as too deep, not a RecursionError (N19)"))
    subs["n19_huge_int"] = (_all().set("q2", """
        def epochs(weights, dataset_tokens, total_tokens):
            return [10**400] * len(weights)
    """).text(), exp((1, 0, 1, 1, 1), {"q2": "failed"}, why="the student's answer, not a bug in the checker (A09)"))
    assert set(subs) == set(GRADER_ATTACKS)
    return subs, layouts


def memory_per_submission() -> bool:
    """Whether the grader bounds a submission's memory as a whole here (a writable memory cgroup):
    what the run's header says (:func:`labsupport.workbook.grading.sandbox.enforcement`)."""
    from labsupport.workbook.grading import cgroup

    return "memory" in cgroup.available()


SUBSET_ENV = "LABSUPPORT_CLASS_SUBSET"  # "a01_correct,e01_writes_everywhere,...": grade only these


def subset() -> set[str] | None:
    import os

    raw = os.environ.get(SUBSET_ENV, "").strip()
    return {s for s in raw.split(",") if s} or None


def student_names() -> list[str]:
    """The class list (for test ids), without writing the class anywhere that lasts."""
    import tempfile

    with tempfile.TemporaryDirectory(prefix="labsupport-class-") as tmp:
        names = sorted(build_class(Path(tmp)))
    only = subset()
    return [n for n in names if only is None or n in only]
