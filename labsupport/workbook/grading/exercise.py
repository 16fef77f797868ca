"""What the grader knows about each chapter, and how a submission is read against it.

A chapter is discovered from ``exercises/NN_topic.ipynb`` (the instructor's pristine exercise
notebook) and the check module it imports (``from labsupport.check import chNN as check``):

* **answer cells** — code cells holding the exercise stub (``raise NotImplementedError(...)``);
* **check cells** — cells calling ``check.qN(name, ...)`` (or ``check.summary()``): they tell which
  functions each question grades; they are never taken from a submission;
* **setup cells** — every other code cell, run as the instructor wrote it.

From a submission only the answer cells are taken (matched by cell id, or by the function they
define when ids were changed), and the notebook is rebuilt from the pristine one.
"""
from __future__ import annotations

import ast
import importlib
import inspect
import json
import re
import types
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from labsupport.paths import REPO_ROOT
from labsupport.workbook.grading import reach
from labsupport.workbook.grading.source import parse
from labsupport.workbook.make_exercises import STUB
import nbformat

MAX_NOTEBOOK_BYTES = 256 * 1024 * 1024   # figures make notebooks big; only code cells are kept
_CHECK_IMPORT = re.compile(r"from\s+labsupport\.check\s+import\s+(ch\w+)\s+as\s+check\b")
_NAME = re.compile(r"^(\d\d)_")


@dataclass
class Cell:
    index: int
    id: str
    kind: str                  # "setup" | "answer" | "check"
    source: str
    defines: list[str] = field(default_factory=list)


@dataclass
class Question:
    name: str                  # "q1"
    functions: list[str]       # the names passed to check.qN(...)
    cells: list[str]           # ids of the answer cells defining them
    points: float
    references: list[str]      # "module:qualname" of labsupport functions its check compares with


@dataclass
class Chapter:
    key: str                   # "ch03"
    number: str                # "03"
    notebook: Path             # exercises/03_blending.ipynb
    module: types.ModuleType   # labsupport.check.ch03
    cells: list[Cell]
    questions: list[Question]

    @property
    def max_points(self) -> float:
        return sum(q.points for q in self.questions)

    def cell(self, cell_id: str) -> Cell:
        return next(c for c in self.cells if c.id == cell_id)


def _source(cell: dict) -> str:
    src = cell.get("source", "")
    if isinstance(src, list):
        if not all(isinstance(s, str) for s in src):
            raise ValueError("a cell's source holds something other than text")
        return "".join(src)
    if not isinstance(src, str):
        raise ValueError("a cell's source is neither text nor a list of lines")
    return src


def _defined(source: str) -> list[str]:
    tree = parse(source)
    if tree is None:
        return re.findall(r"^\s*def\s+(\w+)\s*\(", source, re.M)
    return [n.name for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]


def _check_calls(source: str) -> list[tuple[str, list[str]]]:
    tree = parse(source)
    if tree is None:
        return []
    calls = []
    for node in ast.walk(tree):
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                and isinstance(node.func.value, ast.Name) and node.func.value.id == "check"):
            calls.append((node.func.attr, [a.id for a in node.args if isinstance(a, ast.Name)]))
    return calls


def _reachable(body: Any) -> list[tuple[set[str], dict[str, Any]]]:
    """``(names, globals)`` of the check body and of every ``labsupport.check`` function it reaches by
    name, transitively — helpers, the rule engine, a chapter's shared mistakes — each with the
    namespace its names resolve in."""
    seen: set[int] = set()
    todo, out = [body], []
    while todo:
        fn = todo.pop()
        if id(fn.__code__) in seen:
            continue
        seen.add(id(fn.__code__))
        names, scope = reach.code_names(fn.__code__), fn.__globals__
        out.append((names, scope))
        for name in names:
            obj = inspect.unwrap(scope[name]) if inspect.isfunction(scope.get(name)) else None
            if obj is not None and getattr(obj, "__module__", "").startswith("labsupport.check"):
                todo.append(obj)
    return out


def check_roots(check_fn: Any) -> set[str]:
    """The labsupport functions (outside ``labsupport.check``) a check's body and the ``labsupport.check``
    helpers it reaches name."""
    return set().union(*(reach.named(names, scope) for names, scope in _reachable(inspect.unwrap(check_fn))))


def references(check_fn: Any) -> list[str]:
    """The ``labsupport`` functions a check compares with, ``"module:qualname"`` each: what its body and
    helpers name, closed over callers and callees (:func:`labsupport.workbook.grading.reach.references`)."""
    return reach.references(check_roots(check_fn))


def load_chapter(notebook: Path) -> Chapter:
    """Read one pristine exercise notebook and its check module."""
    nb = json.loads(Path(notebook).read_text(encoding="utf-8"))
    cells: list[Cell] = []
    module_name = None
    for i, raw in enumerate(nb["cells"]):
        if raw.get("cell_type") != "code":
            continue
        src = _source(raw)
        m = _CHECK_IMPORT.search(src)
        if m and module_name is None:
            module_name = m.group(1)
        calls = _check_calls(src)
        graded = [c for c in calls if re.fullmatch(r"q\d+", c[0]) or c[0] == "summary"]
        kind = "check" if graded and all(re.fullmatch(r"q\d+", c[0]) or c[0] == "summary" for c in calls) else (
            "answer" if STUB in src else "setup")
        cells.append(Cell(i, raw.get("id") or f"cell-{i}", kind, src, _defined(src)))
    if module_name is None:
        raise ValueError(f"{notebook}: no `from labsupport.check import chNN as check` cell")
    module = importlib.import_module(f"labsupport.check.{module_name}")
    questions: list[Question] = []
    for cell in cells:
        if cell.kind != "check":
            continue
        for qname, functions in _check_calls(cell.source):
            if not re.fullmatch(r"q\d+", qname):
                continue
            fn = getattr(module, qname)
            where = [c.id for c in cells if c.kind == "answer" and set(c.defines) & set(functions)]
            questions.append(Question(qname, functions, where, float(getattr(fn, "points", 1.0)),
                                      references(fn)))
    number = _NAME.match(Path(notebook).name).group(1)
    return Chapter(getattr(module, "CHAPTER", module_name), number, Path(notebook), module, cells, questions)


def discover(exercises: Path | None = None) -> dict[str, Chapter]:
    """Every chapter with an exercise notebook, keyed by its number (``"03"``)."""
    folder = Path(exercises) if exercises else REPO_ROOT / "exercises"
    return {ch.number: ch for ch in (load_chapter(p) for p in sorted(folder.glob("[0-9][0-9]_*.ipynb")))}


# ---------------------------------------------------------------------------------------------
class Unreadable(ValueError):
    """A submission that is not a readable notebook (the reason says why)."""


def read_submission(path: Path) -> list[dict]:
    """The code cells of a submitted notebook (``{"id", "source"}``), validated."""
    path = Path(path)
    if path.is_symlink():  # a link could point at solutions/, a classmate's file or a root-only one
        raise Unreadable("a symbolic link, not a notebook: submit the notebook file itself")
    try:
        size = path.stat().st_size
    except OSError as exc:
        raise Unreadable(f"cannot read the file: {exc.strerror}") from None
    if path.is_dir():
        raise Unreadable("a folder named like a notebook: submit the notebook file itself")
    if size == 0:
        raise Unreadable("the file is empty")
    if size > MAX_NOTEBOOK_BYTES:
        raise Unreadable(f"the file is {size} bytes, more than a notebook should be ({MAX_NOTEBOOK_BYTES})")
    try:
        data = path.read_bytes()
    except OSError as exc:  # unreadable to the grader (mode 000, a special file)
        raise Unreadable(f"cannot read the file: {exc.strerror}") from None
    try:
        nb = json.loads(data.decode("utf-8-sig"))   # an editor's byte-order mark is no error
    except RecursionError:
        raise Unreadable("JSON nested too deeply to be a notebook") from None
    except UnicodeDecodeError as exc:
        raise Unreadable(f"not UTF-8 text (byte {exc.start})") from None
    except json.JSONDecodeError as exc:
        raise Unreadable(f"not JSON: {exc.msg} at line {exc.lineno}, column {exc.colno}") from None
    if isinstance(nb, dict) and (nb.get("nbformat") == 3 or "worksheets" in nb):
        nb = _upgrade(nb)
    if not isinstance(nb, dict) or not isinstance(nb.get("cells"), list):
        raise Unreadable("JSON, but not a notebook: no list of cells")
    out = []
    for i, cell in enumerate(nb["cells"]):
        if not isinstance(cell, dict) or "cell_type" not in cell:
            raise Unreadable(f"cell {i} is not a notebook cell")
        if cell.get("cell_type") != "code":
            continue
        try:
            src = _source(cell)
        except ValueError as exc:
            raise Unreadable(f"cell {i}: {exc}") from None
        cid = cell.get("id")
        out.append({"index": i, "id": cid if isinstance(cid, str) else None, "source": src})
    return out


def _upgrade(nb: dict) -> dict:
    """An nbformat 3 notebook (``worksheets``, ``input``) as nbformat 4, with nbformat's converter."""

    try:
        return dict(nbformat.convert(nbformat.from_dict(nb), 4))
    except Exception as exc:  # noqa: BLE001 - whatever the converter rejects is unreadable
        raise Unreadable(f"an nbformat 3 notebook nbformat cannot upgrade ({type(exc).__name__})") from None


def answer_sources(chapter: Chapter, cells: list[dict]) -> tuple[dict[str, str], dict[str, str]]:
    """``({answer cell id: student's source}, {answer cell id: how it was found})``."""
    by_id = {c["id"]: c for c in cells if c["id"]}
    found: dict[str, str] = {}
    how: dict[str, str] = {}
    used: set[int] = set()
    for cell in chapter.cells:
        if cell.kind != "answer":
            continue
        sub = by_id.get(cell.id)
        if sub is not None and (not cell.defines or set(cell.defines) & set(_defined(sub["source"]))
                                or STUB in sub["source"]):
            found[cell.id], how[cell.id] = sub["source"], "cell id"
            used.add(sub["index"])
            continue
        for c in cells:  # ids changed (a re-created cell, rewritten markers): the function it defines
            if c["index"] not in used and cell.defines and set(cell.defines) <= set(_defined(c["source"])):
                found[cell.id], how[cell.id] = c["source"], "function name"
                used.add(c["index"])
                break
    return found, how


def chapter_of(cells: list[dict], chapters: dict[str, Chapter]) -> str | None:
    """The chapter whose exercise notebook a submission's cells match best (by cell id and by the
    functions it defines), or None."""
    ids = {c["id"] for c in cells if c["id"]}
    defined = {name for c in cells for name in _defined(c["source"])}
    best, score = None, 0.0
    for number, ch in chapters.items():
        own_ids = {c.id for c in ch.cells}
        funcs = {f for q in ch.questions for f in q.functions}
        s = len(ids & own_ids) / max(1, len(own_ids)) + len(defined & funcs) / max(1, len(funcs))
        if s > score:
            best, score = number, s
    return best if score > 0 else None


def strip_magics(source: str) -> str:
    """IPython magics and shell escapes become blank lines (line numbers stay)."""
    return "\n".join("" if line.lstrip().startswith(("%", "!")) else line for line in source.split("\n"))


def student_imports(chapter: Chapter, cells: list[dict], answers: dict[str, str]) -> str:
    """The top-level ``import`` statements of the submission's cells that are not answer cells
    (a student who added ``import math`` to the first cell keeps it); ``labsupport.check`` is left out."""
    taken = set(answers.values())
    pristine = {c.source for c in chapter.cells}
    lines: list[str] = []
    for cell in cells:
        if cell["source"] in taken or cell["source"] in pristine:
            continue
        tree = parse(strip_magics(cell["source"]))
        if tree is None:
            continue
        for node in tree.body:
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                text = ast.unparse(node)
                if "labsupport.check" not in text and text not in lines:
                    lines.append(text)
    return "\n".join(lines)
