"""``python -m labsupport build-sequences-per-dataset``: every prefix's counts in one JSON — chapter 6.

Opening a ``.idx`` to read its 34-byte header costs a file-system round trip per prefix; with
hundreds of prefixes on a parallel file system that is a visible part of start-up.  Megatron-LM's
``tools/build_sequences_per_dataset.py`` (core_v0.16.1) reads every prefix of a blend once, offline,
and writes ``{prefix: [sequence_count, document_count]}`` (``json.dump``); training then takes it
with ``--per-dataset-sequences-path`` (``pretrain_gpt.py`` 226–228 → ``GPTDatasetConfig
.sequences_per_dataset``) and ``_IndexReader`` skips the header read (``indexed_dataset.py``
250–260): the counts come from the JSON, the dtype from the tokenizer's size
(:func:`token_dtype_code`).  This command writes the same bytes for the same blend, from the same
flags (``--data-path``, ``--data-args-path``, ``--per-split-data-args-path``,
``--per-dataset-sequences-path``), and names the file it writes; at core_v0.16.1 Megatron's script
counts, then fails on ``args.path_to_sequences_per_dataset_json``, which its parser never defines
(fixed by core_v0.19.0).

Reading it back (:func:`read_sequences_per_dataset`) checks the JSON's shape; the reader opened
with it (:class:`~labsupport.datasets.indexed.IndexedDataset` ``header=``) still checks the file
sizes against the counts, so a JSON older than its corpus is refused rather than misread.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Iterable, Mapping, Sequence

import numpy as np

from labsupport.cli import run_command
from labsupport.datasets import blend_files
from labsupport.datasets.blending import BlendError, get_blend_from_list
from labsupport.datasets.indexed import VERSION, DType, IndexHeader, get_idx_path, read_header
from labsupport.datasets.utils import DataError
from labsupport.fileio import atomic_write

__all__ = ["sequences_per_dataset", "read_sequences_per_dataset", "token_dtype_code", "header_for", "main"]

PROG = "build-sequences-per-dataset"


def sequences_per_dataset(prefixes: Iterable[str]) -> dict[str, list[int]]:
    """``{prefix: [N sequences, D document indices]}`` from each ``<prefix>.idx`` header, prefixes
    as written (duplicates once, first order kept) — the dict Megatron's tool dumps."""
    counts: dict[str, list[int]] = {}
    for prefix in prefixes:
        if prefix not in counts:
            header = read_header(get_idx_path(prefix))
            counts[prefix] = [int(header.num_sequences), int(header.num_document_indices)]
    return counts


def read_sequences_per_dataset(path: str | os.PathLike) -> dict[str, tuple[int, int]]:
    """The JSON written by :func:`main`, checked: an object of prefix → two counts ≥ 0 (N, D ≥ 1).

    DataError naming the file and the first bad entry."""
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
    except (OSError, ValueError) as exc:
        raise DataError(f"--per-dataset-sequences-path {os.fspath(path)}: {getattr(exc, 'strerror', None) or exc}; "
                        f"write it with python -m labsupport {PROG}") from None
    if not isinstance(data, dict):
        raise DataError(f"--per-dataset-sequences-path {os.fspath(path)}: a JSON {type(data).__name__}, not an "
                        "object of prefix → [sequences, documents]")
    out: dict[str, tuple[int, int]] = {}
    for prefix, pair in data.items():
        ok = (isinstance(pair, list) and len(pair) == 2 and all(type(v) is int for v in pair)
              and pair[0] >= 0 and pair[1] >= 1)
        if not ok:
            raise DataError(f"--per-dataset-sequences-path {os.fspath(path)}: {prefix!r}: {pair!r} is not "
                            "[sequences ≥ 0, document indices ≥ 1]; build the file again")
        out[prefix] = (pair[0], pair[1])
    return out


def token_dtype_code(vocab_size: int) -> int:
    """The ``.bin`` dtype code megatron-core assumes with ``sequences_per_dataset`` (it reads no
    header): 4 (int32) above 65,536 ids, else 8 (uint16) (``gpt_dataset.py`` 89–93, core_v0.16.1
    and 0.19.0).  Preprocessing chooses uint16 only below 65,500 (``DType.optimal_dtype``): for
    65,500–65,536 ids the two disagree, and the size check of ``IndexedDataset(header=…)`` refuses."""
    return int(DType.int32) if int(vocab_size) > np.iinfo(np.uint16).max + 1 else int(DType.uint16)


def header_for(counts: tuple[int, int], dtype_code: int) -> IndexHeader:
    """The :class:`IndexHeader` the counts and the dtype code stand for (no file is read)."""
    return IndexHeader(VERSION, int(dtype_code), int(counts[0]), int(counts[1]))


def _prefixes(args: argparse.Namespace) -> list[str]:
    given = [name for name in ("data_path", "data_args_path", "per_split_data_args_path")
             if getattr(args, name) is not None]
    if len(given) != 1:
        raise _Usage("give one of --data-path, --data-args-path, --per-split-data-args-path")
    if args.data_args_path is not None:
        return blend_files.read_data_args(args.data_args_path)[0]
    if args.per_split_data_args_path is not None:
        blends = blend_files.read_per_split_data_args(args.per_split_data_args_path)
        return [p for blend in blends.values() if blend is not None for p in blend[0]]
    blend = get_blend_from_list(args.data_path, check_files=False)
    return [] if blend is None else blend[0]


class _Usage(Exception):
    pass


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # one line, exit 2 (argparse prints usage too)
        raise _Usage(message)


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog=f"python -m labsupport {PROG}",
                description="Write {prefix: [sequences, documents]} for a blend, as Megatron-LM's "
                            "tools/build_sequences_per_dataset.py (for --per-dataset-sequences-path).")
    p.add_argument("--data-path", nargs="*", default=None, help="weight prefix … or prefixes, as Megatron's")
    p.add_argument("--data-args-path", default=None, help="the blend from a file (whitespace-separated)")
    p.add_argument("--per-split-data-args-path", default=None,
                   help='a JSON {"train": [...], "valid": [...], "test": [...]}')
    p.add_argument("--per-dataset-sequences-path", required=True, help="the JSON to write")
    return p


def _run(argv: Sequence[str] | None) -> int:
    args = build_parser().parse_args(argv)
    counts = sequences_per_dataset(_prefixes(args))
    atomic_write(args.per_dataset_sequences_path, json.dumps(counts))
    print(f"{len(counts)} prefixes → {args.per_dataset_sequences_path}")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Exit status: 0 written, 1 a prefix or file that cannot be read, 2 a usage error."""
    errors: Mapping[type[BaseException], int] = {_Usage: 2, BlendError: 1, DataError: 1, FileNotFoundError: 1}
    return run_command(PROG, lambda: _run(argv), errors)


if __name__ == "__main__":
    sys.exit(main())
