"""labsupport's layers (README "Layout"): base modules ← datasets ← models/distributed ← training ←
check/workbook ← the ``python -m`` entry modules.  No module imports from a layer above its own,
and no two modules import each other, directly or through others (imports inside functions count)."""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

from labsupport.paths import REPO_ROOT

PKG = REPO_ROOT / "labsupport"
BASE = {"env", "paths", "progress", "config", "fileio", "cli"}
ENTRY = {"preprocess", "runall", "grade", "make_exercises", "train"}
#: layer of each part; a module may import only from parts of its own layer or below
LAYER = {"base": 0, "datasets": 1, "models": 2, "distributed": 2, "training": 3, "check": 4, "workbook": 4,
         "entry": 5}


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


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            if node.module.split(".")[0] == "labsupport":
                found.add(node.module)
                for alias in node.names:   # `from labsupport.datasets import blending` imports a module
                    sub = f"{node.module}.{alias.name}"
                    if (PKG / Path(*sub.split(".")[1:])).with_suffix(".py").exists():
                        found.add(sub)
        elif isinstance(node, ast.ImportFrom) and node.level:
            found.add("<relative>")
        elif isinstance(node, ast.Import):
            found |= {a.name for a in node.names if a.name.split(".")[0] == "labsupport"}
    return found


MODULES = {_module_name(p): p for p in sorted(PKG.rglob("*.py"))}
GRAPH = {m: {i for i in _imports(p) if i in MODULES or i == "<relative>"} for m, p in MODULES.items()}


def test_every_module_has_a_known_part():
    unknown = {m: _part(m) for m in MODULES if _part(m) not in LAYER}
    assert not unknown, f"modules outside the documented layout: {unknown}"


def test_no_relative_imports():
    offenders = [m for m, deps in GRAPH.items() if "<relative>" in deps]
    assert not offenders, f"use absolute labsupport.… imports (as Megatron does): {offenders}"


@pytest.mark.parametrize("module", sorted(MODULES))
def test_imports_stay_at_or_below_the_module_layer(module):
    mine = LAYER[_part(module)]
    above = sorted(d for d in GRAPH[module] if d != "<relative>" and LAYER[_part(d)] > mine
                   and not (module == "labsupport" and _part(d) == "base"))
    assert not above, f"{module} ({_part(module)}, layer {mine}) imports from a higher layer: {above}"


def test_no_import_cycles():
    order, low, stack, on_stack, cycles = {}, {}, [], set(), []

    def visit(v):
        order[v] = low[v] = len(order)
        stack.append(v)
        on_stack.add(v)
        for w in GRAPH[v] - {"<relative>"}:
            if w not in order:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], order[w])
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

    for v in GRAPH:
        if v not in order:
            visit(v)
    # a package's __init__ importing its own children is not a cycle worth refusing
    cycles = [c for c in cycles if not all(x == c[0] or x.startswith(c[0] + ".") for x in c)]
    assert not cycles, f"import cycles: {cycles}"
