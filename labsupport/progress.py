"""Progress bars for long work (all chapters).

Interactive sessions get tqdm's notebook widget; headless runs (papermill, nbval,
``LABSUPPORT_HEADLESS=1``) get a plain bar on stderr, which the tests do not compare.
"""
from __future__ import annotations

import sys
from typing import Iterable, TypeVar

from labsupport.env import is_headless

T = TypeVar("T")


def progress(iterable: Iterable[T] | None = None, **kwargs):
    """``tqdm(iterable, **kwargs)`` with the right front end for this run."""
    if is_headless():
        from tqdm import tqdm  # noqa: PLC0415 - tqdm's console or notebook front end is chosen at call time

        kwargs.setdefault("file", sys.stderr)
        kwargs.setdefault("mininterval", 1.0)
        kwargs.setdefault("ascii", True)
        return tqdm(iterable, **kwargs)
    from tqdm.auto import tqdm  # noqa: PLC0415 - tqdm's console or notebook front end is chosen at call time

    return tqdm(iterable, **kwargs)
