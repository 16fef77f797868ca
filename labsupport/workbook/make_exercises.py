"""Generate ``exercises/NN_topic.ipynb`` from ``solutions/NN_topic.ipynb`` (workbook tooling).

Every region between a ``### BEGIN SOLUTION`` line and a ``### END SOLUTION`` line becomes
``raise NotImplementedError(...)`` at the BEGIN marker's indentation; outputs and execution
counts are cleared.  ``--check`` exits 1 when exercises/ is stale (the tests call it).

    python -m labsupport make-exercises           # write exercises/
    python -m labsupport make-exercises --check   # is exercises/ up to date?
"""
from __future__ import annotations

import argparse
import copy
import re
import sys
from pathlib import Path

import nbformat

from labsupport.workbook.nbrun import write_notebook
from labsupport.cli import run_command
from labsupport.paths import REPO_ROOT

BEGIN = "### BEGIN SOLUTION"
END = "### END SOLUTION"
STUB = 'raise NotImplementedError("exercise: replace this line with your code")'
_MARK = re.compile(r"^(?P<indent>[ \t]*)(?P<mark>### (BEGIN|END) SOLUTION)\s*$")

BANNER = (
    "> **Exercise notebook** — complete each function that raises `NotImplementedError`, then run the\n"
    "> `check.qN(...)` cell below it. The check calls your function on inputs it draws itself (so a\n"
    "> hard-coded answer fails) and compares with the workbook's reference. A failed check first names\n"
    "> what your result shows and asks a question; make the same mistake again and it says the fix.\n"
    "> If your answer cell does not run (a SyntaxError, an exception), the check says so.\n"
    "> The notebook runs top to bottom even while exercises are unfinished.\n"
    ">\n"
    "> **Grading:** the grader runs your answers in a sandbox with its own checks. An answer that calls\n"
    "> the `labsupport` function a question compares with (the reference), imports `labsupport.check`,\n"
    "> or calls a check from inside an answer is flagged: 0 for that question unless the instructor overrides it."
)


class SolutionMarkupError(ValueError):
    """Unbalanced or nested BEGIN/END SOLUTION markers."""


def strip_solutions(source: str, where: str = "cell") -> tuple[str, int]:
    """Replace each solution region in ``source``; returns (new source, number of regions)."""
    out: list[str] = []
    inside = False
    regions = 0
    for lineno, line in enumerate(source.split("\n"), 1):
        m = _MARK.match(line)
        if m and m.group("mark") == BEGIN:
            if inside:
                raise SolutionMarkupError(f"{where}, line {lineno}: BEGIN SOLUTION inside another solution region")
            inside = True
            regions += 1
            out.append(f"{m.group('indent')}{STUB}")
        elif m and m.group("mark") == END:
            if not inside:
                raise SolutionMarkupError(f"{where}, line {lineno}: END SOLUTION without a BEGIN SOLUTION")
            inside = False
        elif not inside:
            out.append(line)
    if inside:
        raise SolutionMarkupError(f"{where}: BEGIN SOLUTION is never closed by END SOLUTION")
    return "\n".join(out), regions


def make_exercise(solution: nbformat.NotebookNode, name: str, banner: str | None = None,
                  title: tuple[str | None, str | None] = (None, None)) -> nbformat.NotebookNode:
    """The exercise version of a solution notebook (no solutions, no outputs).  Another edition
    (:mod:`labsupport.workbook.translations`) passes its own ``banner`` and the ``title`` words to
    replace, (the solutions' words, the exercises' words)."""
    old, new = title[0] or "exercises with solutions", title[1] or "exercises"
    nb = copy.deepcopy(solution)
    total = 0
    for i, cell in enumerate(nb.cells):
        cell.metadata.pop("execution", None)
        if cell.cell_type != "code":
            continue
        cell.source, n = strip_solutions(cell.source, where=f"{name}, cell {i}")
        total += n
        cell.outputs = []
        cell.execution_count = None
    if nb.cells and nb.cells[0].cell_type == "markdown":  # "…: exercises with solutions" → "…: exercises"
        nb.cells[0].source = nb.cells[0].source.replace(old, new, 1)
    if total == 0:
        raise SolutionMarkupError(f"{name}: no '### BEGIN SOLUTION' region found; is this a solutions notebook?")
    nb.cells.insert(1, nbformat.v4.new_markdown_cell((banner or BANNER).format(name=name), id="exercise-banner"))
    nb.metadata.pop("widgets", None)
    nb.metadata.pop("papermill", None)
    return nb


def render(nb: nbformat.NotebookNode) -> str:
    text = nbformat.writes(nb)
    return text if text.endswith("\n") else text + "\n"


def main(argv: list[str] | None = None) -> int:
    """Run the command. Exit status: 0 done (or, with --check, nothing stale); 1 stale exercises
    (--check) or an error such as unbalanced solution markers (one line on stderr); 2 usage error;
    130 interrupted (Ctrl-C)."""
    return run_command("make_exercises", lambda: _main(argv),
                       {SolutionMarkupError: 1, nbformat.reader.NotJSONError: 1})


def _main(argv: list[str] | None) -> int:
    ap = argparse.ArgumentParser(prog="python -m labsupport make-exercises", description=__doc__.split("\n\n")[0],
                                 epilog="exit status: 0 done, 1 stale (--check) or an error, 2 usage error, "
                                        "130 interrupted")
    ap.add_argument("--check", action="store_true", help="only report whether exercises/ is stale")
    ap.add_argument("--solutions", default=str(REPO_ROOT / "solutions"))
    ap.add_argument("--exercises", default=str(REPO_ROOT / "exercises"))
    args = ap.parse_args(argv)
    src_dir, dst_dir = Path(args.solutions), Path(args.exercises)
    if not any(src_dir.glob("[0-9][0-9]_*.ipynb")):
        raise SolutionMarkupError(f"no solutions notebooks (NN_topic.ipynb) in {src_dir}")
    stale: list[str] = []
    expected = set()
    for sol in sorted(src_dir.glob("[0-9][0-9]_*.ipynb")):
        expected.add(sol.name)
        exercise = make_exercise(nbformat.read(sol, as_version=4), sol.name)
        target = dst_dir / sol.name
        current = target.read_text(encoding="utf-8") if target.is_file() else None
        if current == render(exercise):
            continue
        if args.check:
            stale.append(sol.name)
        else:
            dst_dir.mkdir(parents=True, exist_ok=True)
            write_notebook(exercise, target)
            print(f"wrote exercises/{sol.name}")
    extra = sorted(p.name for p in dst_dir.glob("[0-9][0-9]_*.ipynb") if p.name not in expected)
    if args.check:
        problems = [f"exercises/{n} is stale: run `make exercises`" for n in stale]
        problems += [f"exercises/{n} has no solutions/{n}" for n in extra]
        for p in problems:
            print(p)
        return 1 if problems else 0
    for n in extra:
        print(f"warning: exercises/{n} has no solutions/{n}", file=sys.stderr)
    return 0

