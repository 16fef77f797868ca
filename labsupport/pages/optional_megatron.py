"""What a chapter cell (chapters 0–4) prints where megatron-core is not installed.

megatron-core is optional for a learner: ``make lab`` (``make setup``) does not install it,
``make setup-crosscheck`` (and ``make test``) does — 0.16.1 on Python 3.11, 0.19.2 on 3.12. The cells that
compare the workbook with it say so in one sentence, naming what the comparison would have shown.
"""
from __future__ import annotations


def not_installed_note(shows: str, exc: BaseException | None = None) -> str:
    """One line for a cell whose comparison with megatron-core cannot run here.

    shows: what the cell shows with megatron-core installed, e.g. ``"its index, sample for sample"``.
    exc: the ImportError caught, named in the line (its type and message).
    """
    why = f" ({type(exc).__name__}: {exc})" if exc is not None else ""
    return (f"megatron-core cannot be imported here{why}. It is optional — `make lab` does not install it, "
            f"`make setup-crosscheck` does; with it, this cell shows {shows}.")
