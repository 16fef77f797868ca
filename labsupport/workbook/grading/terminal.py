"""What the grader writes where people read it: text from a student made safe to print and to store.

Used by :mod:`labsupport.workbook.grade` (the terminal summary, the gradebook, feedback files) and
the grading machinery (a student's warnings re-emitted in the grader).
"""
from __future__ import annotations

import re

_SURROGATE = re.compile("[\ud800-\udfff]")

_CONTROL = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)?|[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def plain(text: object) -> str:
    """``text`` without terminal escape sequences and control characters (what the grader prints:
    a student's OSC 52 or cursor movement never reaches the instructor's terminal)."""
    return _CONTROL.sub("", printable(text))


def printable(text: object) -> str:
    """``text`` with what cannot be written as UTF-8 (lone surrogates, from a student's free text
    or a file name that is not UTF-8) replaced by U+FFFD."""
    return _SURROGATE.sub("\ufffd", str(text))


def one_line(text: object) -> str:
    """:func:`plain` on one line: a newline or tab in a student id is shown as ``\\n``/``\\t``, so
    one summary line stays one line."""
    return plain(text).replace("\n", "\\n").replace("\t", "\\t")
