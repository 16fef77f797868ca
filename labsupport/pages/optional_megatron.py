"""What a chapter cell (chapters 0–4) prints where megatron-core is not installed.

``make lab`` (``make setup``) installs megatron-core where it can — 0.16.1 on Python 3.11, 0.19.2 on
3.12 — and the workbook runs without it where it cannot.  There, the cells that compare the workbook with
it say so in one sentence, naming what the comparison would have shown and the command that installs it.
"""
from __future__ import annotations


def not_installed_note(shows: str, exc: BaseException | None = None) -> str:
    """One line for a cell whose comparison with megatron-core cannot run here.

    shows: what the cell shows with megatron-core installed, e.g. ``"its index, sample for sample"``.
    exc: the ImportError caught, named in the line (its type and message).
    """
    why = f" ({type(exc).__name__}: {exc})" if exc is not None else ""
    return (f"megatron-core cannot be imported here{why}. `make setup-crosscheck` installs it (and says why "
            f"where it cannot); with it, this cell shows {shows}.")
