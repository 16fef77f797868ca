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

import functools
import importlib
import shutil
from pathlib import Path
from typing import Any

from labsupport.paths import REPO_ROOT

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
        if getattr(value, "is_check", False) or name == "summary" or (callable(value) and
                                                                      getattr(value, "__module__", "") == module.__name__):
            callables.append(name)
        elif _plain(value):
            lines.append(f"{name} = {value!r}")
    lines += ["", "", "def _graded_elsewhere(*args, **kwargs):",
              "    print('(checks run in the grader while grading, not in this process)')", "    return None", ""]
    lines += [f"{name} = _graded_elsewhere" for name in sorted(callables)]
    lines += ["", "", "def __getattr__(name):",
              f"    raise AttributeError(f'labsupport.check.{module_name}.{{name}} is not available while grading')", ""]
    return "\n".join(lines)


def write_check_stubs(folder: Path) -> None:
    """Replace the check package copied into ``folder`` (``…/labsupport/check``) by stubs."""
    folder = Path(folder)
    names = sorted(p.stem for p in (REPO_ROOT / "labsupport" / "check").glob("ch*.py"))
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    (folder / "__init__.py").write_text('"""Check stubs: while grading, every check runs in the grader."""\n',
                                        encoding="utf-8")
    for name in names:
        (folder / f"{name}.py").write_text(stub_source(name), encoding="utf-8")
