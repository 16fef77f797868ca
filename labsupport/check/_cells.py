"""Answer cells that did not run, reported at their check (every exercise notebook, chapters 0–6).

In a notebook, a learner's answer cell that fails to compile defines nothing, so the check cell
below it would die with ``NameError: name 'dp_slice' is not defined`` — or, worse, quietly test
an older version of the function (the stub: "not attempted"). Importing ``labsupport.check``
inside IPython calls :func:`watch`, which

* records, after every cell, the names a failed cell was meant to define (``def``/``class``/
  assignments at its top level) and why it failed — ``SyntaxError on line 2: invalid syntax``;
* forgets them again when a later run of a cell defines them successfully;
* turns the ``NameError`` of a check cell (``check.q1(dp_slice)``) whose name belongs to such a
  cell into one line: ``❌ q1 failed — your answer cell did not run: SyntaxError on line 2 …``.

The check wrapper asks :func:`broken_answer` about every object it is given, so an older
definition is never graded silently. Outside IPython nothing is installed.

This module imports nothing of ``labsupport.check``: :func:`watch` is given the function that records
a check cell that could not call its check (``_core.report_unrun``), so ``_core`` can ask
:func:`broken_answer` without an import cycle.
"""
from __future__ import annotations

import ast
import functools
import re
import traceback
from collections.abc import Callable
from typing import Any

#: name → why the last cell that tried to define it failed
_BROKEN: dict[str, str] = {}
_DEFINES = re.compile(r"^(?:async\s+def|def|class)\s+([A-Za-z_]\w*)|^([A-Za-z_]\w*)\s*(?::[^=]*)?=(?!=)", re.M)
_CHECK_CALL = re.compile(r"\bcheck\.(q\d+)\s*\(")
_INSTALLED: set[int] = set()


def defined_names(source: str) -> set[str]:
    """Top-level names a cell defines; works on source that does not compile (a regex then)."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return {a or b for a, b in _DEFINES.findall(source)}
    names: set[str] = set()
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names.update(t.id for t in targets if isinstance(t, ast.Name))
    return names


def _cell_line(exc: BaseException) -> str:
    """'line N' of the failing cell: SyntaxError's own line, else the cell's innermost frame."""
    if isinstance(exc, SyntaxError):
        return f"line {exc.lineno}" if exc.lineno else "an unknown line"
    frames = [f for f in traceback.extract_tb(exc.__traceback__)
              if "ipykernel_" in f.filename or f.filename.startswith("<ipython-input")]
    return f"line {frames[-1].lineno}" if frames else "an unknown line"


def why(exc: BaseException) -> str:
    """One line saying how a cell failed, e.g. ``SyntaxError on line 2: invalid syntax``."""
    text = exc.msg if isinstance(exc, SyntaxError) else str(exc)
    return f"{type(exc).__name__} on {_cell_line(exc)}: {text}"


def record(source: str, error: BaseException | None) -> None:
    """After a cell ran: remember (error) or forget (success) the names it defines."""
    if _CHECK_CALL.search(source) and error is not None and isinstance(error, NameError):
        return  # the check cell's own NameError says nothing about the answer cell
    for name in defined_names(source):
        if error is None:
            _BROKEN.pop(name, None)
        else:
            _BROKEN[name] = why(error)


def _did_not_run(name: str) -> str:
    if _BROKEN[name].startswith("SyntaxError") or _BROKEN[name].startswith("IndentationError"):
        return f"your answer cell did not run: {_BROKEN[name]}"
    return f"your answer cell stopped with {_BROKEN[name]}"


def broken_answer(*objects: Any) -> str | None:
    """If an object given to a check was defined by a cell whose last run failed: why it failed."""
    for obj in objects:
        name = getattr(obj, "__name__", None)
        if isinstance(name, str) and name in _BROKEN:
            older = " — the check would test an older `{}`".format(name) if "did not run" in _did_not_run(name) \
                else ""
            return f"{_did_not_run(name)}{older}; fix the cell so it runs to the end, run it, then run this check again"
    return None


def _missing_name(exc: BaseException) -> str | None:
    name = getattr(exc, "name", None)
    if name:
        return name
    m = re.search(r"name '([^']+)' is not defined", str(exc))
    return m.group(1) if m else None


def _on_name_error(shell: Any, etype: type, value: BaseException, tb: Any, tb_offset: Any = None, *,
                   report: Callable[[str, str, str], Any]) -> Any:
    """IPython custom handler: a check cell's NameError for a broken answer → one line, recorded
    by ``report(chapter, question, reason)``."""
    cell = getattr(shell, "_labsupport_cell", "") or ""
    question = _CHECK_CALL.search(cell)
    name = _missing_name(value)
    if question is None or name is None:
        return shell.showtraceback((etype, value, tb), tb_offset=tb_offset)
    reason = (f"{_did_not_run(name)} — so `{name}` was never defined; fix that cell "
              "and run it, then run this check again") if name in _BROKEN else \
        f"`{name}` is not defined — run the answer cell above this check first (Shift+Enter), then this one"
    module = shell.user_ns.get("check")
    report(getattr(module, "CHAPTER", "?"), question.group(1), reason)
    return None


def watch(report: Callable[[str, str, str], Any]) -> bool:
    """Install the hooks in the running IPython shell (once); False outside IPython.  ``report`` records
    a check cell that could not call its check (``labsupport.check._core.report_unrun``)."""
    try:
        from IPython import get_ipython  # noqa: PLC0415 - IPython is optional: the module imports without a kernel
    except ImportError:
        return False
    shell = get_ipython()
    if shell is None or id(shell) in _INSTALLED:
        return shell is not None
    _INSTALLED.add(id(shell))

    def pre(info: Any) -> None:
        shell._labsupport_cell = getattr(info, "raw_cell", "") or ""

    def post(result: Any) -> None:
        source = getattr(getattr(result, "info", None), "raw_cell", "") or ""
        record(source, result.error_before_exec or result.error_in_exec)

    shell.events.register("pre_run_cell", pre)
    shell.events.register("post_run_cell", post)
    shell.set_custom_exc((NameError,), functools.partial(_on_name_error, report=report))
    return True
