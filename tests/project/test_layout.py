"""labsupport's layers (README "Layout"): base modules ← datasets ← models/distributed ← training ←
pages/check ← workbook ← ``labsupport/__main__`` (the one entry point, ``python -m labsupport <command>``).
No module imports from a layer above its own, pages and check do not import each other, and no two
modules import each other, directly or through others — a package's ``__init__`` included (imports
inside functions count)."""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

from labsupport.paths import REPO_ROOT

PKG = REPO_ROOT / "labsupport"
BASE = {"env", "paths", "progress", "config", "fileio", "cli", "stack_facts"}
ENTRY = {"__main__"}                        # the one entry point (it imports its commands by name)
#: layer of each part; a module may import only from parts of its own layer or below.  A part whose
#: folder does not exist (yet) is simply never looked up.
LAYER = {"base": 0, "datasets": 1, "models": 2, "distributed": 2, "training": 3, "pages": 4, "check": 4,
         "workbook": 5, "entry": 6}
#: parts of one layer that must not import each other (either direction)
FORBIDDEN = {frozenset({"pages", "check"})}


def _module_name(path: Path) -> str:
    rel = path.relative_to(REPO_ROOT).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def _part(module: str) -> str:
    parts = module.split(".")
    if len(parts) == 1:
        return "base"                       # labsupport/__init__.py re-exports base names only
    head = parts[1]
    if head in BASE:
        return "base"
    if head in ENTRY and len(parts) == 2:
        return "entry"
    return head


def imports(module: str, source: str, known: set[str]) -> set[str]:
    """The modules of ``known`` that ``module`` (whose text is ``source``) imports, plus ``<relative>``
    for a relative import.  ``from P import m`` of a submodule ``m`` is an edge to ``P.m``, and also to
    ``P`` itself (its ``__init__`` runs first) unless ``module`` lies inside ``P``, where ``P`` is
    already importing; ``from P import name`` of anything else is an edge to ``P``."""
    root = module.split(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom) and node.level:
            found.add("<relative>")
        elif isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == root:
            subs = {f"{node.module}.{a.name}" for a in node.names} & known
            inside = module == node.module or module.startswith(node.module + ".")
            found |= subs
            if len(subs) < len(node.names) or not inside:
                found.add(node.module)
        elif isinstance(node, ast.Import):
            found |= {a.name for a in node.names if a.name.split(".")[0] == root}
    return {i for i in found if i in known or i == "<relative>"}


def import_graph(sources: dict[str, str]) -> dict[str, set[str]]:
    """module → the modules (of ``sources``) it imports, from each module's source text."""
    known = set(sources)
    return {m: imports(m, text, known) for m, text in sources.items()}


def import_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Every group of two or more modules that import each other, directly or through others
    (the strongly connected components of ``graph``; Tarjan's algorithm, iterative)."""
    order: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles: list[list[str]] = []
    for start in sorted(graph):
        if start in order:
            continue
        work = [(start, iter(sorted(graph[start] - {"<relative>"})))]
        order[start] = low[start] = len(order)
        stack.append(start)
        on_stack.add(start)
        while work:
            v, children = work[-1]
            w = next(children, None)
            if w is not None:
                if w not in graph:
                    continue
                if w not in order:
                    order[w] = low[w] = len(order)
                    stack.append(w)
                    on_stack.add(w)
                    work.append((w, iter(sorted(graph[w] - {"<relative>"}))))
                elif w in on_stack:
                    low[v] = min(low[v], order[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == order[v]:
                comp = []
                while True:
                    w = stack.pop()
                    on_stack.discard(w)
                    comp.append(w)
                    if w == v:
                        break
                if len(comp) > 1:
                    cycles.append(sorted(comp))
    return sorted(cycles)


MODULES = {_module_name(p): p for p in sorted(PKG.rglob("*.py"))}
GRAPH = import_graph({m: p.read_text(encoding="utf-8") for m, p in MODULES.items()})


def test_every_module_has_a_known_part():
    unknown = {m: _part(m) for m in MODULES if _part(m) not in LAYER}
    assert not unknown, f"modules outside the documented layout: {unknown}"


def test_the_entry_points_commands_are_modules_of_the_layout():
    """``__main__`` imports its commands by name (importlib), which the import graph cannot see."""
    from labsupport.__main__ import COMMANDS

    assert _part("labsupport.__main__") == "entry"
    assert {c.module for c in COMMANDS.values()} <= set(MODULES)
    assert all(LAYER[_part(c.module)] < LAYER["entry"] for c in COMMANDS.values())


def test_no_relative_imports():
    offenders = [m for m, deps in GRAPH.items() if "<relative>" in deps]
    assert not offenders, f"use absolute labsupport.… imports (as Megatron does): {offenders}"


@pytest.mark.parametrize("module", sorted(MODULES))
def test_imports_stay_at_or_below_the_module_layer(module):
    mine = LAYER[_part(module)]
    above = sorted(d for d in GRAPH[module] if d != "<relative>" and LAYER[_part(d)] > mine
                   and not (module == "labsupport" and _part(d) == "base"))
    assert not above, f"{module} ({_part(module)}, layer {mine}) imports from a higher layer: {above}"


def test_pages_and_check_do_not_import_each_other():
    crossing = sorted(f"{m} → {d}" for m, deps in GRAPH.items() for d in deps - {"<relative>"}
                      if frozenset({_part(m), _part(d)}) in FORBIDDEN)
    assert not crossing, f"parts that must not import each other do: {crossing}"


def test_no_import_cycles():
    cycles = import_cycles(GRAPH)
    assert not cycles, f"import cycles: {cycles}"


# --- the detector itself, on small synthetic packages ---------------------------------------------
def test_the_detector_sees_a_cycle_between_two_children_of_a_package():
    """check/_core ↔ check/_cells as it was: the package's __init__ imports both, each imports the
    other with ``from pkg import …`` (one of them inside a function)."""
    graph = import_graph({
        "pkg": "from pkg import _cells\nfrom pkg._core import check\n",
        "pkg._core": "from pkg import _cells\n",
        "pkg._cells": "def handler():\n    from pkg import _core\n",
    })
    assert graph["pkg._cells"] == {"pkg._core"} and graph["pkg._core"] == {"pkg._cells"}
    assert import_cycles(graph) == [["pkg._cells", "pkg._core"]]


def test_the_detector_sees_a_cycle_through_a_package_init():
    """pkg/__init__ imports pkg.a, and pkg.a needs a name that pkg/__init__ defines: a cycle that only
    works while the __init__ happens to have defined that name already."""
    graph = import_graph({
        "pkg": "from pkg.a import f\nLIMIT = 3\n",
        "pkg.a": "from pkg import LIMIT\n",
        "other": "import pkg.a\n",
    })
    assert import_cycles(graph) == [["pkg", "pkg.a"]]


def test_the_detector_sees_a_cycle_into_another_package_init():
    graph = import_graph({
        "top": "", "top.x": "from top.y import helper\n",
        "top.y": "from top.x import thing\n",          # not a package: a plain two-module cycle
        "top.p": "from top.p.m import g\n", "top.p.m": "from top import x\n",
        "top.q": "from top.p import g\n",              # edge into p's __init__, which reaches x
    })
    assert import_cycles(graph) == [["top.x", "top.y"]]
    graph["top.x"] |= {"top.q"}                        # x → q → p/__init__ → p.m → x
    assert import_cycles(graph) == [["top.p", "top.p.m", "top.q", "top.x", "top.y"]]


def test_a_package_init_importing_its_children_is_no_cycle():
    graph = import_graph({
        "pkg": "from pkg import a, b\nfrom pkg.b import g\n",
        "pkg.a": "from pkg import b\n",
        "pkg.b": "import os\n",
    })
    assert graph == {"pkg": {"pkg.a", "pkg.b"}, "pkg.a": {"pkg.b"}, "pkg.b": set()}
    assert import_cycles(graph) == []
