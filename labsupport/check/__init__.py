"""Exercise checks, one module per chapter: ``from labsupport.check import ch01 as check``.

Each ``check.qN(learner_function)`` prints a pass/fail line with a hint; see ``_core``. Imported
inside IPython, it also watches the answer cells (``_cells``): an answer cell that failed to run is
reported at its check instead of a ``NameError`` traceback.
"""
from labsupport.check import _cells, _core
from labsupport.check._core import (CheckFailed, CheckResult, Mistake, Sealed, check, check_seed, expect,
                                    parts, plain, results, short, summary)

_cells.watch(_core.report_unrun)

__all__ = ["CheckFailed", "CheckResult", "Mistake", "Sealed", "check", "check_seed", "expect", "parts",
           "plain", "results", "short", "summary"]
