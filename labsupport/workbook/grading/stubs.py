"""The ``labsupport.check`` a student's process gets while grading (workbook tooling, every chapter).

The grader runs every check in its own process; the student's process only needs what the
exercise notebook's setup cells print: the option lists of multiple-choice questions and the
chapter's name.  Each ``labsupport/check/chNN.py`` of the sandbox's copy is therefore replaced by
a stub holding exactly those plain-data constants — no check body, no hidden helper, no model
answer (``MODEL_ANSWER_*``), no sealed key, no ``_core`` — whose ``qN()``/``summary()`` only say
that checks run in the grader.  (An open-source course cannot hide its keys from a student who
reads the repository; what the stub guarantees is that nothing in the graded process can run,
count or read the grader's checks.)
"""
from __future__ import annotations

import re
import ast
import functools
import importlib
import shutil
from pathlib import Path
from typing import Any

from labsupport.paths import REPO_ROOT
from labsupport.workbook.grading import reach
from labsupport.workbook.grading.source import parse

_PLAIN = (str, int, float, bool, type(None))


def _plain(value: Any, depth: int = 0) -> bool:
    if depth > 8:
        return False
    if isinstance(value, _PLAIN):
        return type(value) in _PLAIN
    if type(value) in (list, tuple):
        return all(_plain(v, depth + 1) for v in value)
    if type(value) is dict:
        return all(_plain(k, depth + 1) and _plain(v, depth + 1) for k, v in value.items())
    return False


@functools.lru_cache(maxsize=None)
def stub_source(module_name: str) -> str:
    """The stub module's source for ``labsupport.check.<module_name>``."""
    module = importlib.import_module(f"labsupport.check.{module_name}")
    lines = [f'"""Stand-in for labsupport.check.{module_name} while grading: the checks run in the grader."""', ""]
    callables = []
    for name, value in vars(module).items():
        if name.startswith("_") or name.startswith("MODEL_ANSWER") or name == "annotations":
            continue
        defined_here = callable(value) and getattr(value, "__module__", "") == module.__name__
        if getattr(value, "is_check", False) or name == "summary" or defined_here:
            callables.append(name)
        elif _plain(value):
            lines.append(f"{name} = {value!r}")
    lines += ["", "", "def _graded_elsewhere(*args, **kwargs):",
              "    print('(checks run in the grader while grading, not in this process)')", "    return None", ""]
    lines += [f"{name} = _graded_elsewhere" for name in sorted(callables)]
    lines += ["", "", "def __getattr__(name):",
              f"    raise AttributeError(f'labsupport.check.{module_name}.{{name}} is not available while grading')",
              ""]
    return "\n".join(lines)


def write_check_stubs(folder: Path) -> None:
    """Replace the check package copied into ``folder`` (``…/labsupport/check``) by stubs."""
    folder = Path(folder)
    package = REPO_ROOT / "labsupport" / "check"   # a chapter's checks: chNN.py, or a package chNN/
    names = sorted({p.stem for p in package.glob("ch*.py")}
                   | {p.name for p in package.glob("ch*/") if (p / "__init__.py").is_file()})
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    (folder / "__init__.py").write_text('"""Check stubs: while grading, every check runs in the grader."""\n',
                                        encoding="utf-8")
    for name in names:
        (folder / f"{name}.py").write_text(stub_source(name), encoding="utf-8")


def _find(tree: ast.Module, qualname: str) -> ast.FunctionDef | ast.AsyncFunctionDef | None:
    body: list[ast.stmt] = tree.body
    node: Any = None
    for part in qualname.split("."):
        node = next((n for n in body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
                     and n.name == part), None)
        if node is None:
            return None
        body = node.body
    return node if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) else None


def strip_references(lib: Path, specs: list[str]) -> list[str]:
    """In the student's copy under ``lib``, replace the body of each ``"module:qualname"`` function
    by a ``raise``: the reference a question's check compares with cannot be called while that
    chapter is graded (a thread, a profiler swap or ``__wrapped__`` find nothing to call).
    Returns the specs removed."""
    by_file: dict[Path, list[str]] = {}
    for spec in specs:
        module, _, qual = spec.partition(":")
        path = Path(lib, *module.split(".")).with_suffix(".py")
        if path.is_file():
            by_file.setdefault(path, []).append(qual)
    removed = []
    for path, quals in by_file.items():
        lines = path.read_text(encoding="utf-8").split("\n")
        tree = ast.parse("\n".join(lines))
        nodes = [(q, _find(tree, q)) for q in quals]
        found = [(q, n) for q, n in nodes if n is not None and n.body[0].lineno > n.lineno]
        for qual, node in sorted(found, key=lambda x: -x[1].body[0].lineno):
            first, last = node.body[0].lineno, node.body[-1].end_lineno or node.body[-1].lineno
            indent = " " * node.body[0].col_offset
            # the message names no function: it would tell a cheater which one is missing
            lines[first - 1:last] = [f"{indent}raise RuntimeError('a reference a question being graded compares "
                                     f"with: not available while grading')"]
            removed.append(f"{path.relative_to(lib).with_suffix('').as_posix().replace('/', '.')}:{qual}")
        path.write_text("\n".join(lines), encoding="utf-8")
    return sorted(removed)


# what the grading machinery itself needs in the student's process (the codec rebuilds tokenizers)
INFRASTRUCTURE = frozenset({"labsupport.datasets.tokenizer:Tokenizer.from_bytes"})


def _setup_seeds(setup: str) -> set[str]:
    """The labsupport functions the setup cells import by name (``from labsupport.x import f, Cls``; a class
    gives all its methods)."""
    tree = parse(setup)
    seeds: set[str] = set()
    for node in ast.walk(tree) if tree is not None else ():
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("labsupport"):
            try:
                module = importlib.import_module(node.module)
            except ImportError:
                continue
            seeds |= reach.named({a.name for a in node.names}, vars(module), whole_classes=True)
    return seeds


def hidden_references(chapter: Any) -> tuple[list[str], list[str]]:
    """``(hidden, kept)``: the chapter's reference functions the student's copy goes without, and
    those it keeps because the exercise's own setup cells call them (by name or through what they call
    or build), or the grading machinery needs them (:data:`INFRASTRUCTURE`) — with everything a kept
    function itself calls (chapter 5's kept ``bus_bandwidth`` calls ``bus_factor``: hiding that would
    break the exercise's own setup cell).  Kept ones cannot be hidden, and the header names them."""

    setup = "\n".join(c.source for c in chapter.cells if c.kind == "setup")
    specs = sorted({s for q in chapter.questions for s in q.references})
    seeds = {s for s in specs if s in INFRASTRUCTURE
             or re.search(rf"\b{re.escape(s.rpartition(':')[2].split('.')[-1])}\b", setup)}
    kept = reach.reached(seeds | _setup_seeds(setup)) & set(specs)
    return [s for s in specs if s not in kept], sorted(kept)
