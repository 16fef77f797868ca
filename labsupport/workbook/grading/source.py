"""A student's source text as the grader reads it (grading, every chapter): one parser that a
submission cannot crash."""
from __future__ import annotations

import ast


def parse(source: str) -> ast.Module | None:
    """``source``'s syntax tree, or None for anything ``ast.parse`` cannot turn into one: a syntax
    error, a null byte, or a submission built to exhaust the parser (100,000 chained attributes:
    RecursionError; a huge literal: MemoryError).  Every parse of a student's text goes through here."""
    try:
        return ast.parse(source)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None
