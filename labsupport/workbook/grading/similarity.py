"""Answer regions compared across a class, after normalising names, comments and formatting.

Each answer is parsed; statements without effect are dropped (a bare constant or name, ``pass``
where a body has others, an assignment of a constant or a name to a variable nothing reads, so
``_unused = None`` after every line hides nothing); every local name (variables, arguments, helper
functions) is renamed in order of first appearance (``v0``, ``v1``, …), docstrings are dropped and
the code is printed back by :func:`ast.unparse`, which removes comments and formatting.  Pairs of
students whose normalised answers to a question are at least ``threshold`` similar
(:class:`difflib.SequenceMatcher` over lines) are listed with the matching lines.

Answers shorter than ``min_tokens`` normalised tokens (:func:`token_count`: names, operators,
literals of the normalised code, the ``def`` line included) are compared too, but only for being
identical, and such a pair is marked ``short, canonical``: a one-line answer is often the one way
to write it, so two students (or a student and ``solutions/``) matching there says little.
:data:`MIN_TOKENS` (51) is taken from ``solutions/``: the six shortest computed answers (ch04 q1,
ch06 q1, ch03 q2, ch01 q2, ch00 q3, ch02 q2) have 24–50 tokens, the shortest with control flow of
its own (ch00 q1, a ``raise`` under an ``if``) 52; ``tests/grading/test_grader_pieces.py`` measures them.
"""
from __future__ import annotations

import ast
import builtins
import difflib
import io
import itertools
import tokenize
from dataclasses import dataclass

from labsupport.workbook.make_exercises import STUB

_KEEP = set(dir(builtins))


class _Rename(ast.NodeTransformer):
    def __init__(self) -> None:
        self.names: dict[str, str] = {}

    def _new(self, name: str) -> str:
        if name in _KEEP:
            return name
        return self.names.setdefault(name, f"v{len(self.names)}")

    def visit_Name(self, node: ast.Name) -> ast.AST:
        node.id = self._new(node.id)
        return node

    def visit_arg(self, node: ast.arg) -> ast.AST:
        node.arg = self._new(node.arg)
        node.annotation = None
        return node

    def _body(self, node):
        if node.body and isinstance(node.body[0], ast.Expr) and isinstance(getattr(node.body[0], "value", None),
                                                                           ast.Constant) \
                and isinstance(node.body[0].value.value, str):
            node.body = node.body[1:] or [ast.Pass()]
        return node

    def visit_FunctionDef(self, node: ast.FunctionDef) -> ast.AST:
        node.name = self._new(node.name)
        node.returns = None
        self.generic_visit(node)
        return self._body(node)

    visit_AsyncFunctionDef = visit_FunctionDef


_PURE = (ast.Constant, ast.Name)


def _no_effect(node: ast.stmt, read: set[str]) -> bool:
    """A statement that changes nothing: a bare constant or name, ``pass``, or an assignment of a
    constant or name to plain variables no line reads."""
    if isinstance(node, ast.Pass) or (isinstance(node, ast.Expr) and isinstance(node.value, _PURE)):
        return True
    if isinstance(node, (ast.Assign, ast.AnnAssign)) and isinstance(node.value, _PURE):
        targets = node.targets if isinstance(node, ast.Assign) else [node.target]
        return all(isinstance(t, ast.Name) and t.id not in read for t in targets)
    return False


def _drop_no_ops(tree: ast.Module) -> ast.Module:
    read = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}
    for node in ast.walk(tree):
        for name in ("body", "orelse", "finalbody"):
            body = getattr(node, name, None)
            if isinstance(body, list) and body and isinstance(body[0], ast.stmt):
                kept = [stmt for stmt in body if not _no_effect(stmt, read)]
                setattr(node, name, kept or ([ast.Pass()] if name == "body" and node is not tree else []))
    return tree


def normalise(source: str) -> list[str]:
    """The answer's code with no-op statements, names, comments, docstrings and formatting
    normalised, as lines."""
    try:
        tree = _Rename().visit(_drop_no_ops(ast.parse(source)))
        text = ast.unparse(tree)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        text = "\n".join(line.split("#")[0].strip() for line in source.splitlines())
    return [line.strip() for line in text.splitlines() if line.strip()]


_LAYOUT = {tokenize.NEWLINE, tokenize.NL, tokenize.INDENT, tokenize.DEDENT, tokenize.ENDMARKER}


def token_count(lines: list[str]) -> int:
    """Python tokens of normalised ``lines`` (layout tokens not counted; the lines' own word count when
    they are not Python, as :func:`normalise` falls back to for a cell that does not parse)."""
    try:
        tokens = tokenize.generate_tokens(io.StringIO("\n".join(lines) + "\n").readline)
        return sum(1 for t in tokens if t.type not in _LAYOUT)
    except (tokenize.TokenError, IndentationError, SyntaxError):
        return sum(len(line.split()) for line in lines)


#: answers under this many normalised tokens are only listed when identical, as "short, canonical"
MIN_TOKENS = 51


@dataclass
class Pair:
    chapter: str
    question: str
    student_a: str
    student_b: str
    similarity: float
    matching_lines: list[str]
    note: str = ""      # "short, canonical": a short answer matched exactly (see the module docstring)


SHORT = "short, canonical"


def similar_pairs(answers: dict[tuple[str, str], dict[str, str]], threshold: float = 0.9,
                  min_tokens: int = MIN_TOKENS) -> list[Pair]:
    """``answers[(student, chapter)][question] = source`` → pairs at or above ``threshold`` (a ratio of
    matching normalised lines, 0–1), and identical answers under ``min_tokens`` tokens marked short."""
    by_question: dict[tuple[str, str], list[tuple[str, list[str], int]]] = {}
    for (student, chapter), questions in answers.items():
        for question, source in questions.items():
            if not source or STUB in source:
                continue
            lines = normalise(source)
            if lines:
                by_question.setdefault((chapter, question), []).append((student, lines, token_count(lines)))
    pairs: list[Pair] = []
    for (chapter, question), entries in sorted(by_question.items()):
        for (a, la, na), (b, lb, nb) in itertools.combinations(sorted(entries), 2):
            if min(na, nb) < min_tokens:
                if la == lb:
                    pairs.append(Pair(chapter, question, a, b, 1.0, la, SHORT))
                continue
            matcher = difflib.SequenceMatcher(None, la, lb, autojunk=False)
            ratio = matcher.ratio()
            if ratio >= threshold:
                same = [line for block in matcher.get_matching_blocks() for line in la[block.a:block.a + block.size]]
                pairs.append(Pair(chapter, question, a, b, round(ratio, 3), same))
    return sorted(pairs, key=lambda p: (-p.similarity, p.chapter, p.question, p.student_a, p.student_b))
