"""Every parameter of every chapter is found by papermill (issue #13 item 10).

`python -m labsupport runall -p NAME VALUE NN` injects values through papermill, which parses
the `parameters` cell line by line (`papermill.inspect_notebook`). A line it cannot parse — for
example a comment holding a second `=` — is skipped with a log warning, and `-p NAME` then
fails with "Passed unknown parameter". This test compares papermill's view with Python's own.
"""
from __future__ import annotations

import ast
import logging

import nbformat
import papermill
import pytest

from labsupport.paths import REPO_ROOT

CHAPTERS = sorted((REPO_ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))


def _parameters_cell(path):
    nb = nbformat.read(path, as_version=4)
    cells = [c for c in nb.cells if "parameters" in c.get("metadata", {}).get("tags", [])]
    return cells


def _evaluate(expression: str) -> object:
    """The value of a constant expression such as ``4 << 20`` or ``[1, 2]`` (no names, no calls)."""
    tree = ast.parse(expression, mode="eval")
    if any(isinstance(n, (ast.Name, ast.Call, ast.Attribute)) for n in ast.walk(tree)):
        raise ValueError(f"not a constant expression: {expression!r}")
    return eval(compile(tree, "<parameter>", "eval"), {"__builtins__": {}})  # noqa: S307 - constants only


def _assigned(source: str) -> dict[str, object]:
    """name → value of each top-level `name = literal` in the cell, as Python reads it."""
    values = {}
    for node in ast.parse(source).body:
        if isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for t in targets:
                if isinstance(t, ast.Name):
                    values[t.id] = _evaluate(ast.unparse(node.value))
    return values


def parameter_problems(path) -> list[str]:
    """What papermill gets wrong about the chapter's parameters cell (empty list = nothing)."""
    cells = _parameters_cell(path)
    if len(cells) != 1:
        return [f"{len(cells)} cells tagged 'parameters' (expected exactly 1)"]
    python = _assigned(cells[0].source)
    found = papermill.inspect_notebook(str(path))
    problems = []
    for name, value in python.items():
        if name not in found:
            line = next(i for i, s in enumerate(cells[0].source.splitlines(), 1) if s.startswith(name))
            problems.append(f"line {line} ({name}) is not found by papermill — a comment with '=' hides it")
            continue
        try:
            parsed = _evaluate(found[name]["default"])
        except (ValueError, SyntaxError) as exc:
            problems.append(f"{name}: papermill reads the default {found[name]['default']!r} ({exc})")
            continue
        if parsed != value:
            problems.append(f"{name}: papermill reads {parsed!r}, Python {value!r}")
    problems += [f"{name}: papermill finds a parameter Python does not assign" for name in set(found) - set(python)]
    return problems


def test_there_are_chapters():
    assert len(CHAPTERS) >= 6, [p.name for p in CHAPTERS]


def test_papermill_parses_every_parameter_of_every_chapter():
    report = {p.name: parameter_problems(p) for p in CHAPTERS}
    failing = {name: probs for name, probs in report.items() if probs}
    assert not failing, "papermill misreads parameters:\n" + "\n".join(
        f"  {name}: {'; '.join(probs)}" for name, probs in failing.items())


def test_the_checker_catches_a_comment_with_an_equals_sign(tmp_path):
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(
        "seed = 0\nvocab_size = 8000   # 8000 = the standard\n", metadata={"tags": ["parameters"]})])
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    path = tmp_path / "99_x.ipynb"
    nbformat.write(nb, path)
    logging.getLogger("papermill").setLevel(logging.ERROR)
    problems = parameter_problems(path)
    assert len(problems) == 1 and "vocab_size" in problems[0] and "line 2" in problems[0], problems


@pytest.mark.parametrize("path", CHAPTERS, ids=lambda p: p.stem)
def test_every_chapter_has_seed_and_device(path):
    names = _assigned(_parameters_cell(path)[0].source)
    assert {"seed", "device"} <= set(names), f"{path.name}: parameters {sorted(names)}"
