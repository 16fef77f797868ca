"""Exercise checks, one module per chapter: ``from labsupport.check import ch01 as check``.

Each ``check.qN(learner_function)`` prints a pass/fail line with a hint; see ``_core``.
"""
from labsupport.check._core import (CheckFailed, CheckResult, Sealed, check, check_seed, expect, parts, results,
                                    short, summary)

__all__ = ["CheckFailed", "CheckResult", "Sealed", "check", "check_seed", "expect", "parts", "results", "short",
           "summary"]
