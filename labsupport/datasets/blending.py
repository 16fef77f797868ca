"""Data blending — chapter 3 (데이터 블렌딩, book §6.2.5): weighted domain mixing, exactly as
Megatron-Core builds it, with the over-sampling it causes made visible.

The book's config ``data_prefix: [0.6, /data/web, 0.25, /data/code, 0.15, /data/books]`` names
binary datasets (chapter 2) and their weights.  Megatron-Core turns it into two arrays,
``dataset_index[i]`` (which dataset the i-th blended sample comes from) and
``dataset_sample_index[i]`` (which sample of that dataset), built by a greedy rule in compiled
C++ (``megatron/core/datasets/helpers.cpp``): for step ``i`` with ``x = max(i, 1)`` pick the
dataset ``d`` with the largest error ``w_d * x - count_d`` (lowest index on exact ties).

Public names (the chapter's contract):

* :func:`get_blend_from_list` — the ``data_prefix`` list → ``(prefixes, weights | None)``,
  Megatron's rules, stricter on bad input; :func:`normalize_weights`.
* :func:`build_blending_indices`, :func:`build_exhaustive_blending_indices` — output identical to
  megatron-core's ``helpers`` for every valid input, float rounding and tie order included
  (``tests/crosscheck/test_blending.py``); :func:`greedy_step` and
  :func:`reference_blending_indices` are the rule written out plainly, for teaching.
* :func:`samples_per_dataset` — Megatron's per-dataset sample requests with its 0.5 % surplus.
* :class:`BlendedDataset` — ``len``/``ds[i]`` over GPT sample datasets (chapter 4) or plain
  indexed datasets (chapter 2); refuses over-draws and mixed tokenizers up front.
* :func:`blend_report` / :class:`BlendReport` — target vs realised share, samples drawn, epochs
  per dataset (how many times its text is read) and the share of the drawn text that repeats,
  with a warning above an epoch threshold the caller sets.
* :func:`expected_epochs`, :func:`cap_weights`, :func:`exact_duplicates` — the arithmetic of
  the chapter's exercises and its dedup note.

How the indices are built at compiled speed: :mod:`labsupport.datasets.blending_numba` is the
loop above, literally, compiled by numba (as fast as megatron-core's C++, measured in
``benchmarks/results/blending.json``); where numba cannot be imported,
:mod:`labsupport.datasets.blending_numpy` runs the loop in numpy, in chunks side by side from
guessed states, and then proves every chunk exact.  Every engine's output equals
:func:`reference_blending_indices` for every weight vector (``tests/datasets/test_blending.py``) and
megatron-core's (``tests/crosscheck/test_blending.py``).
"""
from __future__ import annotations

import sys
import hashlib
import json
import math
import numbers
import operator
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

import numpy as np

from labsupport.datasets.blending_loop import sequential_steps
from labsupport.datasets.blending_numpy import chunked_blending_indices
from labsupport.datasets.utils import DataError, normalize_index
from labsupport.fileio import PathLike, atomic_open, atomic_write
from labsupport.paths import shown_path
from labsupport.datasets.tokenizer import TokenizerMismatchError
from labsupport.datasets.indexed import IndexedDataset
from labsupport.datasets.gpt_dataset_config import GPTDatasetConfig
from labsupport.datasets.gpt_samples import GPTDataset

__all__ = [
    "BlendError", "OverdrawError", "TokenizerMismatchError",
    "get_blend_from_list", "normalize_weights",
    "build_blending_indices", "build_exhaustive_blending_indices", "blending_engine", "ENGINES",
    "greedy_step", "reference_blending_indices",
    "samples_per_dataset", "megatron_blend_size", "DEFAULT_SURPLUS",
    "tokenizer_fingerprint", "check_same_tokenizer",
    "BlendedDataset", "BlendRow", "BlendReport", "blend_report",
    "expected_epochs", "cap_weights", "exact_duplicates",
]


#: Megatron-Core's ``mid_level_dataset_surplus`` default: each dataset is asked for 0.5 % more.
DEFAULT_SURPLUS: float = 0.005
#: int16 dataset ids: Megatron asserts fewer than this many datasets.
MAX_DATASETS: int = 32767


class BlendError(DataError):
    """A blend that cannot work: bad ``data_prefix`` entry, bad weights or sizes."""


class OverdrawError(BlendError, IndexError):
    """The blend takes more samples from a dataset than it holds (Megatron raises IndexError)."""


# =============================================================================================
# data_prefix lists
# =============================================================================================
def _as_weight(item: Any) -> float | None:
    """The float a ``data_prefix`` entry stands for, or None when it is a path."""
    if isinstance(item, bool):
        return None
    if isinstance(item, numbers.Real):
        return float(item)
    if isinstance(item, str):
        try:
            return float(item)
        except ValueError:
            return None
    return None


def _check_weight(value: float, where: str) -> None:
    if math.isnan(value):
        raise BlendError(f"{where}: weight is NaN; write a finite number ≥ 0")
    if math.isinf(value):
        raise BlendError(f"{where}: weight is infinite; write a finite number ≥ 0")
    if value < 0:
        raise BlendError(f"{where}: weight {value:g} is negative; weights are shares, write a number ≥ 0")


def get_blend_from_list(items: Sequence[Any] | None, *, check_files: bool = True
                        ) -> tuple[list[str], list[float] | None] | None:
    """Parse a ``data_prefix`` list as Megatron-Core does, refusing what it silently accepts.

    ``[0.6, "web", 0.25, "code", 0.15, "books"]`` (numbers or numeric strings) → ``(["web",
    "code", "books"], [0.6, 0.25, 0.15])``; a list of prefixes only → ``(prefixes, None)``
    (Megatron then weights datasets by their size).  Weights are returned as given (floats, not
    normalised); prefixes are stripped of surrounding whitespace.  ``None`` → ``None``.

    Raises :class:`BlendError` naming the entry (0-based position in the list) for: an empty
    list; a negative, NaN or infinite weight; weights that are all zero; a list mixing weights
    and prefixes that is not strict ``weight, prefix`` pairs (Megatron treats such a list as all
    prefixes); an empty prefix.  With ``check_files`` (default), raises FileNotFoundError naming
    the entry when ``<prefix>.bin`` or ``<prefix>.idx`` is missing.
    """
    if items is None:
        return None
    if isinstance(items, (str, bytes, os.PathLike)) or not isinstance(items, Sequence):
        raise BlendError(f"data_prefix must be a list like [0.6, 'web', 0.4, 'code'], got {type(items).__name__}")
    items = list(items)
    if not items:
        raise BlendError("data_prefix is empty: give at least one dataset prefix")
    as_weights = [_as_weight(it) for it in items]
    numeric = [w is not None for w in as_weights]
    if not any(numeric):
        prefixes_raw = items
        weights = None
    else:
        if not numeric[0]:
            k = numeric.index(True)
            raise BlendError(
                f"data_prefix entry {k} ({items[k]!r}) is a number, but the list starts with a prefix "
                f"(entry 0: {items[0]!r}): a weighted list is weight, prefix pairs like [0.6, 'web', 0.4, 'code'] "
                f"(Megatron would silently read the whole list as prefixes). If entry {k} is a path, write it "
                f"as './{items[k]}'")
        if len(items) % 2:
            first_weight = numeric.index(True)
            raise BlendError(
                f"data_prefix has {len(items)} entries and contains weights (entry {first_weight}: "
                f"{items[first_weight]!r}): a weighted list is weight, prefix pairs, so its length is even. "
                "Give every prefix a weight, or give no weights at all")
        for pos, (it, is_num) in enumerate(zip(items, numeric)):
            if pos % 2 == 0 and not is_num:
                raise BlendError(
                    f"data_prefix entry {pos} ({it!r}): expected a weight here — a weighted list alternates "
                    "weight, prefix (e.g. [0.6, 'web', 0.4, 'code']); Megatron would silently read the whole "
                    "list as prefixes")
            if pos % 2 == 1 and is_num:
                raise BlendError(
                    f"data_prefix entry {pos} ({it!r}): expected a dataset prefix after weight entry {pos - 1}, "
                    "got a number. If it really is a path, write it as './" + str(it) + "'")
        weights = []
        for pos in range(0, len(items), 2):
            _check_weight(as_weights[pos], f"data_prefix entry {pos} ({items[pos]!r})")
            weights.append(as_weights[pos])
        if not any(w > 0 for w in weights):
            raise BlendError(f"data_prefix weights {weights} are all zero: at least one dataset needs a weight > 0")
        prefixes_raw = items[1::2]
    offset, step = (0, 1) if weights is None else (1, 2)
    prefixes: list[str] = []
    for k, raw in enumerate(prefixes_raw):
        pos = offset + step * k
        if not isinstance(raw, (str, os.PathLike)):
            raise BlendError(f"data_prefix entry {pos} ({raw!r}): a prefix must be a string path, "
                             f"got {type(raw).__name__}")
        prefix = os.fspath(raw).strip()
        if not prefix:
            raise BlendError(f"data_prefix entry {pos}: the prefix is empty")
        if check_files:
            _check_prefix_files(prefix, f"data_prefix entry {pos} ({prefix!r})")
        prefixes.append(prefix)
    return prefixes, weights


def _check_prefix_files(prefix: str, where: str) -> None:
    missing = [ext for ext in (".bin", ".idx") if not os.path.isfile(prefix + ext)]
    if not missing:
        return
    hint = "preprocess the corpus first (chapter 2: .venv/bin/python -m labsupport preprocess … --output-prefix)"
    stem, ext = os.path.splitext(prefix)
    if ext in (".bin", ".idx") and os.path.isfile(stem + ".bin") and os.path.isfile(stem + ".idx"):
        hint = f"a prefix has no extension: write {stem!r}"
    elif os.path.isfile(prefix + "_text_document.idx"):
        hint = f"did you mean {prefix + '_text_document'!r}? (preprocessing appends _<json key>_document)"
    raise FileNotFoundError(f"{where}: {' and '.join(prefix + m for m in missing)} not found; {hint}")


def _weights_array(weights: Any, what: str = "weights") -> np.ndarray:
    try:
        w = np.asarray(weights, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise BlendError(f"{what} must be numbers, got {weights!r:.80}") from exc
    if w.ndim != 1 or w.size == 0:
        raise BlendError(f"{what} must be a non-empty 1-D list of numbers, got shape {w.shape}")
    if w.size > MAX_DATASETS:
        raise BlendError(f"{w.size} datasets: dataset ids are int16, so at most {MAX_DATASETS} can be blended")
    for d, v in enumerate(w.tolist()):
        _check_weight(v, f"{what}[{d}]")
    if not (w > 0).any():
        raise BlendError(f"{what} are all zero: at least one dataset needs a weight > 0")
    return w


def normalize_weights(weights: Sequence[float]) -> list[float]:
    """``w / sum(w)`` in float64, as Megatron-Core's ``utils.normalize`` (same doubles).

    Raises :class:`BlendError` naming the position of a negative, NaN or infinite weight, and
    for all-zero weights.
    """
    w = _weights_array(weights)
    return (w / np.sum(w)).tolist()


# =============================================================================================
# the greedy rule
# =============================================================================================
def greedy_step(weights: Sequence[float], counts: Sequence[int], step: int) -> int:
    """One step of Megatron's blending rule: the dataset the ``step``-th sample comes from.

    ``x = max(step, 1)``; the error of dataset d is ``weights[d] * x - counts[d]`` (how far it is
    behind its share); the largest error wins and on an exact tie the lowest index wins.
    ``counts[d]``: samples already taken from d before this step.
    """
    x = float(max(int(step), 1))
    best, best_err = 0, weights[0] * x - counts[0]
    for d in range(1, len(weights)):
        err = weights[d] * x - counts[d]
        if err > best_err:
            best, best_err = d, err
    return best


def reference_blending_indices(weights: Sequence[float], size: int, *, start: int = 0,
                               counts: Sequence[int] | None = None) -> tuple[np.ndarray, np.ndarray]:
    """The rule as a plain Python loop (the readable reference; slow: tens of ns per step and dataset
    in CPython, measured in chapter 3).

    Steps ``start .. start + size - 1`` from ``counts`` (default: all zero at step 0); resuming
    from the counts reached at step ``start`` continues the uninterrupted sequence exactly.
    Returns ``(dataset_index int16[size], dataset_sample_index int64[size])``.
    """
    w = [float(v) for v in weights]
    c = [0] * len(w) if counts is None else [int(v) for v in counts]
    dl, sl, _ = sequential_steps(w, int(size), c, int(start))
    return np.array(dl, dtype=np.int16), np.array(sl, dtype=np.int64)


#: below this many step × dataset evaluations the plain Python loop is the fastest path
_SEQUENTIAL_WORK = 20_000


def _chunked(w: np.ndarray, size: int, **options) -> tuple[np.ndarray, np.ndarray]:
    """The numpy engine: :mod:`labsupport.datasets.blending_numpy` (it re-runs the steps it must
    with the loop of :mod:`labsupport.datasets.blending_loop`)."""
    return chunked_blending_indices(w, size, **options)


#: the engines of :func:`build_blending_indices` ("auto" picks one)
ENGINES = ("auto", "numba", "numpy", "python")


def blending_engine(engine: str = "auto", work: int | None = None) -> str:
    """The engine ``engine`` resolves to: "numba" (Megatron's loop compiled,
    :mod:`labsupport.datasets.blending_numba`) where numba imports, else "numpy"
    (:mod:`labsupport.datasets.blending_numpy`); with ``work`` (steps × datasets) at most
    ``_SEQUENTIAL_WORK``, "auto" is the plain Python loop (nothing to compile or import)."""
    if engine not in ENGINES:
        raise BlendError(f"engine must be one of {', '.join(ENGINES)}; got {engine!r}")
    if engine != "auto":
        return engine
    if work is not None and work <= _SEQUENTIAL_WORK:
        return "python"
    from labsupport.datasets.blending_numba import numba_problem  # noqa: PLC0415 - numba compile on first use (start-up time)

    return "numpy" if numba_problem() else "numba"


def _run_engine(engine: str, w: np.ndarray, size: int) -> tuple[np.ndarray, np.ndarray]:
    """``size`` steps of the greedy from step 0 with the resolved ``engine``."""
    if engine == "numba":
        from labsupport.datasets.blending_numba import numba_blending_indices  # noqa: PLC0415 - numba compile on first use (start-up time)

        return numba_blending_indices(w, size)
    if engine == "numpy":
        return _chunked(w, size)
    return reference_blending_indices(w.tolist(), size)


def _check_size(size: Any, what: str = "size") -> int:
    try:
        s = operator.index(size)
    except TypeError:
        raise BlendError(f"{what} must be an integer number of samples, got {size!r}") from None
    if s < 0:
        raise BlendError(f"{what} must be ≥ 0, got {s}")
    return s


def build_blending_indices(weights: Sequence[float], size: int, *,
                           engine: str = "auto") -> tuple[np.ndarray, np.ndarray]:
    """Megatron-Core's ``helpers.build_blending_indices``, output identical for every valid input.

    Args:
        weights: one weight ≥ 0 per dataset (finite, not all zero); used as given — Megatron's
            ``BlendedDataset`` passes normalised weights (see :func:`normalize_weights`).
        size: number of blended samples.
        engine: "auto" (default: the Python loop for small inputs, else numba's compiled loop
            where numba imports, else the numpy engine), or one of "numba", "numpy", "python"
            to force it (:func:`blending_engine`).  Every engine gives the same output.

    Returns:
        ``(dataset_index, dataset_sample_index)``: int16 array of shape (size,) — the dataset of
        each sample — and int64 array (size,) — its index within that dataset (0, 1, 2, … per
        dataset, in order).
    """
    w = _weights_array(weights)
    size = _check_size(size)
    chosen = blending_engine(engine, size * w.size)
    if size == 0:
        return np.empty(0, dtype=np.int16), np.empty(0, dtype=np.int64)
    if w.size == 1:
        return np.zeros(size, dtype=np.int16), np.arange(size, dtype=np.int64)
    return _run_engine(chosen, w, size)


def build_exhaustive_blending_indices(sizes: Sequence[int], *, engine: str = "auto"
                                      ) -> tuple[np.ndarray, np.ndarray]:
    """Megatron-Core's ``helpers.build_exhaustive_blending_indices``: every sample exactly once.

    ``sizes[d]`` samples are taken from dataset d (all of them), interleaved by the greedy rule
    with weights ``sizes / sum(sizes)`` and the argmax restricted to datasets not yet used up.
    Returns int16 and int64 arrays of shape (sum(sizes),).  Raises :class:`BlendError` for a size
    ≤ 0 (megatron-core loops forever on an empty dataset).  ``engine``: as in
    :func:`build_blending_indices`.
    """
    blending_engine(engine, 0)                      # a bad engine name fails before anything else
    try:
        raw = [operator.index(s) for s in sizes]
    except TypeError:
        raise BlendError(f"sizes must be integers (samples per dataset), got {list(sizes)!r:.80}") from None
    if not raw:
        raise BlendError("sizes is empty: give one sample count per dataset")
    if len(raw) > MAX_DATASETS:
        raise BlendError(f"{len(raw)} datasets: at most {MAX_DATASETS} can be blended")
    for d, s in enumerate(raw):
        if s <= 0:
            raise BlendError(f"sizes[{d}] = {s}: every dataset needs at least one sample "
                             "(drop empty datasets from the blend; megatron-core would never terminate)")
    sz = np.array(raw, dtype=np.int64)
    total = int(sz.sum())
    w = sz / float(total)
    n = sz.size
    if n == 1:
        return np.zeros(total, dtype=np.int16), np.arange(total, dtype=np.int64)
    # Before the first step at which the unrestricted greedy picks a used-up dataset, the
    # restricted argmax is the same; that step comes within a few samples of the end.
    chosen = blending_engine(engine, total * n)
    if chosen == "python":
        di, si, p, counts = np.empty(total, np.int16), np.empty(total, np.int64), 0, [0] * n
    else:
        di, si = _run_engine(chosen, w, total)
        over = np.flatnonzero(si >= sz[di])
        p = int(over[0]) if over.size else total
        counts = np.bincount(di[:p], minlength=n).tolist()
    wl, szl = w.tolist(), sz.tolist()
    unspent = [d for d in range(n) if counts[d] < szl[d]]
    for i in range(p, total):
        x = float(max(i, 1))
        best, best_err = -1, -math.inf
        for d in unspent:
            err = wl[d] * x - counts[d]
            if err > best_err:
                best, best_err = d, err
        di[i] = best
        si[i] = counts[best]
        counts[best] += 1
        if counts[best] == szl[best]:
            unspent.remove(best)
    return di, si


# =============================================================================================
# per-dataset sample counts (Megatron's builder)
# =============================================================================================
def samples_per_dataset(weights: Sequence[float], size: int, surplus: float = DEFAULT_SURPLUS) -> list[int]:
    """Samples Megatron asks each dataset for: ``ceil(ceil(size * w) * (1 + surplus))``.

    ``weights`` are normalised first (as the builder does).  With ``surplus=0`` this is the
    per-dataset *target*; Megatron's blend then has ``sum(targets)`` samples
    (:func:`megatron_blend_size`), a little more than ``size``.
    """
    w = normalize_weights(weights)
    size = _check_size(size)
    if not (surplus >= 0 and math.isfinite(surplus)):
        raise BlendError(f"surplus must be a finite number ≥ 0, got {surplus!r}")
    return [int(math.ceil(math.ceil(size * wd) * (1 + surplus))) for wd in w]


def megatron_blend_size(weights: Sequence[float], size: int) -> int:
    """The length of the blend Megatron's builder makes for ``size`` requested samples:
    ``sum(ceil(size * w))`` over the normalised weights."""
    return int(sum(samples_per_dataset(weights, size, surplus=0.0)))


# =============================================================================================
# tokenizer fingerprints (chapter 1's invariant)
# =============================================================================================
def sidecar_of(source: Any) -> dict | None:
    """The labsupport sidecar dict behind a prefix, an IndexedDataset or a GPTDataset."""
    if isinstance(source, (str, os.PathLike)):
        path = os.fspath(source) + ".json"
        if not os.path.isfile(path):
            return None
        try:
            with open(path, encoding="utf-8") as fh:
                meta = json.load(fh)
        except (OSError, ValueError) as exc:
            raise BlendError(f"{path}: unreadable sidecar ({exc}); re-run the preprocessing") from exc
        if not isinstance(meta, dict):
            raise BlendError(f"{path}: damaged sidecar (a JSON {type(meta).__name__}, not an object); "
                             "re-run the preprocessing")
        return meta
    meta = getattr(source, "metadata", None)
    if isinstance(meta, dict):
        return meta
    inner = getattr(source, "dataset", None)        # chapter 4's GPTDataset wraps an indexed dataset
    if inner is not None and inner is not source:
        return sidecar_of(inner)
    return None


def tokenizer_fingerprint(source: Any) -> str | None:
    """The tokenizer fingerprint recorded beside a dataset (``<prefix>.json`` → tokenizer →
    fingerprint), or None when there is no sidecar.  ``source``: a prefix, an
    ``IndexedDataset`` or a ``GPTDataset`` over one."""
    meta = sidecar_of(source)
    if not meta:
        return None
    tok = meta.get("tokenizer")
    if isinstance(tok, dict) and isinstance(tok.get("fingerprint"), str):
        return tok["fingerprint"]
    return None


def check_same_tokenizer(sources: Sequence[Any], names: Sequence[str] | None = None) -> str | None:
    """Refuse to blend datasets tokenized by different tokenizers.

    Returns the common fingerprint (None when no source records one).  Raises
    :class:`~labsupport.datasets.tokenizer.TokenizerMismatchError` naming the first two datasets whose
    fingerprints differ: their token ids mean different text, and a model trained on the mix
    learns noise (book §6.2.4).
    """
    names = list(names) if names is not None else [f"dataset {d}" for d in range(len(sources))]
    seen: tuple[str, str] | None = None
    for name, src in zip(names, sources):
        fp = tokenizer_fingerprint(src)
        if fp is None:
            continue
        if seen is None:
            seen = (name, fp)
        elif fp != seen[1]:
            raise TokenizerMismatchError(
                f"cannot blend {seen[0]!r} and {name!r}: they were tokenized by different tokenizers "
                f"(fingerprints {seen[1][:16]}… and {fp[:16]}…). Token ids of one mean other text in the "
                "other; re-preprocess every dataset with the same tokenizer model (chapter 1, 2)")
    return None if seen is None else seen[1]


# =============================================================================================
# BlendedDataset
# =============================================================================================
def _display_name(source: Any, d: int) -> str:
    prefix = None
    if isinstance(source, (str, os.PathLike)):
        prefix = os.fspath(source)
    else:
        for obj in (source, getattr(source, "dataset", None)):
            p = getattr(obj, "path_prefix", None)
            if isinstance(p, (str, os.PathLike)):
                prefix = os.fspath(p)
                break
    if prefix is None:
        return f"dataset {d}"
    base = os.path.basename(prefix.rstrip("/"))
    for suffix in ("_text_document", "_document"):
        if base.endswith(suffix):
            base = base[: -len(suffix)]
    return base or f"dataset {d}"


def _samples_per_epoch(ds: Any) -> int:
    """Distinct samples one pass over ``ds`` yields: a GPTDataset's samples per epoch, else len."""
    tpe = getattr(ds, "tokens_per_epoch", None)
    seq = getattr(ds, "seq_length", None)
    if isinstance(tpe, numbers.Integral) and isinstance(seq, numbers.Integral) and seq > 0:
        extra = int(getattr(ds, "extra", 1))
        return max(1, (int(tpe) - extra) // int(seq))
    return len(ds)


def _identity(ds: Any) -> Any:
    """A JSON-able description of a dataset, for the index cache key."""
    for obj in (ds, getattr(ds, "dataset", None)):
        p = getattr(obj, "path_prefix", None)
        if isinstance(p, (str, os.PathLike)):
            info: dict[str, Any] = {"prefix": os.path.abspath(os.fspath(p)), "len": len(ds),
                                    "class": type(ds).__name__}
            for key in ("seq_length", "seed", "num_samples", "num_epochs"):
                if hasattr(ds, key):
                    info[key] = getattr(ds, key)
            return info
    return {"class": type(ds).__name__, "len": len(ds)}


def _index_digest(dataset_index: np.ndarray, dataset_sample_index: np.ndarray) -> str:
    """sha256 of a blend's two index arrays (dtype, shape and bytes), stored beside its cache."""
    h = hashlib.sha256()
    for a in (dataset_index, dataset_sample_index):
        h.update(f"{a.dtype.str}{a.shape}".encode())
        h.update(np.ascontiguousarray(a).tobytes())
    return h.hexdigest()


class BlendedDataset:
    """Megatron-Core's ``BlendedDataset``: one index over several datasets mixed by weight.

    ``BlendedDataset(datasets, weights, size, seed)``; ``ds[i]`` is
    ``{"dataset_id": d, **datasets[d][s]}`` for dict samples (chapter 4's GPT samples, as in
    Megatron) or ``{"dataset_id": d, "dataset_sample_id": s, "tokens": sample}`` otherwise, with
    ``d = dataset_index[i]`` and ``s = dataset_sample_index[i]``.

    Args:
        datasets: per dataset a path prefix (``.bin``/``.idx``), an ``IndexedDataset``, or a
            ready sample dataset (anything with ``len`` and ``[i]``, e.g. ``GPTDataset``).
            With ``seq_length`` set, prefixes and indexed datasets become chapter 4's
            ``GPTDataset`` (the mid-level datasets of Megatron's builder), each asked for
            :func:`samples_per_dataset` samples and shuffled with ``seed``; without it each
            sequence (document) is one sample and a dataset cannot be drawn past its end.
        weights: one weight > 0 per dataset, normalised here (Megatron's rule); with
            ``size=None``, the number of samples to take from each dataset (integers), blended
            with the exhaustive rule.
        size: samples in the blend (``len``), or None for the exhaustive blend.
        seed: the shuffle seed of the mid-level GPT datasets (the blend itself is not random:
            the same weights and size always give the same order).
        names: display names (default: prefix file names without ``_text_document``).
        eod_token: end-of-document id for the GPT datasets (default: the sidecar's ``eod``).
        surplus: Megatron's ``mid_level_dataset_surplus``.
        cache_dir: where to keep the two index arrays as ``.npy`` (named by the md5 of a JSON
            description, as Megatron does); a rebuilt blend loads them instead of recomputing.
        check_tokenizer: refuse datasets whose sidecar tokenizer fingerprints differ.

    Raises:
        BlendError: bad weights, size or datasets; :class:`OverdrawError` (an IndexError) when
        the blend would take more samples from a dataset than it holds — before any sample is
        read (Megatron finds out only after building every dataset and index);
        TokenizerMismatchError: datasets tokenized differently.
    """

    def __init__(self, datasets: Sequence[Any], weights: Sequence[float], size: int | None,
                 seed: int = 0, *, names: Sequence[str] | None = None, seq_length: int | None = None,
                 eod_token: int | None = None, surplus: float = DEFAULT_SURPLUS,
                 cache_dir: PathLike | None = None, check_tokenizer: bool = True) -> None:
        datasets = list(datasets)
        if not datasets:
            raise BlendError("no datasets to blend")
        if len(datasets) > MAX_DATASETS:
            raise BlendError(f"{len(datasets)} datasets: at most {MAX_DATASETS} can be blended")
        weights = list(weights)
        if len(weights) != len(datasets):
            raise BlendError(f"{len(datasets)} datasets but {len(weights)} weights: give one weight per dataset")
        self.names = [str(n) for n in names] if names is not None else \
            [_display_name(src, d) for d, src in enumerate(datasets)]
        if len(self.names) != len(datasets):
            raise BlendError(f"{len(datasets)} datasets but {len(self.names)} names")
        self.seed = int(seed)
        self.size = None if size is None else _check_size(size)
        self.surplus = float(surplus)
        self.seq_length = None if seq_length is None else int(seq_length)
        self._eod_token = None if eod_token is None else int(eod_token)
        if self.size is None:
            try:
                counts = [operator.index(w) for w in weights]
            except TypeError:
                raise BlendError("with size=None the weights are sample counts per dataset and must be "
                                 f"integers, got {weights!r:.80}") from None
            for d, c in enumerate(counts):
                if c <= 0:
                    raise BlendError(f"weights[{d}] ({self.names[d]!r}) = {c}: every dataset needs a count > 0")
            self.weights = [float(c) for c in counts]
            self.requested = counts
        else:
            w = _weights_array(weights)
            for d, v in enumerate(w.tolist()):
                if v <= 0:
                    raise BlendError(
                        f"weights[{d}] ({self.names[d]!r}) is 0: leave the dataset out of the blend "
                        "(Megatron requires weights > 0; on exact ties a zero weight is still picked)")
            self.weights = normalize_weights(w)
            self.requested = samples_per_dataset(self.weights, self.size, surplus)
        # sources → sample datasets; fingerprints are checked before anything is built
        opened = [self._open(src, self.names[d]) for d, src in enumerate(datasets)]
        self.fingerprint = check_same_tokenizer(opened, self.names) if check_tokenizer else None
        self.dataset_index, self.dataset_sample_index = self._indices(opened, cache_dir)
        self.counts = np.bincount(self.dataset_index, minlength=len(opened)).astype(np.int64)
        # datasets used as they are can be checked before anything else is built
        self._check_overdraw([None if self._wraps(ds) else ds for ds in opened])
        self.datasets = [self._mid_level(ds, d) for d, ds in enumerate(opened)]
        self._check_overdraw(self.datasets)

    # -- construction helpers
    def _open(self, src: Any, name: str) -> Any:
        if isinstance(src, (str, os.PathLike)):

            _check_prefix_files(os.fspath(src), f"dataset {name!r}")
            return IndexedDataset(os.fspath(src))
        if not (hasattr(src, "__len__") and hasattr(src, "__getitem__")):
            raise BlendError(f"dataset {name!r}: expected a prefix or a dataset with len() and [i], "
                             f"got {type(src).__name__}")
        return src

    def _wraps(self, ds: Any) -> bool:
        """True when ``ds`` (an indexed dataset) becomes a GPT sample dataset here."""
        return self.seq_length is not None and hasattr(ds, "sequence_lengths") and not hasattr(ds, "sample_index")

    def _mid_level(self, ds: Any, d: int) -> Any:
        if not self._wraps(ds):
            return ds
        config = GPTDatasetConfig(seq_length=self.seq_length, seed=self.seed, eod_token=self._eod(ds, d),
                                  reset_position_ids=False, reset_attention_mask=False, eod_mask_loss=False)
        return GPTDataset(ds, None, None if self.size is None else self.requested[d], config)

    def _eod(self, ds: Any, d: int) -> int:
        if self._eod_token is not None:
            return self._eod_token
        meta = sidecar_of(ds) or {}
        if isinstance(meta.get("eod"), int):
            return int(meta["eod"])
        raise BlendError(f"dataset {self.names[d]!r}: no eod id in its sidecar; pass eod_token=")

    def _indices(self, opened: list[Any], cache_dir: PathLike | None) -> tuple[np.ndarray, np.ndarray]:
        description = json.dumps({
            "class": "BlendedDataset", "weights": self.weights, "size": self.size,
            "datasets": [_identity(ds) for ds in opened], "names": self.names,
        }, indent=1, sort_keys=True, default=str)
        self.description = description
        self.description_hash = hashlib.md5(description.encode("utf-8"), usedforsecurity=False).hexdigest()
        paths = None
        if cache_dir is not None:
            base = Path(cache_dir)
            base.mkdir(parents=True, exist_ok=True)
            stem = f"{self.description_hash}-BlendedDataset"
            paths = {k: base / f"{stem}-{k}" for k in ("description.txt", "dataset_index.npy",
                                                        "dataset_sample_index.npy", "sha256.txt")}
            if all(p.is_file() for p in paths.values()):
                cached = self._read_cache(paths, len(opened))
                if cached is not None:
                    self.cache_hit = True
                    return cached
        self.cache_hit = False
        if self.size is None:
            di, si = build_exhaustive_blending_indices(self.requested)
        else:
            di, si = build_blending_indices(self.weights, self.size)
        if paths is not None:
            atomic_write(paths["description.txt"], description)
            with atomic_open(paths["dataset_index.npy"]) as fh:
                np.save(fh, di, allow_pickle=False)
            with atomic_open(paths["dataset_sample_index.npy"]) as fh:
                np.save(fh, si, allow_pickle=False)
            atomic_write(paths["sha256.txt"], _index_digest(di, si) + "\n")   # written last: marks the set complete
        return di, si

    def _read_cache(self, paths: dict[str, Path], n_datasets: int) -> tuple[np.ndarray, np.ndarray] | None:
        """The cached index pair when it is intact; None (and one warning line) when it is damaged,
        so that it is rebuilt: a cache is derived data, never a reason to stop."""
        expected = sum(self.requested) if self.size is None else self.size
        try:
            di = np.load(paths["dataset_index.npy"], allow_pickle=False)
            si = np.load(paths["dataset_sample_index.npy"], allow_pickle=False)
            want = paths["sha256.txt"].read_text(encoding="utf-8").strip()
        except (OSError, ValueError, EOFError) as exc:
            problem = f"unreadable ({type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''})"
        else:
            if not (di.dtype == np.int16 and si.dtype == np.int64 and di.shape == si.shape == (expected,)):
                problem = (f"of another shape or dtype ({di.dtype}{di.shape}, {si.dtype}{si.shape}; "
                           f"expected {expected} samples)")
            elif _index_digest(di, si) != want:
                problem = "damaged (its sha256 does not match the one saved with it)"
            elif di.size and (int(di.min()) < 0 or int(di.max()) >= n_datasets or int(si.min()) < 0):
                problem = "damaged (indices out of range)"
            else:
                return di, si

        print(f"warning: blend cache {shown_path(paths['dataset_index.npy'])} is {problem}; rebuilding it",
              file=sys.stderr)
        return None

    def _check_overdraw(self, datasets: list[Any]) -> None:
        for d, ds in enumerate(datasets):
            if ds is None:
                continue
            have, take = len(ds), int(self.counts[d])
            if take <= have:
                continue
            if self.size is None:
                raise OverdrawError(f"dataset {d} ({self.names[d]!r}) holds {have} samples but the exhaustive "
                                    f"blend takes {take}: lower its count to ≤ {have}")
            share = self.weights[d]
            raise OverdrawError(
                f"the blend over-draws dataset {d} ({self.names[d]!r}): {self.size:,} samples at weight "
                f"{share:.4f} take {take:,} samples from it, but it holds {have:,} "
                f"({take / have:.2f}× its size). Megatron-Core raises IndexError for this only after "
                "building every dataset and index (Megatron-LM #705). Lower its weight to about "
                f"{max(have - 1, 0) / self.size:.4f} or less, lower size, or build it as a GPT sample dataset "
                "(seq_length=...) that repeats epochs — then read blend_report() for the memorisation risk")

    # -- access
    def __len__(self) -> int:
        return int(self.dataset_index.shape[0])

    def __getitem__(self, idx: int) -> dict[str, Any]:
        i = normalize_index(idx, len(self), "sample", "this blend")
        d = int(self.dataset_index[i])
        s = int(self.dataset_sample_index[i])
        sample = self.datasets[d][s]
        if isinstance(sample, Mapping):
            return {"dataset_id": d, **sample}
        return {"dataset_id": d, "dataset_sample_id": s, "tokens": sample}

    def samples_per_epoch(self) -> list[int]:
        """Distinct samples in one pass over each dataset (GPT samples per epoch, or its length)."""
        return [_samples_per_epoch(ds) for ds in self.datasets]

    def report(self, warn_epochs: float = 4.0) -> "BlendReport":
        """:func:`blend_report` of this blend (realised counts from its own index)."""
        return blend_report(self.weights, self.samples_per_epoch(), len(self), names=self.names,
                            warn_epochs=warn_epochs, dataset_index=self.dataset_index)

    def __repr__(self) -> str:
        parts = ", ".join(f"{n}={w:.3f}" for n, w in zip(self.names, self.weights))
        return f"BlendedDataset({len(self):,} samples: {parts})"


# =============================================================================================
# the report
# =============================================================================================
@dataclass(frozen=True)
class BlendRow:
    """One dataset's line of a :class:`BlendReport` (samples are blended samples).

    Over several epochs Megatron's GPTDataset shuffles all epochs' copies of the document list in
    one permutation (a short last epoch apart), so the sample *windows* differ from pass to pass
    (almost no sample repeats exactly); what repeats is the text — every document is read about ``epochs`` times
    (:meth:`~labsupport.datasets.gpt_samples.GPTDataset.token_reads` counts it per document).
    """

    name: str
    target: float          #: normalised weight (target share of the blend)
    realised: float        #: drawn / blend size
    drawn: int             #: samples the blend takes from this dataset
    available: int         #: samples in one epoch of the dataset (one pass over its text)
    #: share of the drawn samples' text that the run reads again: 1 − 1/epochs (0 below one epoch)
    repeated: float
    epochs: float          #: drawn / available — how many times each document (each token) is read
    warning: bool          #: epochs above the report's threshold



@dataclass
class BlendReport:
    """Target vs realised blend and the epochs it costs each dataset (book §6.2.5, §6.2.9)."""

    rows: list[BlendRow]
    size: int
    warn_epochs: float
    max_deviation: float = 0.0          #: max over steps and datasets of |count - target*step|
    warnings: list[str] = field(default_factory=list)

    def __str__(self) -> str:
        head = (f"{'dataset':<10} {'target':>7} {'realised':>9} {'drawn':>9} {'per epoch':>10} "
                f"{'epochs':>7} {'repeated':>9}")
        lines = [f"blend of {self.size:,} samples", head, "-" * len(head)]
        for r in self.rows:
            flag = "  ⚠" if r.warning else ""
            lines.append(f"{r.name:<10} {r.target:7.3f} {r.realised:9.4f} {r.drawn:9,d} {r.available:10,d} "
                         f"{r.epochs:7.2f} {r.repeated:9.0%}{flag}")
        lines.extend(self.warnings)
        return "\n".join(lines)

    def to_dict(self) -> dict:
        return {"size": self.size, "warn_epochs": self.warn_epochs, "max_deviation": self.max_deviation,
                "rows": [r.__dict__ for r in self.rows], "warnings": list(self.warnings)}


def blend_report(weights: Sequence[float], samples_per_epoch: Sequence[int], size: int, *,
                 names: Sequence[str] | None = None, warn_epochs: float = 4.0,
                 dataset_index: np.ndarray | None = None) -> BlendReport:
    """Per dataset: target share, realised share, samples drawn, epochs, repeated share.

    Args:
        weights: the blend weights (normalised here).
        samples_per_epoch: distinct samples each dataset holds (e.g. tokens // seq_length).
        size: samples in the blend (e.g. total training tokens // seq_length).
        names: dataset names for the table.
        warn_epochs: datasets seen more than this many times get a warning — the memorisation
            risk of over-sampling a small dataset (book §6.2.9, "작은 데이터셋 과샘플링").
        dataset_index: the blend's own index, if already built (else built here, exactly).
    """
    w = normalize_weights(weights)
    size = _check_size(size)
    avail = [operator.index(a) for a in samples_per_epoch]
    if len(avail) != len(w):
        raise BlendError(f"{len(w)} weights but {len(avail)} dataset sizes")
    for d, a in enumerate(avail):
        if a <= 0:
            raise BlendError(f"samples_per_epoch[{d}] = {a}: a dataset must hold at least one sample")
    names = [str(n) for n in names] if names is not None else [f"dataset {d}" for d in range(len(w))]
    if not (warn_epochs > 0 and math.isfinite(warn_epochs)):
        raise BlendError(f"warn_epochs must be a positive number, got {warn_epochs!r}")
    if dataset_index is None:
        dataset_index, _ = build_blending_indices(w, size)
    di = np.asarray(dataset_index)
    if di.shape != (size,):
        raise BlendError(f"dataset_index has shape {di.shape}, expected ({size},)")
    drawn = np.bincount(di, minlength=len(w)).astype(np.int64)
    rows, warns = [], []
    for d in range(len(w)):
        epochs = drawn[d] / avail[d]
        over = epochs > warn_epochs
        rows.append(BlendRow(names[d], w[d], drawn[d] / size if size else 0.0, int(drawn[d]), avail[d],
                             float(max(0.0, 1.0 - 1.0 / epochs)) if epochs > 0 else 0.0, float(epochs), bool(over)))
        if over:
            warns.append(f"⚠ {names[d]}: {epochs:.1f} epochs > {warn_epochs:g} — each of its documents is read "
                         f"about {epochs:.1f} times (in new sample windows each epoch, the same text): "
                         "memorisation risk (book §6.2.9). Lower its weight, add data, or accept it knowingly.")
        if w[d] == 0 and drawn[d]:
            times = f"{int(drawn[d])} time{'s' if drawn[d] > 1 else ''}"
            warns.append(f"note: {names[d]} has weight 0 yet is drawn {times}: the rule picks the largest "
                         "error w·max(i, 1) − count, a weight-0 dataset's is 0, and at a step where every other "
                         "dataset is exactly on its share that 0 ties and the lowest index wins; then its error is "
                         "−1 and it is never picked again. Leave it out of the blend to draw nothing.")
    return BlendReport(rows, size, float(warn_epochs), _max_deviation(di, w), warns)


def _max_deviation(dataset_index: np.ndarray, weights: Sequence[float]) -> float:
    """max over steps i (1..size) and datasets of |count_d after i samples - w_d * i|."""
    size = dataset_index.shape[0]
    if size == 0:
        return 0.0
    steps = np.arange(1, size + 1, dtype=np.float64)
    worst = 0.0
    for d, wd in enumerate(weights):
        counts = np.cumsum(dataset_index == d, dtype=np.int64)
        worst = max(worst, float(np.abs(counts - wd * steps).max()))
    return worst


# =============================================================================================
# exercise arithmetic and the dedup note
# =============================================================================================
def expected_epochs(weights: Sequence[float], dataset_sizes: Sequence[float], total: float) -> list[float]:
    """Epochs each dataset is seen: ``w_d * total / size_d`` (normalised weights).

    ``dataset_sizes`` and ``total`` in the same unit (tokens, or samples): a code set of 2 B
    tokens at weight 0.5 of a 100 B-token run is seen 25 times.
    """
    w = normalize_weights(weights)
    sizes = [float(s) for s in dataset_sizes]
    if len(sizes) != len(w):
        raise BlendError(f"{len(w)} weights but {len(sizes)} dataset sizes")
    for d, s in enumerate(sizes):
        if not (s > 0 and math.isfinite(s)):
            raise BlendError(f"dataset_sizes[{d}] = {s!r}: sizes must be positive")
    if not (total >= 0 and math.isfinite(total)):
        raise BlendError(f"total must be ≥ 0, got {total!r}")
    return [wd * total / s for wd, s in zip(w, sizes)]


def cap_weights(weights: Sequence[float], dataset_sizes: Sequence[float], total: float,
                max_epochs: float) -> list[float]:
    """The blend closest to ``weights`` that sees no dataset more than ``max_epochs`` times.

    Datasets over the cap are set to exactly the cap (``max_epochs * size_d / total``); the
    weight they lose goes to the others in proportion to their weights; repeated until no
    dataset is over.  Returns normalised weights.  Raises :class:`BlendError` when even every
    dataset at its cap cannot fill the run (``sum(caps) < 1`` over datasets with weight > 0).
    """
    w = np.array(normalize_weights(weights))
    sizes = np.array(dataset_sizes, dtype=np.float64)
    if sizes.shape != w.shape:
        raise BlendError(f"{w.size} weights but {sizes.size} dataset sizes")
    if not (max_epochs > 0 and math.isfinite(max_epochs)):
        raise BlendError(f"max_epochs must be a positive number, got {max_epochs!r}")
    if not (total > 0 and math.isfinite(total)):
        raise BlendError(f"total must be a positive number, got {total!r}")
    if not np.all(sizes > 0):
        raise BlendError(f"dataset_sizes must be positive, got {sizes.tolist()}")
    cap = max_epochs * sizes / total
    usable = w > 0
    if cap[usable].sum() < 1.0 - 1e-12:
        raise BlendError(
            f"no blend keeps every dataset under {max_epochs:g} epochs: at their caps the datasets "
            f"fill {cap[usable].sum():.1%} of the {total:g} run; add data or shorten the run")
    fixed = np.zeros(w.size, dtype=bool)
    out = w.copy()
    while True:
        free = usable & ~fixed
        room = 1.0 - cap[fixed].sum()
        out = np.where(fixed, cap, 0.0)
        out[free] = w[free] * room / w[free].sum() if free.any() else 0.0
        over = free & (out > cap * (1 + 1e-12))
        if not over.any():
            return out.tolist()
        fixed |= over


def exact_duplicates(texts: Iterable[str]) -> list[list[int]]:
    """Groups of positions whose texts are byte-identical (sha256), groups of 2+ only, in order.

    The simplest of NeMo Curator's dedup stages (exact dedup); fuzzy (MinHash) and semantic
    dedup catch near-copies too.
    """
    groups: dict[bytes, list[int]] = {}
    for k, t in enumerate(texts):
        groups.setdefault(hashlib.sha256(t.encode("utf-8")).digest(), []).append(k)
    return [g for g in groups.values() if len(g) > 1]
