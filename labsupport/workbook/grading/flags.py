"""Static reading of an answer cell for what an honest answer never does.

Flags (each scored 0 unless the instructor overrides it):

* ``check-module`` — imports ``labsupport.check`` or reads a private name of the check module
  (``check._CAUSE``, ``check._core``);
* ``oracle`` — runs a check from the answer code (``check.q4(lambda: guess)`` in a loop);
* ``frames`` — walks the interpreter's frames or objects (``sys._getframe``, ``inspect.stack``,
  ``gc.get_referrers``), the way to read a checker's expected value;
* ``reference`` — uses the ``labsupport`` function the question's check compares with;
* ``signals`` — sends signals to other processes (``os.kill(os.getppid(), …)``): the whole
  submission is flagged.

All of it is read by the grader from the submitted source; nothing runs in the student's process
(which could lie).  What a static reading misses is made impossible there instead: its copy of
``labsupport.check`` holds stubs and the question's reference functions raise (:mod:`.stubs`).
"""
from __future__ import annotations

import ast

from labsupport.workbook.grading.source import parse

_SIGNAL_CALLS = {"os.kill", "os.killpg", "signal.pthread_kill", "kill", "killpg", "os.getppid", "getppid",
                 "signal.pidfd_send_signal", "os.pidfd_open"}
_FRAME_NAMES = {"_getframe", "currentframe", "f_back", "f_locals", "f_globals", "getouterframes", "getinnerframes",
                "get_referrers", "get_referents", "get_objects", "settrace", "setprofile", "tb_frame"}


def _dotted(node: ast.AST) -> str | None:
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        parts.append(node.id)
        return ".".join(reversed(parts))
    return None


def static_flags(source: str, reference_specs: list[str]) -> list[str]:
    """Flags (``"name: detail"``) for one answer cell; ``reference_specs`` are the question's
    ``"module:qualname"`` references."""
    tree = parse(source)
    if tree is None:
        return []
    refs = {}
    for spec in reference_specs:
        module, _, qual = spec.partition(":")
        refs[qual.split(".")[-1]] = spec
    labsupport_aliases = {"labsupport"}
    flags: list[str] = []

    def add(flag: str) -> None:
        if flag not in flags:
            flags.append(flag)

    nested: set[int] = set()  # calls inside loops, comprehensions, functions, lambdas or with-blocks
    for outer in ast.walk(tree):
        if isinstance(outer, (ast.For, ast.While, ast.AsyncFor, ast.ListComp, ast.SetComp, ast.DictComp,
                              ast.GeneratorExp, ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.With)):
            nested.update(id(n) for n in ast.walk(outer) if n is not outer)

    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith("labsupport.check"):
                    add(f"check-module: imports {alias.name}")
                if alias.name.startswith("labsupport"):
                    labsupport_aliases.add((alias.asname or alias.name).split(".")[0])
        elif isinstance(node, ast.ImportFrom) and node.module:
            if node.module.startswith("labsupport.check") or (node.module == "labsupport" and
                                                               any(a.name == "check" for a in node.names)):
                add(f"check-module: imports from {node.module}")
            if node.module.startswith("labsupport"):
                for alias in node.names:
                    labsupport_aliases.add(alias.asname or alias.name)
                    if alias.name in refs and refs[alias.name].startswith(node.module + ":"):
                        add(f"reference: imports {node.module}.{alias.name}, the function its check compares with")
        elif isinstance(node, ast.Attribute):
            dotted = _dotted(node) or ""
            root = dotted.split(".")[0]
            if root == "check" and (node.attr.startswith("_") or node.attr == "_core"):
                add(f"check-module: reads check.{node.attr}")
            if node.attr in _FRAME_NAMES:
                add(f"frames: uses {dotted or node.attr}")
            if node.attr in refs and root in labsupport_aliases:
                add(f"reference: uses {dotted}, the function its check compares with")
            if dotted in ("inspect.stack", "inspect.trace"):
                add(f"frames: uses {dotted}")
        elif isinstance(node, ast.Name) and node.id in _FRAME_NAMES:
            add(f"frames: uses {node.id}")
        elif isinstance(node, ast.Call):
            func = _dotted(node.func) or ""
            if func.startswith("check.") and func.split(".")[1][:1] == "q" and func.split(".")[1][1:].isdigit():
                # one plain `check.qN(my_function)` line is what the notebook asks for; a check run
                # in a loop, a function or with a made-up answer is the check used as an oracle
                plain = len(node.args) == 1 and isinstance(node.args[0], ast.Name) and not node.keywords
                if not plain or id(node) in nested:
                    add(f"oracle: runs {func}() on guesses from the answer code")
            if func in _SIGNAL_CALLS:
                add(f"signals: calls {func}() — an answer never signals other processes")
            if func in ("getattr", "setattr", "vars") and node.args and _dotted(node.args[0]) == "check":
                add("check-module: reaches into the check module with getattr/setattr/vars")
            if func in ("importlib.reload", "reload", "__import__", "importlib.import_module") and node.args:
                arg = node.args[0]
                literal = isinstance(arg, ast.Constant) and isinstance(arg.value, str)
                text = arg.value if literal else (_dotted(arg) or "")
                if "check" in text:
                    add(f"check-module: {func}({text})")
    return flags
