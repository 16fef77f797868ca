"""Blends given as files, as Megatron-LM reads them — chapter 6 (hundreds of prefixes).

A production blend has hundreds of prefixes: too many for a command line.  Megatron-LM takes
them from a file (core_v0.16.1 ``megatron/training/utils.py`` ``get_blend_and_blend_per_split``,
469–514; the flags in ``megatron/training/arguments.py`` 2457–2467):

* ``--data-args-path FILE``: what ``--data-path`` would hold, split on any whitespace
  (``get_blend_from_list(f.read().split())``): ``weight prefix weight prefix …`` or prefixes alone;
* ``--per-split-data-args-path FILE``: a JSON object with the keys ``train``, ``valid`` and
  ``test``, each such a list or one string split on whitespace (``json.load``, then
  ``.split()`` for a string) — one blend per split, instead of ``--split``.

Both are read here with :func:`labsupport.datasets.blending.get_blend_from_list`'s checks, which
refuse what Megatron silently misreads (odd pairs, negative weights); a file that cannot be read
is a :class:`BlendError` naming it.  ``python -m labsupport train --data-args-path`` and
``python -m labsupport build-sequences-per-dataset`` use them.
"""
from __future__ import annotations

import json
import os

from labsupport.datasets.blending import BlendError, get_blend_from_list

__all__ = ["SPLIT_KEYS", "read_data_args", "read_per_split_data_args", "Blend"]

#: The keys of a per-split file, in Megatron's order.
SPLIT_KEYS: tuple[str, ...] = ("train", "valid", "test")

#: (prefixes, weights or None): what ``get_blend_from_list`` returns.
Blend = tuple[list[str], "list[float] | None"]


def _text(path: str | os.PathLike, flag: str) -> str:
    try:
        with open(path, encoding="utf-8") as f:
            return f.read()
    except (OSError, UnicodeDecodeError) as exc:
        raise BlendError(f"{flag} {os.fspath(path)}: {getattr(exc, 'strerror', None) or exc}; give a text "
                         "file") from None


def read_data_args(path: str | os.PathLike, flag: str = "--data-args-path") -> Blend:
    """The blend in a ``--data-args-path`` file: (prefixes as written, weights or None).

    BlendError (one line, starting with ``flag`` and the path) for a file that cannot be read or a
    blend Megatron would misread."""
    tokens = _text(path, flag).split()
    try:
        return get_blend_from_list(tokens, check_files=False)
    except BlendError as exc:
        raise BlendError(f"{flag} {os.fspath(path)}: {exc}") from None


def read_per_split_data_args(path: str | os.PathLike, flag: str = "--per-split-data-args-path"
                             ) -> dict[str, Blend | None]:
    """The three blends of a ``--per-split-data-args-path`` JSON: ``{"train": blend, "valid": …,
    "test": …}``, a split given as ``null`` None (Megatron: no dataset for it).

    BlendError naming the file and the split for a file that is not such a JSON object."""
    where = f"{flag} {os.fspath(path)}"
    try:
        data = json.loads(_text(path, flag))
    except ValueError as exc:
        raise BlendError(f"{where}: not JSON ({exc}); give {{\"train\": [...], \"valid\": [...], "
                         "\"test\": [...]}") from None
    if not isinstance(data, dict) or any(key not in data for key in SPLIT_KEYS):
        missing = [key for key in SPLIT_KEYS if not isinstance(data, dict) or key not in data]
        raise BlendError(f"{where}: needs the keys train, valid and test (missing: {', '.join(missing)}); "
                         "Megatron reads all three")
    blends: dict[str, Blend | None] = {}
    for key in SPLIT_KEYS:
        items = data[key].split() if isinstance(data[key], str) else data[key]
        if items is None:                       # Megatron: no dataset for this split
            blends[key] = None
            continue
        if items == []:                         # Megatron fails on it (zip of nothing)
            raise BlendError(f"{where}: {key} is empty; give a blend, or null for no {key} dataset")
        if not isinstance(items, list):
            raise BlendError(f"{where}: {key} is a JSON {type(items).__name__}; give a list or a string")
        try:
            blends[key] = get_blend_from_list(items, check_files=False)
        except BlendError as exc:
            raise BlendError(f"{where}: {key}: {exc}") from None
    return blends
