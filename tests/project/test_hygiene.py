"""Code hygiene a tool keeps (issue #28, part 6): ruff passes with the ``[tool.ruff]`` rules of
pyproject.toml; no module takes another module's private name; every import inside a function of
``labsupport/`` says why it is lazy (``# noqa: PLC0415 - why``).

The allow-lists name what is still pending (empty now: ruff is clean over the whole repository and
every lazy import gives its reason); each test fails when an entry no longer occurs, so the lists only shrink.
"""
from __future__ import annotations

import ast
import importlib.util
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PACKAGE = REPO / "labsupport"

# --------------------------------------------------------------------------------------------- ruff

#: paths (a folder ends in "/") where ruff still reports something, to be made clean and removed here
RUFF_PENDING: tuple[str, ...] = ()


def _ruff_command() -> list[str] | None:
    """ruff next to this interpreter, on PATH, or as an importable module; None where it is not installed."""
    beside = Path(sys.executable).parent / "ruff"
    if beside.is_file():
        return [str(beside)]
    if shutil.which("ruff"):
        return [shutil.which("ruff")]
    if importlib.util.find_spec("ruff") is not None:
        return [sys.executable, "-m", "ruff"]
    return None


def _pending(path: str) -> str | None:
    for entry in RUFF_PENDING:
        if path == entry or (entry.endswith("/") and path.startswith(entry)):
            return entry
    return None


def test_ruff_check_passes_outside_the_pending_paths():
    ruff = _ruff_command()
    if ruff is None:
        pytest.skip("ruff is not installed in this environment")
    proc = subprocess.run([*ruff, "check", "--output-format", "concise", "--no-cache", "."], cwd=REPO,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode in (0, 1), proc.stderr
    findings = [line for line in proc.stdout.splitlines() if re.match(r"^[^\s:]+\.py:\d+:\d+: ", line)]
    new = [line for line in findings if _pending(line.split(":", 1)[0]) is None]
    assert not new, "ruff check reports (fix them; wrap long lines by hand, not with ruff format):\n" + "\n".join(new)
    still = {_pending(line.split(":", 1)[0]) for line in findings}
    clean = [entry for entry in RUFF_PENDING if entry not in still]
    assert not clean, f"now clean, remove from RUFF_PENDING in {Path(__file__).name}: {clean}"


# --------------------------------------------------------------------------- private names, lazy imports

#: private names still taken across modules: "importing file: module.name"
PRIVATE_ALLOWED = (
    # check/'s private module: made public (or the grader's needs moved) by check/'s owner
    "labsupport/workbook/grading/grader.py: labsupport.check._core",
    "labsupport/workbook/grading/grader.py: labsupport.check._core._FAILURES",
)


def _modules() -> list[tuple[str, str, ast.Module, list[str]]]:
    """(repository path, dotted module name, tree, source lines) of every module of labsupport/."""
    out = []
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(REPO).as_posix()
        parts = path.relative_to(REPO).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        source = path.read_text(encoding="utf-8")
        out.append((rel, name, ast.parse(source, filename=rel), source.split("\n")))
    return out


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def _own_package(importer: str, is_package: bool) -> str:
    return importer if is_package else importer.rpartition(".")[0]


def private_uses(rel: str, importer: str, tree: ast.Module) -> set[str]:
    """``module.name`` for each private name ``rel`` takes from another labsupport module: ``from m
    import _x``, or ``m._x`` on a labsupport module it imported.  A private submodule imported from
    inside its own package (``labsupport.check`` importing ``labsupport.check._core``) is the package's
    own business and not counted."""
    package = _own_package(importer, rel.endswith("__init__.py"))
    found: set[str] = set()
    modules: dict[str, str] = {}           # local name -> the labsupport module (or name) it is bound to
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").startswith("labsupport"):
            for alias in node.names:
                full = f"{node.module}.{alias.name}"
                if _private(alias.name) and not (package + ".").startswith(node.module + "."):
                    found.add(full)
                modules[alias.asname or alias.name] = full
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith("labsupport"):
                    if alias.asname:
                        modules[alias.asname] = alias.name
                    for part in alias.name.split(".")[1:]:
                        if _private(part) and not (package + ".").startswith(alias.name.rpartition(".")[0] + "."):
                            found.add(alias.name)
    for node in ast.walk(tree):
        if (isinstance(node, ast.Attribute) and _private(node.attr) and isinstance(node.value, ast.Name)
                and node.value.id in modules):
            target = modules[node.value.id]
            if target != importer:
                found.add(f"{target}.{node.attr}")
    return found


class _LazyImports(ast.NodeVisitor):
    """Imports inside a function (any depth), each once."""

    def __init__(self) -> None:
        self.depth = 0
        self.found: list[ast.stmt] = []

    def _function(self, node: ast.AST) -> None:
        self.depth += 1
        self.generic_visit(node)
        self.depth -= 1

    visit_FunctionDef = visit_AsyncFunctionDef = visit_Lambda = _function

    def visit_Import(self, node: ast.Import) -> None:
        if self.depth:
            self.found.append(node)

    visit_ImportFrom = visit_Import


REASON = re.compile(r"#\s*noqa:\s*PLC0415\s+-\s+\S")


def unexplained_lazy_imports(rel: str, tree: ast.Module, lines: list[str]) -> set[str]:
    """``rel: statement`` for each import inside a function whose lines carry no ``# noqa: PLC0415 - why``."""
    visitor = _LazyImports()
    visitor.visit(tree)
    out = set()
    for node in visitor.found:
        text = "\n".join(lines[node.lineno - 1:node.end_lineno])
        if not REASON.search(text):
            out.add(f"{rel}: {ast.unparse(node)}")
    return out


#: imports inside functions without a reason, still pending: "file: statement"
LAZY_ALLOWED: tuple[str, ...] = ()


def test_no_private_names_across_modules():
    found = set()
    for rel, name, tree, _ in _modules():
        found |= {f"{rel}: {use}" for use in private_uses(rel, name, tree)}
    new = sorted(found - set(PRIVATE_ALLOWED))
    assert not new, ("private names taken from another module (make the name public, or move the helper "
                     "where it belongs):\n" + "\n".join(new))
    gone = sorted(set(PRIVATE_ALLOWED) - found)
    assert not gone, f"no longer occur, remove from PRIVATE_ALLOWED in {Path(__file__).name}: {gone}"


def test_every_lazy_import_says_why():
    found = set()
    for rel, _, tree, lines in _modules():
        found |= unexplained_lazy_imports(rel, tree, lines)
    new = sorted(found - set(LAZY_ALLOWED))
    assert not new, ("imports inside a function without '# noqa: PLC0415 - why' (move them to the module "
                     "top, or say why they are lazy):\n" + "\n".join(new))
    gone = sorted(set(LAZY_ALLOWED) - found)
    assert not gone, f"no longer occur, remove from LAZY_ALLOWED in {Path(__file__).name}: {gone}"


# ------------------------------------------------------------------------ the scanners find what they must


def test_private_use_scanner_finds_each_form():
    tree = ast.parse("from labsupport.datasets.tokenizer import _hidden, Tokenizer\n"
                     "from labsupport.datasets import blending as bl\n"
                     "import labsupport.workbook.nbrun as nbrun\n"
                     "from labsupport.check import _core\n"
                     "x = bl._sidecar(1) + nbrun._line('a') + bl.public\n")
    assert private_uses("labsupport/pages/x.py", "labsupport.pages.x", tree) == {
        "labsupport.datasets.tokenizer._hidden", "labsupport.datasets.blending._sidecar",
        "labsupport.workbook.nbrun._line", "labsupport.check._core"}
    # a package importing its own private submodule is not counted
    own = ast.parse("from labsupport.check import _cells\n")
    assert private_uses("labsupport/check/__init__.py", "labsupport.check", own) == set()
    assert private_uses("labsupport/check/ch01.py", "labsupport.check.ch01", own) == set()


def test_lazy_import_scanner_needs_a_reason():
    source = ("def f():\n"
              "    import torch  # noqa: PLC0415 - start-up time\n"
              "    import json\n"
              "    def g():\n"
              "        import re  # noqa: PLC0415\n"
              "    return g\n"
              "import os\n")
    found = unexplained_lazy_imports("m.py", ast.parse(source), source.split("\n"))
    assert found == {"m.py: import json", "m.py: import re"}
