"""Issue #29 item 2: every "Try this" and every command a page shows runs as written from a fresh clone.

The convention (CONTRIBUTING.md "Commands on a page"): in a notebook, a command the learner runs in a new cell is
a ``!`` line with the kernel's interpreter and paths from the repository root,
``!cd "{REPO_ROOT}" && "{sys.executable}" -m labsupport …``; in README.md, CONTRIBUTING.md and docs/ a command is
``.venv/bin/python -m labsupport …`` run from the repository root (or plain ``python`` after the README's
``source .venv/bin/activate``).

What is checked, for every code span of every notebook's markdown (notebooks/ and solutions/; exercises/ are
generated from solutions/), every parameters-cell hint, and every command line of README/CONTRIBUTING/docs:

* no bare ``python -m`` / ``!python`` / ``torchrun`` (in JupyterLab's terminal or a ``!`` line that is not the
  kernel's interpreter) — no process, fast;
* each ``{name}`` a ``!`` line uses is bound by the notebook's code cells (IPython expands it in the kernel);
* each ``--flag`` is one the command's ``--help`` lists;
* run from a fresh copy of the working tree (tracked and untracked-not-ignored files, ``.venv`` linked to this
  interpreter's virtualenv), expanded by IPython's own formatter with the names the kernel would hold:
  ``runall`` commands with ``--dry-run`` (a whole chapter takes 10–60 s and ``max_steps 600`` minutes; the dry run
  still refuses an unknown chapter or parameter), the preprocess commands as written (ch02's bad-key command:
  exit status 1, one ``error:`` line, nothing written; the numba one: the same ``.bin`` as the chapter's),
  ``train`` commands by their flags only (40 steps take about a minute on a shared 2-core machine, three runs
  would break this test's ~60 s budget; tests/training runs the same resume), and commands with a placeholder
  (``NN``, ``N``, ``NAME``), an instructor's folder (``submissions/``) or no arguments at all (prose naming a
  command: "grade a class with ``.venv/bin/python -m labsupport grade``") by their flags only.
"""
from __future__ import annotations

import ast
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from functools import lru_cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BANG = '!cd "{REPO_ROOT}" && "{sys.executable}" -m '
NOTEBOOKS = [*sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb")),
             *sorted((ROOT / "solutions").glob("[0-9][0-9]_*.ipynb"))]
PAGES = [ROOT / "README.md", ROOT / "CONTRIBUTING.md", *sorted((ROOT / "docs").glob("*.md"))]
BARE = re.compile(r"(?:^|[\s!(`])(?:python3?\s+-m\b|torchrun\s)")
PLACEHOLDER = re.compile(r"\b(?:NN|N|NAME|VALUE|DIR|FILE)\b|…|<[a-z]+>|submissions/")


def _spans(text: str) -> list[str]:
    """Inline code spans of a markdown text, joined across line breaks as a browser shows them."""
    return [" ".join(s.split()) for s in re.findall(r"`([^`]+)`", text)]


def _notebook_commands(path: Path) -> list[str]:
    """The command spans of a notebook: markdown code spans that run something, and the parameters cell's hint."""
    found = []
    for cell in json.loads(path.read_text(encoding="utf-8"))["cells"]:
        text = "".join(cell["source"])
        if cell["cell_type"] == "markdown":
            found += [s for s in _spans(text) if s.startswith("!") or "-m labsupport" in s or BARE.search(s)]
        elif "parameters" in cell.get("metadata", {}).get("tags", []):
            hint = text.splitlines()[0]
            found.append(hint.split("in a new cell: ", 1)[1].rstrip(")") if "in a new cell: " in hint else hint)
    return found


def _page_commands(path: Path) -> list[str]:
    """The command lines of a markdown page: lines of its shell blocks and its inline spans that run something."""
    text = path.read_text(encoding="utf-8")
    found = []
    for lang, block in re.findall(r"```(\w*)\n(.*?)```", text, re.S):
        if lang in ("bash", "sh", "console"):
            found += [line.split("  #")[0].strip() for line in block.replace("\\\n", " ").splitlines()
                      if ("python" in line or "torchrun" in line) and not line.lstrip().startswith("#")]
    prose = re.sub(r"```.*?```", "", text, flags=re.S)
    # a span that quotes an error line ("error: rank R: the torchrun agent …") shows output, not a command
    return found + [s for s in _spans(prose) if ("-m labsupport" in s or BARE.search(s)) and not s.startswith("error:")]


def _bound_names(path: Path) -> set[str]:
    """Names the notebook's code cells bind at top level (what IPython's ``{name}`` can see in the kernel)."""
    names = set()
    for cell in json.loads(path.read_text(encoding="utf-8"))["cells"]:
        if cell["cell_type"] != "code":
            continue
        lines = "".join(cell["source"]).splitlines()
        src = "\n".join(line for line in lines if not line.lstrip().startswith(("%", "!")))
        for node in ast.parse(src).body:
            for sub in ast.walk(node):
                if isinstance(sub, (ast.Import, ast.ImportFrom)):
                    names |= {(a.asname or a.name).split(".")[0] for a in sub.names}
                elif isinstance(sub, ast.Name) and isinstance(sub.ctx, ast.Store):
                    names.add(sub.id)
    return names


ALL = [(p, c) for p in NOTEBOOKS for c in _notebook_commands(p)] + [(p, c) for p in PAGES for c in _page_commands(p)]


def test_the_pages_show_commands():
    """The extraction finds what the pages show (a regex that found nothing would pass every test below)."""
    shown = [c for _, c in ALL]
    assert sum(c.startswith(BANG) for c in shown) >= 15, shown
    assert any("--json-keys body" in c for c in shown) and any("--bpe-engine numba" in c for c in shown)
    assert any(c.startswith(".venv/bin/python -m labsupport") for c in shown)


@pytest.mark.parametrize("path, command", ALL, ids=[f"{p.parent.name}/{p.name}:{c[:50]}" for p, c in ALL])
def test_a_command_names_its_interpreter(path, command):
    if path.suffix == ".ipynb":
        assert command.startswith((BANG, '!cmp "', ".venv/bin/python -m ")), \
            f"{path.name}: {command!r} is neither a `{BANG}…` line nor a terminal `.venv/bin/python -m …` (bare " \
            "python is not the kernel's interpreter)"
        missing = {m.split(".")[0] for m in re.findall(r"\{([A-Za-z_][\w.]*)\}", command)} - _bound_names(path)
        assert not missing, f"{path.name}: {command!r} uses {sorted(missing)}, which no code cell binds"
    else:
        assert not BARE.search(command) or "activate" in command, \
            f"{path.name}: {command!r} runs a bare python/torchrun; write .venv/bin/python (from the repository root)"


def _argv(command: str) -> list[str]:
    """The words after ``-m labsupport`` (the module and its arguments after ``-m``)."""
    words = shlex.split(command.replace('"{sys.executable}"', "PY").replace('"{REPO_ROOT}"', "ROOT"))
    return words[words.index("-m") + 1:]


@lru_cache(maxsize=None)
def _help(*module: str) -> str:
    env = {k: v for k, v in os.environ.items() if k != "LABSUPPORT_WORK"}
    env["PYTHONPATH"] = str(ROOT)
    return subprocess.run([sys.executable, "-m", *module, "--help"], capture_output=True, text=True, env=env,
                          timeout=60, cwd=ROOT).stdout


LABSUPPORT = [(p, c) for p, c in ALL if "-m labsupport" in c]


@pytest.mark.slow
@pytest.mark.parametrize("path, command", LABSUPPORT, ids=[f"{p.name}:{c[:50]}" for p, c in LABSUPPORT])
def test_every_flag_is_one_the_command_accepts(path, command):
    words = _argv(command)
    words = words[words.index("labsupport"):] if "labsupport" in words else words
    assert words[0] == "labsupport" and len(words) > 1, command
    if words[1].startswith("-"):        # `-m labsupport --help`: the listing of the commands
        assert "preprocess" in _help("labsupport"), command
        return
    if words[1] in ("…", "<command>"):   # a page naming the form of every command: `-m labsupport <command>`
        assert all(w in ("--help", "-h") for w in words[2:] if w.startswith("-")), command
        return
    from labsupport.__main__ import ALIASES, COMMANDS

    assert words[1] in COMMANDS or words[1] in ALIASES, f"{path.name}: {command!r}: no command {words[1]!r}"
    usage = _help("labsupport", words[1])
    flags = [w.split("=")[0] for w in words[2:] if w.startswith("--")]
    unknown = [f for f in flags if not re.search(rf"(?<![\w-]){re.escape(f)}(?![\w-])", usage)]
    assert usage and not unknown, f"{path.name}: {command!r}: {unknown} not in `labsupport {words[1]} --help`"
    inputs = [v for flag, v in zip(words, words[1:]) if flag in ("--input", "--config") and "{" not in v]
    absent = [v for v in inputs if not (ROOT / v).exists()]     # said to run from the repository root
    assert not absent, f"{path.name}: {command!r}: {absent} do not exist from the repository root"


@pytest.fixture(scope="module")
def clone(tmp_path_factory) -> Path:
    """A fresh copy of the working tree (what a clone holds) with ``.venv`` this interpreter's virtualenv."""
    dest = tmp_path_factory.mktemp("clone")
    files = subprocess.run(["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=ROOT, capture_output=True,
                           check=True).stdout.decode().split("\0")
    for name in filter(None, files):
        if (ROOT / name).is_file():
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, dest / name)
    if sys.prefix != sys.base_prefix:
        (dest / ".venv").symlink_to(Path(sys.prefix))
    return dest


def _kernel_names(clone: Path) -> dict:
    """The names the chapters' ``!`` lines use (chapter 2's, chapter 6's ``many``), as their kernels
    would hold them in the clone."""
    from labsupport.datasets.tokenizer import Tokenizer, workbook_tokenizer

    from labsupport.datasets.startup_timing import make_prefixes

    many = clone / "work" / "ch06-many"     # chapter 6's generated prefixes (its kernel's ``many``)
    many.mkdir(parents=True, exist_ok=True)
    return {"sys": sys, "REPO_ROOT": clone, "tok": Tokenizer(workbook_tokenizer()),
            "out_dir": clone / "work" / "ch02" / "cli", "many": make_prefixes(str(many), count=2, docs=5)}


def _run(command: str, clone: Path, names: dict) -> subprocess.CompletedProcess:
    """``command`` as IPython runs a ``!`` line from the kernel's folder (notebooks/) of the clone."""
    from IPython.utils.text import DollarFormatter

    line = DollarFormatter().vformat(command[1:] if command.startswith("!") else command, args=[], kwargs=names)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "LABSUPPORT_WORK")}
    return subprocess.run(["/bin/sh", "-c", line], cwd=clone / "notebooks", capture_output=True, text=True,
                          env=env, timeout=120)


def _as_after_the_train_run(clone: Path) -> None:
    """What docs/training.md's ``train --data-args-path work/blend.txt`` leaves behind: the blend file
    its ``printf`` line writes and the workbook's prefixes under ``work/indexed/``."""
    docs = (clone / "docs" / "training.md").read_text(encoding="utf-8")
    printf = next(line for line in docs.splitlines() if "> work/blend.txt" in line)
    build = "from labsupport.datasets.preprocess import workbook_prefixes; workbook_prefixes(['web', 'code'])"
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["LABSUPPORT_WORK"] = str(clone / "work")       # whichever checkout the venv's labsupport is
    for line in (printf, f'.venv/bin/python -c "{build}"'):
        done = subprocess.run(["/bin/sh", "-c", line], cwd=clone, capture_output=True, text=True, timeout=300,
                              env=env)
        assert done.returncode == 0, (line, done.stderr[-2000:])


RUNNABLE = [(p, c) for p, c in ALL if (c.startswith("!cmp") or "-m labsupport" in c)
            and c.startswith(("!", ".venv/bin/python"))
            and not re.search(r"-m labsupport train\b", c) and not PLACEHOLDER.search(c)
            and not re.search(r"-m labsupport [\w-]+$", c)]   # a command named in prose, no arguments: flags only


@pytest.mark.slow
def test_the_commands_run_from_a_fresh_clone(clone):
    """Every runnable command, in page order; runall with --dry-run (see the module docstring)."""
    names = _kernel_names(clone)
    ran = []
    first_page: dict[str, Path] = {}
    for path, command in RUNNABLE:
        first_page.setdefault(command, path)
    for command, path in first_page.items():   # in page order; a command shown twice runs once
        if command.startswith(".venv/bin/python"):
            command = f'cd "{clone}" && {command}'
        if " runall" in command:
            command += " --dry-run"
        if "--bpe-engine numba" in command:   # the chapter's own web command first: the .bin to compare with
            chapter = command.replace("--output-prefix work/try/numba/web", f'--output-prefix "{names["out_dir"]}/web"')
            assert _run(chapter.replace(" --bpe-engine numba", ""), clone, names).returncode == 0
        if "--data-args-path work/blend.txt" in command:   # docs/training.md: after its train run (not run here)
            _as_after_the_train_run(clone)
        done = _run(command, clone, names)
        ran.append(command)
        if "--json-keys body" in command:     # ch02: the bad key stops with one error line and writes nothing
            errors = [line for line in re.split(r"[\r\n]", done.stderr) if "error:" in line]
            assert done.returncode == 1 and len(errors) == 1, (command, done.returncode, done.stderr[-2000:])
            assert "--json-keys body" in errors[0] and "['text']" in errors[0], errors
            assert not list((clone / "work" / "try").glob("x*")), "the bad-key run wrote files"
        else:
            assert done.returncode == 0, (path.name, command, done.stdout[-1000:], done.stderr[-2000:])
            if " runall" in command:
                assert "would run notebooks/" in done.stdout, done.stdout
            if command.startswith("!cmp"):
                assert done.stdout == "", done.stdout
    assert any("--json-keys body" in c for c in ran) and any(c.startswith("!cmp") for c in ran), ran
