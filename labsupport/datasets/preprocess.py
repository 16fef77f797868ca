"""jsonl → Megatron ``.bin``/``.idx``: the preprocessing CLI of chapter 2 (book §6.2.4).

    python -m labsupport preprocess --input data/web.jsonl [more files or globs] \\
        --json-keys text --tokenizer-library sentencepiece --tokenizer-model tok.model \\
        --output-prefix out/web --append-eod --workers 2

writes ``out/web_text_document.bin``/``.idx`` (one per json key) and the sidecar ``.json``
(tokenizer fingerprint, vocabulary size, dtype, counts, source files with sha256), the same
names and flags as NeMo's ``preprocess_data_for_megatron.py`` / Megatron's
``tools/preprocess_data.py``.  Each document is exactly ``Tokenizer.encode(text)`` plus
``Tokenizer.eod`` with ``--append-eod`` (no BOS); as in Megatron's script, a document whose text
encodes to nothing gets no EOD and no sequence (its document index is still written), so the
document count always equals the number of good input lines.  A Hugging Face tokenizer (a folder
with ``tokenizer.json``, :mod:`labsupport.datasets.hf_tokenizer`) is taken with
``--tokenizer-library huggingface`` or Megatron's ``--tokenizer-type HuggingFaceTokenizer`` (or
inferred from the path); its documents are ``encode(text, add_special_tokens=False)`` plus EOS.

What it saves over Megatron's ``Pool(workers).imap(encode, lines, 32)``: the main process hands
out ~512 KiB blocks of raw lines instead of pickled single lines, each worker parses, tokenizes
and flattens its block into one numpy array (instead of pickling every document's ids as Python
ints), and the main process only writes bytes.  Most of the time is SentencePiece's own BPE, so
each worker also keeps a word-level cache (:class:`labsupport.datasets.word_cache.WordCache`,
what HF ``tokenizers`` does): a word it has seen before is not run through BPE again.  The ids
are exactly ``Tokenizer.encode``'s — the cache is only used for models where that is proven
(:func:`~labsupport.datasets.word_cache.word_cache_problem`: SentencePiece BPE models,
whatever their normalization rule), every other model (unigram) is encoded as before and the
reason is printed — and ``--no-word-cache`` turns it off; the output files are
byte-identical either way (``benchmarks/bench_indexed.py`` measures both against Megatron).
The words a worker has not cached yet go through BPE with SentencePiece's ``encode`` or, with
``--bpe-engine numba`` (and by default from :data:`AUTO_NUMBA_BYTES_PER_WORKER` of input per
worker on), through the same merge loop compiled by numba (:mod:`labsupport.datasets.spm_bpe_numba`):
same ids, about 60% of the time per new word, ~0.4 s to start once per run.
Order is preserved.  Bad lines (invalid JSON or UTF-8, not an object, missing key, non-string
value, blank) are reported as ``file:line: reason``; by default they are skipped and counted,
``--strict`` stops at the first one without leaving any output behind.

Exit status of ``python -m labsupport preprocess``: 0 done; 1 an error (bad input, no usable line,
an output folder that cannot be written — one line on stderr naming the file, line or flag);
2 a usage error (argparse); 130 interrupted with Ctrl-C (one line; no output or temporary file
left behind). The outputs are all-or-nothing (:mod:`labsupport.datasets.staging`): every key's
``.bin``/``.idx``/``.json`` is built in a staging folder beside the prefix and moved into place
together once all are complete; an existing dataset at the prefix stays readable until then.
What a *killed* run (``kill -9``, a crash) leaves — a staging folder, or temporary files named
``<output>.tmp-<pid>-<hex>`` — the next run with the same prefix removes (or, for a staging
folder that was already committed, finishes moving), and says so on stderr.  A run holds
``<output prefix>.lock`` (:func:`lock_prefix`) throughout, so a second run on the same prefix is
refused in one line naming the first's pid (status 1) instead of interleaving its moves with the
first's; a 0-byte input is refused too.

Chapter 3 and later chapters use :func:`workbook_prefixes`: the four shipped domains
preprocessed with the workbook tokenizer, cached in ``work_dir("indexed")``.
"""
from __future__ import annotations

import argparse
import collections
import errno
import gc
import glob
import hashlib
import json
import multiprocessing
import os
import re
import signal
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Iterator, Sequence

import numpy as np

from labsupport.datasets.indexed import (
    IndexedDataset,
    IndexedDatasetBuilder,
    get_bin_path,
    get_idx_path,
    get_sidecar_path,
    optimal_dtype,
)
from labsupport.datasets import staging
from labsupport.datasets.word_cache import BPE_ENGINES, WordCache, bpe_engine_problem, word_cache_problem
from labsupport.cli import fail, run_command
from labsupport.fileio import PathLike, writer_gone
from labsupport.fileio import LockHeld, hold_lock
from labsupport.paths import DOMAINS, data_file, shown_path, work_dir
from labsupport.datasets.tokenizer import Tokenizer, workbook_tokenizer
from labsupport.datasets.hf_tokenizer import HFTokenizer, is_hf_tokenizer_path
from labsupport.progress import progress

#: Raw input bytes per work item (a block of whole lines).
CHUNK_BYTES = 512 * 1024
#: Bad lines reported one by one before the rest are only counted.
MAX_REPORTED = 20
#: ``bpe_engine="auto"`` runs new words through the compiled BPE loop from this much input per
#: worker on (bytes).  Its start (~0.4 s, once per run, before the workers: importing numba,
#: loading the loop, its self-check) is paid back by the time it saves, which is shared among
#: the workers; ``benchmarks/results/indexed.json`` (``bpe_engine_start``) measures where.
AUTO_NUMBA_BYTES_PER_WORKER = 32_000_000
#: Bump when the output of the same inputs would change (invalidates workbook_prefixes' cache).
FORMAT_REVISION = 1
#: The tokenizer families: the book's ``--tokenizer-library`` name → Megatron's ``--tokenizer-type`` name.
TOKENIZER_LIBRARIES = {"sentencepiece": "SentencePieceTokenizer", "huggingface": "HuggingFaceTokenizer"}


class PreprocessError(ValueError):
    """Unusable input: no such file, a bad line under ``--strict``, a bad tokenizer."""


@dataclass(frozen=True)
class BadLine:
    """One skipped input line: ``path:lineno: reason``."""

    path: str
    lineno: int
    reason: str

    def __str__(self) -> str:
        return f"{self.path}:{self.lineno}: {self.reason}"


@dataclass
class PreprocessResult:
    """What :func:`preprocess` wrote and counted."""

    prefixes: dict[str, str]            #: json key → output prefix (``…_<key>_document``)
    documents: int                      #: documents written (= good input lines)
    tokens: dict[str, int]              #: json key → tokens written (EODs included)
    empty_documents: int                #: documents whose text encoded to no tokens
    input_bytes: int                    #: bytes read
    bad_lines: list[BadLine] = field(default_factory=list)  #: the first MAX_REPORTED bad lines
    num_bad_lines: int = 0              #: all bad lines (skipped)
    seconds: float = 0.0                #: wall time
    sidecars: dict[str, dict] = field(default_factory=dict)  #: json key → sidecar dict
    #: ``{"used": bool, "reason": why not used or None, "words": words looked up, "misses": words
    #: not cached yet, "encoded": strings that went through BPE (the new words, or their new fine
    #: parts), "fine_problem": why new words are not cut finer or None}`` summed over the workers
    #: (each keeps its own cache); ``"bpe_engine"``: how new words went through BPE ("numba" or
    #: "sentencepiece"), ``"bpe_problem"``: why not the compiled loop (None when used)
    word_cache: dict = field(default_factory=dict)

    @property
    def tokens_per_second(self) -> float:
        return sum(self.tokens.values()) / self.seconds if self.seconds else float("nan")


# ----------------------------------------------------------------------------------- inputs
def expand_inputs(patterns: Sequence[PathLike]) -> list[Path]:
    """Files named by ``patterns`` (paths or globs), in the order given; globs sorted.

    Raises PreprocessError for a pattern matching nothing, a directory, or no patterns.
    """
    if not patterns:
        raise PreprocessError("no --input given: pass one or more jsonl files or globs")
    files: list[Path] = []
    for pat in patterns:
        pat = os.fspath(pat)
        if glob.has_magic(pat):
            matches = sorted(p for p in glob.glob(pat, recursive=True) if os.path.isfile(p))
            if not matches:
                raise PreprocessError(f"--input {pat!r} matches no file")
            files.extend(Path(m) for m in matches)
        elif os.path.isdir(pat):
            raise PreprocessError(f"--input {pat!r} is a directory: pass the files (e.g. '{pat}/*.jsonl')")
        elif not os.path.isfile(pat):
            raise PreprocessError(f"--input {pat!r}: no such file")
        else:
            files.append(Path(pat))
    return files


def _blocks(fh, chunk_bytes: int, hasher) -> Iterator[bytes]:
    """Blocks of whole lines (each ends with b"\\n" except possibly the last of the file)."""
    rest = b""
    while True:
        data = fh.read(chunk_bytes)
        if not data:
            if rest:
                yield rest
            return
        hasher.update(data)
        buf = rest + data
        cut = buf.rfind(b"\n")
        if cut < 0:
            rest = buf
            continue
        rest = buf[cut + 1:]
        yield buf[: cut + 1]


# ----------------------------------------------------------------------------------- workers
_WORKER: dict = {}


def _init_worker(tokenizer, keys: tuple[str, ...], append_eod: bool, dtype: str,
                 word_cache: bool = False, fine_cut: bool = False, bpe_engine: str = "sentencepiece",
                 pool_worker: bool = False) -> None:
    if pool_worker:
        # A forked worker inherits every object of the parent (hundreds of thousands in a
        # notebook or a script that imported torch); move them out of the garbage collector's
        # sight, or each collection triggered by this worker's own allocations walks them all.
        gc.freeze()
        # Ctrl-C reaches every process of the terminal's group: let only the parent handle it
        # (it stops the pool and removes the partial output), so workers print no traceback.
        signal.signal(signal.SIGINT, signal.SIG_IGN)
    # each worker process gets its own, empty cache (not exact: plain encode_batch)
    cache = WordCache(tokenizer, dtype, enabled=word_cache, fine=fine_cut, bpe_engine=bpe_engine)
    _WORKER.update(tok=tokenizer, keys=keys, append_eod=append_eod, dtype=np.dtype(dtype),
                   eod=tokenizer.eod if append_eod else None, cache=cache)


def _describe(exc: json.JSONDecodeError) -> str:
    return f"invalid JSON ({exc.msg}: column {exc.colno})"


def _encode_block(task: tuple[int, int, bytes]) -> tuple:
    """Parse, tokenize and flatten one block of lines (runs in a worker).

    Returns ``(file_index, n_bytes, n_lines, n_docs, {key: (flat ids, doc lengths)}, bad,
    (words, misses, encoded, bpe engine))`` where ``bad`` lists ``(lineno, reason)`` and the last
    item counts this block's word-cache lookups, words not cached yet and strings run through BPE
    and names the engine that ran them (the counts are zeros
    without a cache).
    """
    file_index, first_lineno, blob = task
    keys = _WORKER["keys"]
    lines = blob.split(b"\n")
    if lines[-1] == b"":
        lines.pop()
    texts: dict[str, list[str]] = {k: [] for k in keys}
    bad: list[tuple[int, str]] = []
    loads = json.loads
    for j, line in enumerate(lines):
        try:
            obj = loads(line)
        except json.JSONDecodeError as exc:
            reason = "blank line" if not line.strip() else _describe(exc)
            bad.append((first_lineno + j, reason))
            continue
        except UnicodeDecodeError as exc:
            bad.append((first_lineno + j, f"not valid UTF-8 (byte {exc.start} of the line)"))
            continue
        if not isinstance(obj, dict):
            bad.append((first_lineno + j, f"not a JSON object (a {type(obj).__name__})"))
            continue
        problem = None
        for k in keys:
            if k not in obj:
                problem = f"missing key {k!r} (keys: {sorted(obj)[:6]})"
                break
            if not isinstance(obj[k], str):
                kind = type(obj[k]).__name__
                problem = f"key {k!r} is {'an' if kind[0] in 'aeiou' else 'a'} {kind}, expected a string"
                break
        if problem:
            bad.append((first_lineno + j, problem))
            continue
        for k in keys:
            texts[k].append(obj[k])
    out = {}
    eod = _WORKER["eod"]
    cache = _WORKER["cache"]
    before = cache.words, cache.misses, cache.encoded
    for k in keys:
        out[k] = cache.encode_flat(texts[k], append=eod)
    counts = (cache.words - before[0], cache.misses - before[1], cache.encoded - before[2], cache.bpe_engine)
    return file_index, len(blob), len(lines), len(texts[keys[0]]), out, bad, counts


# ----------------------------------------------------------------------------------- main loop
def load_tokenizer(tokenizer, library: str | None = None) -> Tokenizer | HFTokenizer:
    """A tokenizer object as it is, or the model at a path: ``library`` "sentencepiece" (a ``.model``) or
    "huggingface" (a folder with ``tokenizer.json``, or that file); None tells them apart by the path.
    PreprocessError when the file is not of that library."""
    if isinstance(tokenizer, (Tokenizer, HFTokenizer)):
        return tokenizer
    if library not in (None, *TOKENIZER_LIBRARIES):
        raise PreprocessError(f"--tokenizer-library {library}: not one of {', '.join(TOKENIZER_LIBRARIES)}")
    hf = is_hf_tokenizer_path(tokenizer) if library is None else library == "huggingface"
    try:
        return HFTokenizer(tokenizer) if hf else Tokenizer(tokenizer)
    except (FileNotFoundError, ValueError, ImportError) as exc:
        raise PreprocessError(f"--tokenizer-model: {exc}") from None


def _checked_arguments(inputs: Sequence[PathLike], json_keys: Sequence[str], workers: int, tokenizer,
                       append_eod: bool, library: str | None = None):
    """Phase 1: the input files, keys, worker count and tokenizer, or PreprocessError saying what is wrong."""
    files = expand_inputs(inputs)
    keys = tuple(json_keys)
    if not keys or len(set(keys)) != len(keys):
        raise PreprocessError(f"--json-keys must name distinct keys, got {list(keys)}")
    workers = int(workers)
    if workers < 1:
        raise PreprocessError(f"--workers must be >= 1, got {workers}")
    tok = load_tokenizer(tokenizer, library)
    if append_eod:
        try:
            tok.eod
        except ValueError as exc:
            raise PreprocessError(f"--append-eod: {exc}") from None
    return files, keys, workers, tok


def _open_builders(prefixes: dict[str, str], dtype: np.dtype, vocab_size: int, output_prefix: PathLike,
                   log) -> tuple[dict[str, IndexedDatasetBuilder], Path]:
    """Phase 2: finish or remove what an interrupted run left under these prefixes, then a staging
    folder beside them (:mod:`~labsupport.datasets.staging`) and one builder per key writing into
    it; PreprocessError naming the folder when it cannot be written."""
    for note in staging.recover(output_prefix, locked=True):   # the prefix is locked: all are a killed run's
        print(f"preprocess: {note}", file=log)
    for p in prefixes.values():
        removed = remove_stale_temporaries(p, locked=True)
        if removed:
            print(f"preprocess: removed {len(removed)} temporary file(s) left by an interrupted run: "
                  f"{', '.join(shown_path(r) for r in removed)}", file=log)
    builders: dict[str, IndexedDatasetBuilder] = {}
    stage = None
    try:
        stage = staging.new_staging(output_prefix)
        for k, p in prefixes.items():
            builders[k] = IndexedDatasetBuilder(get_bin_path(stage / Path(p).name), dtype, vocab_size=vocab_size)
    except OSError as exc:
        for b in builders.values():
            b.abort()
        if stage is not None:
            staging.discard(stage)
        folder = Path(get_bin_path(next(iter(prefixes.values())))).parent
        why = "does not exist" if not folder.is_dir() else f"cannot be written ({exc.strerror})"
        raise PreprocessError(f"--output-prefix {shown_path(output_prefix)}: folder {shown_path(folder)} {why}; "
                              "choose a folder you can write to") from None
    return builders, stage


def _start_pool(workers: int, init: tuple):
    """Phase 3: the worker pool (None for ``workers == 1``, which encodes in this process)."""
    if workers == 1:
        _init_worker(*init)
        return None
    method = "fork" if "fork" in multiprocessing.get_all_start_methods() else "spawn"
    # A forked worker cannot use the threads `tokenizers` may have started here: say so for the fork
    # (each worker then encodes in its own process, as Megatron's do) instead of each child warning.
    had = "TOKENIZERS_PARALLELISM" in os.environ
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    # Ctrl-C while the pool is half-built would leave worker processes that block the exit:
    # hold SIGINT until the pool exists, so the caller's cleanup can terminate it.
    held = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT}) if hasattr(signal, "pthread_sigmask") else None
    try:
        return multiprocessing.get_context(method).Pool(workers, _init_worker, init + (True,))
    finally:
        if not had:
            os.environ.pop("TOKENIZERS_PARALLELISM", None)
        if held is not None:
            signal.pthread_sigmask(signal.SIG_SETMASK, held)


@dataclass
class _Tally:
    """Phase 4's running counts: documents, tokens per key, bad lines, word-cache hits."""

    keys: tuple[str, ...]
    shown: list[str]
    strict: bool
    log: Any
    lines_per_file: list[int]
    tokens: dict[str, int] = field(default_factory=dict)
    bad_lines: list[BadLine] = field(default_factory=list)
    n_bad: int = 0
    n_docs: int = 0
    n_empty: int = 0
    cache_words: int = 0
    cache_misses: int = 0
    cache_encoded: int = 0
    bpe_engines: set = field(default_factory=set)   # as reported by the workers

    def add(self, result, builders: dict[str, IndexedDatasetBuilder], bar) -> int:
        """Count one encoded block, append its documents to the builders; returns its bytes."""
        fi, nbytes, n_lines, docs, encoded, bad, (n_words, n_misses, n_encoded, bpe_engine) = result
        self.bpe_engines.add(bpe_engine)
        self.lines_per_file[fi] += n_lines
        self.cache_words += n_words
        self.cache_misses += n_misses
        self.cache_encoded += n_encoded
        for lineno, reason in bad:
            self.n_bad += 1
            item = BadLine(self.shown[fi], lineno, reason)
            if self.strict:
                raise PreprocessError(f"{item} (--strict stops at the first bad line; "
                                      "fix the line or drop --strict to skip bad lines)")
            if len(self.bad_lines) < MAX_REPORTED:
                self.bad_lines.append(item)
                _warn(f"warning: {item} — skipped", self.log, bar)
            elif self.n_bad == MAX_REPORTED + 1:
                _warn("warning: more bad lines; from now on they are only counted", self.log, bar)
        for k in self.keys:
            flat, lens = encoded[k]
            builders[k].add_documents(flat, lens, empty_as_no_sequence=True)
            self.tokens[k] = self.tokens.get(k, 0) + flat.size
        self.n_empty += int((encoded[self.keys[0]][1] == 0).sum())
        self.n_docs += docs
        return nbytes


def choose_bpe_engine(engine: str, tok, input_bytes: int, cache_problem: str | None,
                      workers: int = 1) -> tuple[str, str | None]:
    """``(engine that runs, why not the compiled loop or None)`` for ``--bpe-engine engine``.

    "sentencepiece": SentencePiece's ``encode``.  "numba": the compiled loop where
    :func:`~labsupport.datasets.word_cache.bpe_engine_problem` allows it (else SentencePiece, and
    the reason).  "auto": "numba" from :data:`AUTO_NUMBA_BYTES_PER_WORKER` × ``workers`` bytes of
    input on, else "sentencepiece".
    Without a word cache there are no new words to encode: "sentencepiece".  Raises
    PreprocessError for an unknown engine.
    """
    if engine not in ("auto",) + BPE_ENGINES:
        raise PreprocessError(f"--bpe-engine must be one of auto, {', '.join(BPE_ENGINES)}; got {engine!r}")
    if cache_problem is not None:
        return tok.library, "no word cache"
    if engine == "sentencepiece":
        return "sentencepiece", "turned off (--bpe-engine sentencepiece)"
    if engine == "auto" and input_bytes < AUTO_NUMBA_BYTES_PER_WORKER * workers:
        return "sentencepiece", (f"input under {AUTO_NUMBA_BYTES_PER_WORKER / 1e6:.0f} MB per worker: starting "
                                 "the compiled loop (~0.4 s) would cost more than it saves")
    problem = bpe_engine_problem(tok)
    return ("sentencepiece", problem) if problem else ("numba", None)


def lock_prefix(output_prefix: PathLike, wait: bool = False):
    """Hold ``<output_prefix>.lock`` (:func:`labsupport.fileio.hold_lock`) while a run writes the prefix:
    a second run is refused (PreprocessError naming the holder's pid), or with ``wait`` waits
    for it.  Re-entrant in one process (:func:`workbook_prefixes` holds it around :func:`preprocess`)."""
    shown = shown_path(output_prefix)
    try:
        return hold_lock(f"{os.fspath(output_prefix)}.lock", f"--output-prefix {shown}", wait=wait, reentrant=True)
    except LockHeld as exc:
        raise PreprocessError(f"{exc}: wait for that run to finish, or choose another --output-prefix") from None
    except OSError as exc:
        folder = Path(os.path.abspath(os.fspath(output_prefix))).parent
        why = "does not exist" if not folder.is_dir() else f"cannot be written ({exc.strerror})"
        raise PreprocessError(f"--output-prefix {shown}: folder {shown_path(folder)} {why}; "
                              "choose a folder you can write to") from None


def preprocess(inputs: Sequence[PathLike], output_prefix: PathLike, tokenizer, *,
               json_keys: Sequence[str] = ("text",), append_eod: bool = False, workers: int = 1,
               strict: bool = False, show_progress: bool = True, log=None,
               chunk_bytes: int = CHUNK_BYTES, word_cache: bool = True,
               fine_cut: bool = False, bpe_engine: str = "auto",
               tokenizer_library: str | None = None) -> PreprocessResult:
    """Tokenize jsonl ``inputs`` into ``<output_prefix>_<key>_document.{bin,idx,json}`` per key.

    ``tokenizer``: a :class:`~labsupport.datasets.tokenizer.Tokenizer` or
    :class:`~labsupport.datasets.hf_tokenizer.HFTokenizer`, or a path (:func:`load_tokenizer`: a ``.model``, or a
    Hugging Face tokenizer folder; ``tokenizer_library`` "sentencepiece"/"huggingface" says which, None: by the path).
    ``workers``: processes that parse and tokenize (1 = in this process).  ``word_cache``: let
    each worker keep a word-level cache when the tokenizer allows it (same output, faster; see
    the module docstring); False = one SentencePiece call per document, as before.  ``fine_cut``:
    cut the words not cached yet finer (``WordCache(fine=True)``: same ids; off by default because
    ``benchmarks/bench_indexed.py`` measured it slower).  ``bpe_engine``: how each worker runs its
    new words through BPE (:func:`choose_bpe_engine`): "auto" (default: SentencePiece's merge loop
    compiled by numba from :data:`AUTO_NUMBA_BYTES_PER_WORKER` per worker on, else SentencePiece's ``encode``),
    "numba" or "sentencepiece" — the same ids either way.  Bad lines go to
    ``log`` (default stderr) as ``file:line: reason`` and are skipped, or raise PreprocessError
    with ``strict``; nothing is left on disk when an error stops the run.  The progress bar
    (documents, tokens, MB/s) goes to stderr.  Prints nothing to stdout.

    Phases: check the arguments → lock the prefix (:func:`lock_prefix`; a second run on it is
    refused) → open one builder per key → encode blocks (in a pool) and append them in input
    order → write each ``.idx`` and sidecar → move them into place together.
    """
    files, keys, workers, tok = _checked_arguments(inputs, json_keys, workers, tokenizer, append_eod,
                                                   tokenizer_library)
    with lock_prefix(output_prefix):
        return _preprocess_locked(files, output_prefix, tok, keys=keys, append_eod=append_eod, workers=workers,
                                  strict=strict, show_progress=show_progress, log=sys.stderr if log is None else log,
                                  chunk_bytes=chunk_bytes, word_cache=word_cache, fine_cut=fine_cut,
                                  bpe_engine=bpe_engine)


def _preprocess_locked(files: list[Path], output_prefix: PathLike, tok: Tokenizer, *, keys: tuple[str, ...],
                       append_eod: bool, workers: int, strict: bool, show_progress: bool, log: Any,
                       chunk_bytes: int, word_cache: bool, fine_cut: bool, bpe_engine: str) -> PreprocessResult:
    """:func:`preprocess` once the arguments are checked and the prefix is locked."""
    dtype = np.dtype(optimal_dtype(tok.vocab_size))
    shown = [shown_path(f) for f in files]
    prefixes = {k: f"{os.fspath(output_prefix)}_{k}_document" for k in keys}
    total_bytes = sum(f.stat().st_size for f in files)
    if total_bytes == 0:
        raise PreprocessError(f"--input {' '.join(shown[:3])}{' …' if len(shown) > 3 else ''}: empty "
                              f"({'every file is ' if len(shown) > 1 else ''}0 bytes), a dataset of 0 documents; "
                              "give jsonl files with one document per line")
    start = time.perf_counter()
    builders, stage = _open_builders(prefixes, dtype, tok.vocab_size, output_prefix, log)
    hashers = [hashlib.sha256() for _ in files]
    tally = _Tally(keys, shown, strict, log, [0] * len(files), dict.fromkeys(keys, 0))

    def tasks() -> Iterator[tuple[int, int, bytes]]:
        for fi, path in enumerate(files):
            lineno = 1
            with open(path, "rb") as fh:
                for blob in _blocks(fh, chunk_bytes, hashers[fi]):
                    yield fi, lineno, blob
                    lineno += blob.count(b"\n") + (0 if blob.endswith(b"\n") else 1)

    cache_problem = word_cache_problem(tok) if word_cache else "turned off (--no-word-cache)"
    # decided (and the compiled loop proven and loaded) here, once: forked workers inherit it
    engine, bpe_problem = choose_bpe_engine(bpe_engine, tok, total_bytes, cache_problem, workers)
    fine_problem = cache_problem if fine_cut else "turned off"
    if cache_problem is None and fine_cut:  # proven once here; forked workers inherit it and the regex
        fine_problem = WordCache(tok, dtype, max_words=1, fine=True).fine_problem
    pool = bar = None
    try:  # from here on, any exception (Ctrl-C included) removes the partial output
        pool = _start_pool(workers, (tok, keys, append_eod, dtype.str, cache_problem is None, fine_cut, engine))
        results = _ordered(pool, tasks(), window=2 * workers + 2) if pool is not None else map(_encode_block, tasks())
        if show_progress:

            bar = progress(total=total_bytes, unit="B", unit_scale=True, unit_divisor=1000,
                           desc="preprocess")
        for result in results:
            nbytes = tally.add(result, builders, bar)
            if bar is not None:
                bar.set_postfix_str(f"{tally.n_docs:,} docs, {sum(tally.tokens.values()):,} tokens", refresh=False)
                bar.update(nbytes)
        if bar is not None:
            bar.refresh()  # the final counts and rate, however short the run
        if tally.n_docs == 0 and tally.n_bad:
            found = _keys_found(files)
            raise PreprocessError(
                f"no usable line: all {tally.n_bad:,} lines were skipped (first: {tally.bad_lines[0]}). "
                + (f"--json-keys {' '.join(keys)}: the objects have keys {found}; pass one of them"
                   if found and not set(keys) & set(found) else "see the warnings above"))
        if pool is not None:
            pool.close()
            pool.join()
        sidecars = {}
        for k, prefix in prefixes.items():
            builders[k].metadata = _sidecar_extra(k, tok, append_eod, files, shown, hashers,
                                                  tally.lines_per_file, tally.n_bad, tally.n_empty)
            sidecars[k] = builders[k].finalize(get_idx_path(stage / Path(prefix).name))
        staging.commit(stage, list(prefixes.values()))   # every key's files appear together
    except BaseException:
        for b in builders.values():
            b.abort()
        staging.discard(stage)
        raise
    finally:
        if pool is not None:
            pool.terminate()
        _WORKER.clear()
        if bar is not None:
            bar.close()
    seconds = time.perf_counter() - start
    return PreprocessResult(prefixes, tally.n_docs, tally.tokens, tally.n_empty, total_bytes, tally.bad_lines,
                            tally.n_bad, seconds, sidecars,
                            {"used": cache_problem is None, "reason": cache_problem,
                             "words": tally.cache_words, "misses": tally.cache_misses,
                             "encoded": tally.cache_encoded, "fine_problem": fine_problem,
                             **_engine_report(engine, bpe_problem, tally.bpe_engines)})


def _engine_report(engine: str, problem: str | None, used: set) -> dict:
    """The result's ``bpe_engine``/``bpe_problem``: what the workers ran (a spawned worker proves
    the compiled loop again and could differ; then "sentencepiece" for the blocks it encoded)."""
    if engine == "numba" and "sentencepiece" in used:
        return {"bpe_engine": "sentencepiece" if used == {"sentencepiece"} else "numba and sentencepiece",
                "bpe_problem": "a worker could not start the compiled loop"}
    return {"bpe_engine": engine, "bpe_problem": problem}


def _keys_found(files: Sequence[Path], max_lines: int = 1000) -> list[str]:
    """Sorted keys of the JSON objects among the first ``max_lines`` lines of ``files``."""
    keys: set[str] = set()
    seen = 0
    for path in files:
        with open(path, "rb") as fh:
            for line in fh:
                if seen >= max_lines:
                    return sorted(keys)
                seen += 1
                try:
                    obj = json.loads(line)
                except ValueError:
                    continue
                if isinstance(obj, dict):
                    keys.update(obj)
    return sorted(keys)


_TEMP_TAG = re.compile(r"\.tmp-(?P<pid>\d+)-[0-9a-f]{8}$")


def remove_stale_temporaries(prefix: PathLike, locked: bool = False) -> list[Path]:
    """Delete ``<prefix>.{bin,idx,json}.tmp-<pid>-<hex>`` files whose writing process is gone.

    :class:`~labsupport.datasets.indexed.IndexedDatasetBuilder` writes to such names and renames
    them when done; a run killed before it could clean up leaves them behind. Files of a process
    that is still running (another run writing the same prefix) are kept — unless ``locked``: the
    caller holds the prefix's lock, so none is another run's (the pid may be reused).  A pid that
    now belongs to a process started after the file was written counts as gone
    (:func:`labsupport.fileio.writer_gone`).  Returns the removed paths.
    """
    prefix = Path(prefix)
    removed = []
    if not prefix.parent.is_dir():
        return removed
    for path in sorted(prefix.parent.glob(glob.escape(prefix.name) + ".*.tmp-*")):
        m = _TEMP_TAG.search(path.name)
        if m is None or path.name[: m.start()] not in {prefix.name + e for e in (".bin", ".idx", ".json")}:
            continue
        pid = int(m["pid"])
        if (locked and pid != os.getpid()) or writer_gone(pid, path):
            path.unlink(missing_ok=True)
            removed.append(path)
    return removed


def _warn(message: str, log, bar) -> None:
    if bar is not None and log in (sys.stderr, sys.__stderr__):
        bar.write(message, file=log)
    else:
        print(message, file=log)


def _ordered(pool, tasks: Iterable, window: int) -> Iterator:
    """``pool.imap(_encode_block, tasks)`` with at most ``window`` blocks in flight (bounded memory)."""
    pending: collections.deque = collections.deque()
    for task in tasks:
        pending.append(pool.apply_async(_encode_block, (task,)))
        if len(pending) >= window:
            yield pending.popleft().get()
    while pending:
        yield pending.popleft().get()


def _sidecar_extra(key: str, tok, append_eod: bool, files: list[Path], shown: list[str],
                   hashers: list, lines_per_file: list[int], n_bad: int, n_empty: int) -> dict:
    return {
        "json_key": key,
        "append_eod": append_eod,
        "eod": tok.eod if append_eod else None,
        "tokenizer": {"library": tok.library, "model": shown_path(tok.path),
                      "fingerprint": tok.fingerprint, "vocab_size": tok.vocab_size},
        "sources": [{"path": s, "bytes": f.stat().st_size, "lines": n, "sha256": h.hexdigest()}
                    for f, s, h, n in zip(files, shown, hashers, lines_per_file)],
        "bad_lines_skipped": n_bad,
        "empty_documents": n_empty,
        "preprocess_revision": FORMAT_REVISION,
    }


# ----------------------------------------------------------------------------------- CLI
class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # one line, exit 2 (argparse prints the whole usage too)
        fail(f"preprocess: error: {message}: see .venv/bin/python -m labsupport preprocess --help", 2)
        raise SystemExit(2)


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(
        prog="python -m labsupport preprocess",
        description="Tokenize jsonl files into Megatron .bin/.idx pairs (workbook chapter 2).",
        epilog="exit status: 0 done, 1 error (one line on stderr), 2 usage error, 130 interrupted (Ctrl-C); "
               "results go to stdout, progress and warnings to stderr")
    p.add_argument("--input", nargs="+", required=True, metavar="FILE_OR_GLOB",
                   help="jsonl files or globs (quote globs), read in the order given")
    p.add_argument("--json-keys", nargs="+", default=["text"], metavar="KEY",
                   help="keys to tokenize; one output per key (default: text)")
    p.add_argument("--tokenizer-library", choices=list(TOKENIZER_LIBRARIES), default=None,
                   help="sentencepiece (the book's NeMo command) or huggingface; default: a folder or .json "
                        "is huggingface, a file sentencepiece")
    p.add_argument("--tokenizer-type", choices=list(TOKENIZER_LIBRARIES.values()), default=None,
                   help="Megatron's spelling of --tokenizer-library (tools/preprocess_data.py)")
    p.add_argument("--tokenizer-model", required=True,
                   help="the SentencePiece .model file, or a Hugging Face tokenizer folder (tokenizer.json)")
    p.add_argument("--output-prefix", required=True,
                   help="writes <prefix>_<key>_document.bin/.idx/.json")
    p.add_argument("--append-eod", action="store_true",
                   help="append the tokenizer's end-of-document id to every non-empty document")
    p.add_argument("--workers", type=int, default=1, help="tokenizing processes (default 1)")
    p.add_argument("--strict", action="store_true",
                   help="stop at the first bad line instead of skipping and counting it")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.add_argument("--bpe-engine", choices=("auto",) + BPE_ENGINES, default="auto",
                   help="how new words go through BPE: numba (SentencePiece's merge loop compiled; "
                        "same ids, faster, ~0.4 s to start), sentencepiece, or auto (numba from "
                        f"{AUTO_NUMBA_BYTES_PER_WORKER // 1_000_000} MB of input per worker on; default)")
    p.add_argument("--no-word-cache", action="store_true",
                   help="encode every document with SentencePiece alone, without the per-worker "
                        "word cache (same output, slower; for comparisons)")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    """Run the CLI; returns the exit status (0 ok, 1 error, 2 usage error, 130 interrupted).

    Results go to stdout, in order: the counts, the output paths and the throughput line (its
    numbers are timings). Warnings and the progress bar go to stderr, flushed before each result
    so a notebook or a terminal shows them in the order they happened. Errors are one line on
    stderr, never a traceback.
    """
    try:
        parser = build_parser()
        try:
            args = parser.parse_args(argv)
        except SystemExit as exc:  # argparse has printed the usage error
            return int(exc.code or 0)
    except KeyboardInterrupt:  # Ctrl-C while starting up
        return fail("preprocess: interrupted (Ctrl-C); no output was written", 130)
    if args.workers < 1:
        return fail(f"preprocess: error: --workers {args.workers}: must be ≥ 1 (tokenizing processes)", 2)
    by_type = {v: k for k, v in TOKENIZER_LIBRARIES.items()}.get(args.tokenizer_type)
    if by_type and args.tokenizer_library and by_type != args.tokenizer_library:
        return fail(f"preprocess: error: --tokenizer-type {args.tokenizer_type} names the {by_type} library but "
                    f"--tokenizer-library says {args.tokenizer_library}: give one of them", 2)
    args.tokenizer_library = args.tokenizer_library or by_type
    sys.stdout.flush()  # what the caller printed comes before the progress bar (stderr)
    return run_command("preprocess", lambda: _named(args), {PreprocessError: 1},
                       interrupted="interrupted (Ctrl-C); no output was written", shown=shown_path)


#: errno values that mean "the disk is full", whose cure is the same
_FULL = (errno.ENOSPC, errno.EDQUOT)


def _named(args) -> int:
    """:func:`_run` with every OSError naming a file — its own, else the output prefix being
    written — and a full disk saying what to do (all-or-nothing: nothing at the prefix changed)."""
    try:
        return _run(args)
    except OSError as exc:
        if exc.filename and exc.errno not in _FULL:
            raise
        what = exc.strerror or str(exc)
        if exc.errno in _FULL:
            what = (f"{what}; free space there or choose another --output-prefix (nothing at the prefix was "
                    "changed: a dataset already there is intact)")
        where = exc.filename or os.fspath(args.output_prefix)
        raise OSError(exc.errno, what, where) from None


def _run(args) -> int:
    res = preprocess(args.input, args.output_prefix, args.tokenizer_model,
                     json_keys=args.json_keys, append_eod=args.append_eod,
                     workers=args.workers, strict=args.strict,
                     show_progress=not args.no_progress, word_cache=not args.no_word_cache,
                     bpe_engine=args.bpe_engine, tokenizer_library=args.tokenizer_library)
    sys.stderr.flush()
    side = next(iter(res.sidecars.values()))
    files = len(side["sources"])
    print(f"{files} file{'s' if files != 1 else ''}, {res.input_bytes:,} bytes → "
          f"{res.documents:,} documents ({res.empty_documents:,} empty), dtype {side['dtype']}")
    for k, prefix in res.prefixes.items():
        print(f"  {k}: {res.tokens[k]:,} tokens → {shown_path(prefix)}.{{bin,idx,json}}")
    if res.num_bad_lines:
        print(f"skipped {res.num_bad_lines:,} bad line{'s' if res.num_bad_lines != 1 else ''} "
              "(listed on stderr; --strict stops at the first)")
    mb = res.input_bytes / 1e6
    wc = res.word_cache
    if wc.get("used"):
        hits = 1 - wc["misses"] / wc["words"] if wc["words"] else 0.0
        cache_note = f"word cache: {hits:.0%} of {wc['words']:,} words seen before"
        if wc.get("bpe_engine") == "numba":
            cache_note += ", new words through the compiled BPE loop"
        elif args.bpe_engine == "numba":
            cache_note += f", new words through SentencePiece ({wc.get('bpe_problem')})"
    else:
        cache_note = f"no word cache: {wc.get('reason')}"
    print(f"{res.seconds:.2f} s, {mb / res.seconds:.1f} MB/s, "
          f"{res.tokens_per_second:,.0f} tokens/s with {args.workers} worker(s); {cache_note}")
    sys.stdout.flush()
    return 0




# ----------------------------------------------------------------------------------- workbook
def workbook_prefixes(domains: Sequence[str] | None = None) -> dict[str, str]:
    """The shipped domains preprocessed with the workbook tokenizer and ``--append-eod``.

    Returns ``{"web": ".../work/indexed/web_text_document", ...}`` (path prefixes for
    :class:`~labsupport.datasets.indexed.IndexedDataset` and blending).  Built when missing or stale
    (other tokenizer, changed corpus), cached in ``work_dir("indexed")``; safe when several
    processes call it at once (each builds under temporary names and renames identical
    bytes into place) and prints nothing.
    """

    domains = tuple(DOMAINS if domains is None else domains)
    tok = Tokenizer(workbook_tokenizer())
    out: dict[str, str] = {}
    for d in domains:
        src = data_file(d)
        base = work_dir("indexed") / d
        prefix = f"{base}_text_document"
        if _is_current(prefix, tok.fingerprint, src):
            out[d] = prefix
            continue
        with lock_prefix(base, wait=True):   # another process building it: wait, then look again
            if not _is_current(prefix, tok.fingerprint, src):
                preprocess([src], base, tok, append_eod=True, workers=1, strict=True,
                           show_progress=False)
        out[d] = prefix
    return out


def resolve_workbook_blend(data_prefix: Sequence[Any]) -> list[Any]:
    """A config's ``data_prefix`` list with the workbook's own corpora made real.

    An entry whose file name is ``<domain>_text_document`` for a shipped domain (``web``, ``code``,
    ``books``, ``korean``) — whatever folder it names, e.g. the book's ``/data/web_text_document`` —
    becomes that domain's prefix from :func:`workbook_prefixes` (built on first use); weights and
    every other entry are returned unchanged, so a config that names real files elsewhere keeps
    working.

    >>> resolve_workbook_blend([0.6, "/data/web_text_document", 0.4, "/mnt/my_text_document"])  # doctest: +SKIP
    [0.6, '<repo>/work/indexed/web_text_document', 0.4, '/mnt/my_text_document']
    """

    items = list(data_prefix)
    wanted = {}
    for i, item in enumerate(items):
        if isinstance(item, str):
            name = Path(item.strip()).name
            domain = name[: -len("_text_document")] if name.endswith("_text_document") else None
            if domain in DOMAINS:
                wanted[i] = domain
    if wanted:
        built = workbook_prefixes(sorted(set(wanted.values()), key=DOMAINS.index))
        for i, domain in wanted.items():
            items[i] = built[domain]
    return items


def _is_current(prefix: str, fingerprint: str, src: Path) -> bool:
    if not (IndexedDataset.exists(prefix) and os.path.isfile(get_sidecar_path(prefix))):
        return False
    try:
        with open(get_sidecar_path(prefix), encoding="utf-8") as fh:
            meta = json.load(fh)
        sources = meta["sources"]
        return (meta.get("preprocess_revision") == FORMAT_REVISION
                and meta["tokenizer"]["fingerprint"] == fingerprint and meta["append_eod"] is True
                and len(sources) == 1
                and sources[0]["sha256"] == hashlib.sha256(src.read_bytes()).hexdigest())
    except (OSError, ValueError, KeyError, TypeError):
        return False

