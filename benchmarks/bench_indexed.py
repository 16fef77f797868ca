"""Chapter 2 benchmark: preprocessing throughput and random-access reads vs megatron-core.

Measured side by side in one run, on the same input, tokenizer and worker count:

1. **Preprocessing** (tokens/s): ``labsupport.datasets.preprocess.preprocess`` against Megatron's own
   method, re-created from ``tools/preprocess_data.py``: ``multiprocessing.Pool(workers)
   .imap(encoder.encode, fin, 32)`` over the lines of the file, each worker doing
   ``json.loads`` + tokenize + EOD, and the main process writing every document through
   megatron-core's ``IndexedDatasetBuilder.add_document``.  Both produce the ids of the same
   ``labsupport.datasets.tokenizer.Tokenizer.encode`` (the run checks that the ``.bin``/``.idx`` pairs are
   byte-identical).  labsupport is timed as ``labsupport`` (the default: each worker keeps a
   word-level cache, so a word it has seen before skips SentencePiece's BPE; the cache starts
   empty in every timed run, new worker processes each time), ``labsupport_no_word_cache``
   (``--no-word-cache``: SentencePiece on every document, like Megatron) and ``labsupport_numba``
   (below).  Input: the four
   shipped domain corpora concatenated ``--repeat`` times.  Target: ≥ 1.3× at 2 workers.  Also
   timed: ``tokenizer_only``, ``Tokenizer.encode_batch(texts, num_threads=workers)`` on the
   already parsed texts in memory — no JSON, no processes, no writing — the ceiling for any
   preprocessor that runs BPE on every document with that many threads (Megatron's, and
   labsupport without the word cache); only the word cache gets past it.
   Because the input repeats itself ``--repeat`` times, every copy after the first finds its
   words cached, which flatters the cache; ``preprocess_single_copy`` therefore repeats the
   comparison on one copy of the corpora (no repeated text; shorter, so noisier) — the gain
   to expect on text without exact repeats.
   ``preprocess_foreign`` repeats it with a tokenizer and corpus the project did not choose: the
   ``.py`` files of the running Python's standard library (read at run time, one document per
   file, ``--foreign-bytes`` of them) and a ``--foreign-vocab``-piece BPE model trained on them
   inside the benchmark with SentencePiece's defaults (``nmt_nfkc`` normalization, dummy
   prefix, squeezed spaces) plus byte fallback — the word cache must work for normalizing
   models too; ``labsupport_fine_cut`` times the option that cuts new words finer
   (``preprocess(fine_cut=True)``), off by default because it measures slower.  Target: ≥ 1.5×
   for any SentencePiece BPE model.
   ``preprocess_foreign_grid`` repeats the foreign case (Megatron against the default labsupport
   only, byte-identical output checked per model) for 12 BPE models trained in the run on
   ``--grid-sentences`` sampled lines of the same corpus, ``--foreign-vocab`` pieces each:
   normalization rule identity / nmt_nfkc / nfkc_cf × byte fallback on/off × dummy prefix
   on/off (spaces squeezed, SentencePiece's default); "ratios" gets the min and median over the
   grid and each model's ratio.  ``--grid-only`` runs just the grid (to its own results file),
   ``--no-grid`` skips it, ``--grid-cells`` picks models by name (e.g. ``nmt_nfkc+bf+dp``).
   Every labsupport case is also timed as ``labsupport_numba`` (``--bpe-engine numba``: new words
   through SentencePiece's merge loop compiled by numba, :mod:`labsupport.datasets.spm_bpe_numba`),
   whose one-time start per process is not in those timed runs: ``bpe_engine_start`` measures it
   in fresh processes, with the whole CLI process on the foreign corpus for each engine and the
   input size from which the compiled loop pays for its start.  ``preprocess_large_cli`` times
   whole ``python -m labsupport preprocess`` processes with their defaults on ``--large-bytes`` of
   installed Python source (stdlib, then site-packages; ``--large-bytes 0`` skips it) against
   Megatron's method in this process and in a fresh one.
   ``preprocess_hf`` repeats the main comparison with a Hugging Face byte-level BPE
   (``workbook_hf_tokenizer()``): Megatron's method with megatron-core's ``HuggingFaceTokenizer``
   (``transformers`` inside) against ``preprocess(..., tokenizer_library="huggingface")``, both one
   thread per worker, ``.bin``/``.idx`` byte-identical; ``--hf-only`` runs just it (to
   ``results/indexed_hf.json``).
2. **Random access** (reads/s): ``ds[i]`` for random sequence indices, and ``ds.get(i, offset,
   length)`` for random windows, ``labsupport.datasets.indexed.IndexedDataset`` against megatron-core's
   ``IndexedDataset`` on the same files.  Target: at least equal.

Each timing is the best of ``--repeats`` interleaved runs.  Run:
``.venv/bin/python -m benchmarks.bench_indexed``; writes ``benchmarks/results/indexed.json``.
"""
from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import shutil
import sys
import tempfile
import time
import warnings
from pathlib import Path

import numpy as np

from benchmarks._common import Mismatch, machine_info, write_results
from labsupport.datasets.tokenizer import Tokenizer
from labsupport.paths import DOMAINS, data_file
import sysconfig
import sentencepiece as spm
from labsupport.datasets.word_cache import fine_cut_problem, read_model_proto, word_cache_problem
from labsupport.datasets.preprocess import preprocess
import subprocess
from labsupport.paths import REPO_ROOT
from labsupport.datasets.preprocess import AUTO_NUMBA_BYTES_PER_WORKER
from labsupport.datasets.indexed import IndexedDataset
from labsupport.datasets.tokenizer import workbook_tokenizer
from labsupport.datasets.preprocess_eod import megatron_tokenizer
from labsupport.datasets.hf_tokenizer import WORKBOOK_HF_VOCAB_SIZE, workbook_hf_tokenizer

RESULTS = Path(__file__).resolve().parent / "results" / "indexed.json"


def _machine() -> dict:
    return machine_info("numpy", "sentencepiece", "torch", "megatron-core")

def _megatron():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from megatron.core.datasets import indexed_dataset  # noqa: PLC0415 - megatron-core is an optional dependency
    return indexed_dataset


# ----------------------------------------------------------------------------- Megatron's method
class MegatronEncoder:
    """The ``Encoder`` of Megatron's ``tools/preprocess_data.py`` (no sentence splitting).

    A SentencePiece model is encoded with labsupport's ``Tokenizer`` (``tests/crosscheck/test_tokenizer.py``
    proves its ids equal megatron-core's wrapper's); a Hugging Face tokenizer (``tokenizer_type``
    "HuggingFaceTokenizer") with megatron-core's own tokenizer, built as the script builds it
    (:func:`labsupport.datasets.preprocess_eod.megatron_tokenizer`: ``transformers.AutoTokenizer`` inside).
    """

    tokenize = eod = None

    def __init__(self, model_path: str, json_keys: list[str], append_eod: bool,
                 tokenizer_type: str = "SentencePieceTokenizer") -> None:
        self.model_path, self.json_keys, self.append_eod = model_path, json_keys, append_eod
        self.tokenizer_type = tokenizer_type

    def initializer(self) -> None:
        if self.tokenizer_type == "SentencePieceTokenizer":
            tok = Tokenizer(self.model_path)
            MegatronEncoder.tokenize, MegatronEncoder.eod = tok.encode, tok.eod
        else:
            tok, _ = megatron_tokenizer(self.model_path, self.tokenizer_type)
            MegatronEncoder.tokenize, MegatronEncoder.eod = tok.tokenize, tok.eod

    def encode(self, json_line: str):
        data = json.loads(json_line)
        ids, lens = {}, {}
        for key in self.json_keys:
            text = data[key]
            sentences = text if isinstance(text, list) else [text]
            doc_ids, sentence_lens = [], []
            for sentence in sentences:
                sentence_ids = MegatronEncoder.tokenize(sentence)
                if len(sentence_ids) > 0:
                    doc_ids.extend(sentence_ids)
                    sentence_lens.append(len(sentence_ids))
            if len(doc_ids) > 0 and self.append_eod:
                doc_ids.append(MegatronEncoder.eod)
                sentence_lens[-1] += 1
            ids[key], lens[key] = doc_ids, sentence_lens
        return ids, lens, len(json_line)


def megatron_preprocess(input_path: str, model_path: str, output_prefix: str, workers: int,
                        json_keys=("text",), append_eod: bool = True,
                        tokenizer_type: str = "SentencePieceTokenizer") -> dict:
    """Megatron's ``process_json_file`` with megatron-core's builder; returns counts."""
    mc = _megatron()

    encoder = MegatronEncoder(model_path, list(json_keys), append_eod, tokenizer_type)
    vocab = (Tokenizer(model_path).vocab_size if tokenizer_type == "SentencePieceTokenizer"
             else megatron_tokenizer(model_path, tokenizer_type)[0].vocab_size)
    tokens = docs = 0
    with open(input_path, "r", encoding="utf-8") as fin:
        pool = multiprocessing.Pool(workers, initializer=encoder.initializer)
        encoded_docs = pool.imap(encoder.encode, fin, 32)
        builders = {k: mc.IndexedDatasetBuilder(f"{output_prefix}_{k}_document.bin",
                                                dtype=mc.DType.optimal_dtype(vocab))
                    for k in json_keys}
        for doc, sentence_lens, _ in encoded_docs:
            for key in doc.keys():
                builders[key].add_document(doc[key], sentence_lens[key])
                tokens += len(doc[key])
            docs += 1
        pool.close()
        pool.join()
    for k in json_keys:
        builders[k].finalize(f"{output_prefix}_{k}_document.idx")
    return {"documents": docs, "tokens": tokens}


# ----------------------------------------------------------------------------- measurements
def make_corpus(path: Path, repeat: int) -> dict:

    parts = [data_file(d).read_bytes() for d in DOMAINS]
    with open(path, "wb") as fh:
        for _ in range(repeat):
            for p in parts:
                fh.write(p)
    return {"files": [f"data/{d}.jsonl" for d in DOMAINS], "repeat": repeat,
            "bytes": path.stat().st_size, "lines": sum(p.count(b"\n") for p in parts) * repeat}


def make_foreign_corpus(path: Path, max_bytes: int, site_packages: bool = False) -> dict:
    """The running Python's standard library ``.py`` files (sorted, one JSON document each, UTF-8
    only) up to ``max_bytes`` of JSON lines: text this project did not choose.  ``site_packages``:
    then the ``.py`` files of the installed packages (sorted by path), for a larger corpus."""

    paths = sysconfig.get_paths()
    sources = sorted(f for f in Path(paths["stdlib"]).rglob("*.py") if "site-packages" not in f.parts)
    if site_packages:
        sources += sorted(Path(paths["purelib"]).rglob("*.py"))
    files = written = 0
    with open(path, "w", encoding="utf-8") as fh:
        for f in sources:
            if written >= max_bytes:
                break
            try:
                text = f.read_text(encoding="utf-8")
            except (UnicodeDecodeError, OSError):
                continue
            line = json.dumps({"text": text}, ensure_ascii=False) + "\n"
            fh.write(line)
            written += len(line.encode("utf-8"))
            files += 1
    return {"source": "Python standard library .py files" + (", then site-packages" if site_packages else "")
                      + " (sorted by path, one document per file)",
            "python": sys.version.split()[0], "files": files, "bytes": path.stat().st_size}


def train_foreign_tokenizer(corpus: Path, out: Path, vocab_size: int, rule: str = "nmt_nfkc",
                            byte_fallback: bool = True, add_dummy_prefix: bool = True,
                            sentences: int = 300_000) -> dict:
    """A BPE model trained on ``corpus`` (its documents' non-blank lines, ``sentences`` of them
    sampled) with SentencePiece's default options except ``rule`` (the normalization rule),
    ``byte_fallback`` and ``add_dummy_prefix``; spaces are squeezed (SentencePiece's default).
    The defaults are the case the issue measured: nmt_nfkc, byte fallback, dummy prefix."""

    lines = [ln for doc in (json.loads(x)["text"] for x in corpus.read_text(encoding="utf-8").splitlines())
             for ln in doc.splitlines() if ln.strip()]
    options = {"vocab_size": vocab_size, "model_type": "bpe", "byte_fallback": byte_fallback,
               "normalization_rule_name": rule, "add_dummy_prefix": add_dummy_prefix,
               "num_threads": 2, "input_sentence_size": sentences, "shuffle_input_sentence": True,
               "minloglevel": 2}
    spm.set_random_generator_seed(0)
    with open(out, "wb") as fh:
        spm.SentencePieceTrainer.train(sentence_iterator=iter(lines), model_writer=fh, **options)

    tok = Tokenizer(out)
    norm = read_model_proto(tok).normalizer_spec
    return {"trainer_options": {k: v for k, v in options.items() if k != "minloglevel"},
            "normalization_rule_name": norm.name, "add_dummy_prefix": norm.add_dummy_prefix,
            "remove_extra_whitespaces": norm.remove_extra_whitespaces,
            "vocab_size": tok.vocab_size, "fingerprint": tok.fingerprint,
            "word_cache_problem": word_cache_problem(tok), "fine_cut_problem": fine_cut_problem(tok)}


#: the normalization rules of the foreign grid (× byte fallback × dummy prefix: 12 models)
GRID_RULES = ("identity", "nmt_nfkc", "nfkc_cf")


def grid_cells() -> list[dict]:
    """The foreign grid: ``{"name", "rule", "byte_fallback", "add_dummy_prefix"}`` for every
    normalization rule × byte fallback on/off × dummy prefix on/off; names like ``nmt_nfkc+bf+dp``
    (``-bf``/``-dp`` when off)."""
    return [{"name": f"{rule}{'+' if bf else '-'}bf{'+' if dp else '-'}dp", "rule": rule,
             "byte_fallback": bf, "add_dummy_prefix": dp}
            for rule in GRID_RULES for bf in (True, False) for dp in (True, False)]


def bench_foreign_grid(corpus: Path, tmp: Path, workers: int, repeats: int, vocab: int,
                       sentences: int, names: list[str] | None = None) -> dict:
    """``megatron_preprocess`` against labsupport (word cache on) on the foreign corpus for each
    model of :func:`grid_cells` (or those named), each trained here on ``sentences`` sampled lines
    of the corpus; byte-identical output checked per model (:class:`Mismatch` otherwise)."""
    cells = [c for c in grid_cells() if names is None or c["name"] in names]
    methods = ("megatron", "labsupport", "labsupport_numba")
    if names is not None and len(cells) != len(set(names)):
        raise ValueError(f"unknown grid cells: {sorted(set(names) - {c['name'] for c in cells})}")
    out: dict = {"vocab_size": vocab, "train_sentences": sentences, "repeats": repeats, "cells": {}}
    for cell in cells:
        folder = tmp / f"grid_{cell['name']}"
        folder.mkdir()
        model = folder / "tok.model"
        tok = train_foreign_tokenizer(corpus, model, vocab, cell["rule"], cell["byte_fallback"],
                                      cell["add_dummy_prefix"], sentences)
        row = bench_preprocess(corpus, str(model), folder, workers, repeats, tokenizer_only=False,
                               methods=methods)
        row["tokenizer"] = tok
        out["cells"][cell["name"]] = row
        print(f"  grid {cell['name']:<16} {row['ratio_labsupport_over_megatron']:.2f}× "
              f"(compiled BPE {row['ratio_labsupport_numba_over_megatron']:.2f}×) "
              f"(hit rate {row['word_cache']['hit_rate']:.1%}, the model allows the fine cut: "
              f"{'yes' if tok['fine_cut_problem'] is None else tok['fine_cut_problem']})", flush=True)
    out["engines"] = {"labsupport": "the default (--bpe-engine auto: SentencePiece's encode for new words "
                                    "below AUTO_NUMBA_BYTES_PER_WORKER of input per worker, as here)",
                      "labsupport_numba": "--bpe-engine numba: new words through SentencePiece's merge loop "
                                          "compiled by numba (its one-time start is not in the timed runs: "
                                          "see bpe_engine_start)"}
    for name, suffix in (("labsupport", ""), ("labsupport_numba", "_numba")):
        ratios = sorted(r[f"ratio_{name}_over_megatron"] for r in out["cells"].values())
        out[f"ratio{suffix}_min"], out[f"ratio{suffix}_median"] = ratios[0], float(np.median(ratios))
        out[f"cells_below_1_5{suffix}"] = [k for k, r in out["cells"].items()
                                           if r[f"ratio_{name}_over_megatron"] < 1.5]
    return out


#: the timed preprocessing methods; "labsupport" is the default (word cache on, --bpe-engine auto);
#: "labsupport_numba" forces the compiled BPE loop for new words, "labsupport_fine_cut" the fine cut
METHODS = ("megatron", "labsupport", "labsupport_numba", "labsupport_no_word_cache")


def bench_preprocess(corpus: Path, model: str, out: Path, workers: int, repeats: int,
                     tokenizer_only: bool = True, methods: tuple[str, ...] = METHODS) -> dict:
    """Best-of-``repeats`` seconds of each of ``methods`` (interleaved, order rotated) on
    ``corpus``; raises Mismatch unless every method wrote byte-identical ``.bin``/``.idx``."""

    best = dict.fromkeys(methods, float("inf"))
    counts, cache_stats = {}, {}
    for r in range(repeats):
        k = r % len(methods)  # rotate the order: no method is always first or last
        for name in methods[k:] + methods[:k]:
            prefix = out / name
            t0 = time.perf_counter()
            if name == "megatron":
                c = megatron_preprocess(str(corpus), model, str(prefix), workers)
            else:
                res = preprocess([corpus], prefix, model, append_eod=True, workers=workers,
                                 strict=True, show_progress=False, word_cache=name != "labsupport_no_word_cache",
                                 fine_cut=name == "labsupport_fine_cut",
                                 bpe_engine="numba" if name == "labsupport_numba" else "auto")
                c = {"documents": res.documents, "tokens": res.tokens["text"]}
                cache_stats[name] = res.word_cache
            best[name] = min(best[name], time.perf_counter() - t0)
            counts[name] = c
    if len({json.dumps(c, sort_keys=True) for c in counts.values()}) != 1:
        raise Mismatch(f"different counts: {counts}")
    if not cache_stats["labsupport"]["used"] or cache_stats.get("labsupport_no_word_cache", {}).get("used"):
        raise Mismatch(f"word cache not used as intended: {cache_stats}")
    if "labsupport_numba" in cache_stats and cache_stats["labsupport_numba"]["bpe_engine"] != "numba":
        raise Mismatch("the compiled BPE loop was asked for but not used: "
                       f"{cache_stats['labsupport_numba']['bpe_problem']}")
    for name in [m for m in methods if m != "megatron"]:
        for ext in (".bin", ".idx"):
            a = (out / f"{name}_text_document{ext}").read_bytes()
            b = (out / f"megatron_text_document{ext}").read_bytes()
            if a != b:
                raise Mismatch(f"{name} and Megatron wrote different {ext} files")
    if "labsupport_no_word_cache" in methods and (out / "labsupport_text_document.json").read_bytes() \
            != (out / "labsupport_no_word_cache_text_document.json").read_bytes():
        raise Mismatch("the word cache changed the sidecar .json")
    tokens = counts["labsupport"]["tokens"]
    if tokenizer_only:
        # the ceiling for any preprocessor running BPE on every document with this many threads:
        # tokenizing the already parsed texts in memory, nothing else (no JSON, IPC, writing)

        tok = Tokenizer(model)
        texts = [json.loads(line)["text"] for line in corpus.read_bytes().splitlines()]
        bound = float("inf")
        for _ in range(repeats):
            t0 = time.perf_counter()
            ids = tok.encode_batch(texts, num_threads=workers)
            bound = min(bound, time.perf_counter() - t0)
        if sum(len(x) for x in ids) + sum(1 for x in ids if x) != tokens:
            raise Mismatch("tokenizer-only pass counted different tokens")
        best["tokenizer_only"] = bound
    rows = {k: {"seconds": v, "tokens_per_s": tokens / v,
                "MB_per_s": corpus.stat().st_size / 1e6 / v} for k, v in best.items()}
    megatron = rows["megatron"]["tokens_per_s"]
    wc = cache_stats["labsupport"]  # of the last cached run; which worker gets which block varies
    result = {
        "workers": workers, "documents": counts["labsupport"]["documents"], "tokens": tokens,
        "input_bytes": corpus.stat().st_size, "byte_identical_output": True, "methods": rows,
        "ratio_labsupport_over_megatron": rows["labsupport"]["tokens_per_s"] / megatron,
        "word_cache": {"words_looked_up": wc["words"], "words_not_cached": wc["misses"],
                       "strings_through_bpe": wc.get("encoded"),
                       "hit_rate": 1 - wc["misses"] / wc["words"] if wc["words"] else None,
                       "fine_cut": wc.get("fine_problem") is None, "fine_cut_problem": wc.get("fine_problem"),
                       "bpe_engine": wc.get("bpe_engine"), "bpe_engine_problem": wc.get("bpe_problem"),
                       "note": "summed over the workers, each with its own cache, last timed run; "
                               "strings_through_bpe: the new words (the fine cut is off by default)"},
    }
    if "labsupport_numba" in rows:
        result["ratio_labsupport_numba_over_megatron"] = rows["labsupport_numba"]["tokens_per_s"] / megatron
        result["numba_seconds_saved_per_MB"] = ((rows["labsupport"]["seconds"] - rows["labsupport_numba"]["seconds"])
                                                / (corpus.stat().st_size / 1e6))
    if "labsupport_no_word_cache" in rows:
        result["ratio_labsupport_no_word_cache_over_megatron"] = \
            rows["labsupport_no_word_cache"]["tokens_per_s"] / megatron
    if "labsupport_fine_cut" in rows:
        fc = cache_stats["labsupport_fine_cut"]
        if fc.get("fine_problem") is not None:
            raise Mismatch(f"the fine cut was asked for but not used: {fc.get('fine_problem')}")
        result["ratio_labsupport_fine_cut_over_megatron"] = rows["labsupport_fine_cut"]["tokens_per_s"] / megatron
        result["fine_cut_strings_through_bpe"] = fc.get("encoded")
    if tokenizer_only:
        result["ratio_tokenizer_only_over_megatron"] = rows["tokenizer_only"]["tokens_per_s"] / megatron
        result["labsupport_share_of_tokenizer_only"] = (rows["labsupport"]["tokens_per_s"]
                                                        / rows["tokenizer_only"]["tokens_per_s"])
        result["labsupport_no_word_cache_share_of_tokenizer_only"] = (
            rows["labsupport_no_word_cache"]["tokens_per_s"] / rows["tokenizer_only"]["tokens_per_s"])
    return result


_MEGATRON_PROCESS = """
import sys
from benchmarks.bench_indexed import megatron_preprocess
megatron_preprocess(sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]))
"""


def bench_preprocess_hf(corpus: Path, hf_dir: str, out: Path, workers: int, repeats: int) -> dict:
    """Best-of-``repeats`` seconds of Megatron's method with megatron-core's ``HuggingFaceTokenizer`` and of
    ``preprocess(..., tokenizer_library="huggingface")`` on ``corpus`` (interleaved, order rotated), both with
    the Hugging Face byte-level BPE ``hf_dir``; raises Mismatch unless their ``.bin``/``.idx`` are byte-identical."""
    methods = ("megatron", "labsupport")
    best, counts = dict.fromkeys(methods, float("inf")), {}
    for r in range(repeats):
        for name in methods[r % 2:] + methods[:r % 2]:
            t0 = time.perf_counter()
            if name == "megatron":
                counts[name] = megatron_preprocess(str(corpus), hf_dir, str(out / "hf_megatron"), workers,
                                                   tokenizer_type="HuggingFaceTokenizer")
            else:
                res = preprocess([corpus], out / "hf_labsupport", hf_dir, append_eod=True, workers=workers,
                                 strict=True, show_progress=False, tokenizer_library="huggingface")
                counts[name] = {"documents": res.documents, "tokens": res.tokens["text"]}
            best[name] = min(best[name], time.perf_counter() - t0)
    if counts["megatron"] != counts["labsupport"]:
        raise Mismatch(f"Hugging Face tokenizer: different counts {counts}")
    for ext in (".bin", ".idx"):
        if (out / f"hf_labsupport_text_document{ext}").read_bytes() != \
                (out / f"hf_megatron_text_document{ext}").read_bytes():
            raise Mismatch(f"Hugging Face tokenizer: labsupport and Megatron wrote different {ext} files")
    tokens = counts["labsupport"]["tokens"]
    rows = {k: {"seconds": v, "tokens_per_s": tokens / v, "MB_per_s": corpus.stat().st_size / 1e6 / v}
            for k, v in best.items()}
    return {"tokenizer": f"workbook_hf_tokenizer() (byte-level BPE, {WORKBOOK_HF_VOCAB_SIZE} ids)",
            "input_bytes": corpus.stat().st_size, "documents": counts["labsupport"]["documents"], "tokens": tokens,
            "workers": workers, "repeats": repeats, "byte_identical_output": True, "methods": rows,
            "threads": "one per worker on both sides (labsupport's workers inherit TOKENIZERS_PARALLELISM=false)",
            "ratio_labsupport_over_megatron": rows["labsupport"]["tokens_per_s"] / rows["megatron"]["tokens_per_s"]}


def bench_large(corpus: Path, model: str, out: Path, workers: int, repeats: int) -> dict:
    """Whole processes on a large input, best of ``repeats`` (interleaved): ``python -m
    labsupport preprocess`` with its defaults (``--bpe-engine auto``: the compiled loop from
    AUTO_NUMBA_BYTES_PER_WORKER per worker on) and with ``--bpe-engine sentencepiece``, against
    Megatron's method in a fresh interpreter (its imports — torch, through megatron-core —
    included) and in this process (no start costs: the harshest comparison for labsupport).
    Every process start, import and the compiled loop's start is in labsupport's time."""


    env = dict(os.environ, PYTHONPATH=str(REPO_ROOT))
    commands = {
        "megatron_process": [sys.executable, "-c", _MEGATRON_PROCESS, str(corpus), model, str(out / "megatron_process"),
                             str(workers)],
        "labsupport_cli": [sys.executable, "-m", "labsupport", "preprocess", "--input", str(corpus),
                           "--tokenizer-model", model, "--output-prefix", str(out / "labsupport_cli"), "--append-eod",
                           "--workers", str(workers), "--no-progress"],
    }
    commands["labsupport_cli_sentencepiece"] = [
        *[c.replace("labsupport_cli", "labsupport_cli_sentencepiece") for c in commands["labsupport_cli"]],
        "--bpe-engine", "sentencepiece"]
    names = ["megatron_in_process", *commands]
    best = dict.fromkeys(names, float("inf"))
    summary = ""
    for r in range(repeats):
        for name in names[r % len(names):] + names[:r % len(names)]:
            t0 = time.perf_counter()
            if name == "megatron_in_process":
                megatron_preprocess(str(corpus), model, str(out / name), workers)
            else:
                done = subprocess.run(commands[name], check=True, env=env, capture_output=True, text=True)
                if name == "labsupport_cli":
                    summary = done.stdout.strip().splitlines()[-1]
            best[name] = min(best[name], time.perf_counter() - t0)
    for name in names[1:]:
        for ext in (".bin", ".idx"):
            theirs = (out / f"megatron_in_process_text_document{ext}").read_bytes()
            if (out / f"{name}_text_document{ext}").read_bytes() != theirs:
                raise Mismatch(f"{name} and Megatron wrote different {ext} files")
    engine = "numba" if "compiled BPE loop" in summary else "sentencepiece"
    mb = corpus.stat().st_size / 1e6
    return {"input_bytes": corpus.stat().st_size, "workers": workers, "repeats": repeats,
            "byte_identical_output": True, "seconds": best,
            "MB_per_s": {k: mb / v for k, v in best.items()},
            "default_engine_used": engine,
            "cli_summary_line": summary.split(";", 1)[-1].strip(),
            "ratio_cli_over_megatron_in_process": best["megatron_in_process"] / best["labsupport_cli"],
            "ratio_cli_over_megatron_process": best["megatron_process"] / best["labsupport_cli"],
            "ratio_cli_sentencepiece_over_megatron_in_process":
                best["megatron_in_process"] / best["labsupport_cli_sentencepiece"]}


_START_SNIPPET = """
import sys, time
t0 = time.perf_counter()
from labsupport.datasets.tokenizer import Tokenizer
from labsupport.datasets.word_cache import bpe_engine_problem
tok = Tokenizer(sys.argv[1])
t1 = time.perf_counter()
problem = bpe_engine_problem(tok)   # imports numba, builds the tables, self-check (loads the loop)
t2 = time.perf_counter()
assert problem is None, problem
print(t2 - t1)
"""


def bench_bpe_engine_start(corpus: Path, model: str, out: Path, workers: int, repeats: int,
                           saved_per_mb: float) -> dict:
    """The compiled BPE loop's one-time start in a fresh process (median of ``repeats``), the whole
    ``python -m labsupport preprocess`` process with each engine (best of ``repeats``), and the input
    size from which the loop pays for its start (start seconds / seconds saved per MB)."""


    env = dict(os.environ, PYTHONPATH=str(REPO_ROOT))
    starts = [float(subprocess.run([sys.executable, "-c", _START_SNIPPET, model], check=True, env=env,
                                   capture_output=True, text=True).stdout) for _ in range(repeats)]
    cli = {}
    for engine in ("sentencepiece", "numba"):
        best = float("inf")
        for _ in range(repeats):
            t0 = time.perf_counter()
            subprocess.run([sys.executable, "-m", "labsupport", "preprocess", "--input", str(corpus),
                            "--tokenizer-model", model, "--output-prefix", str(out / f"cli_{engine}"),
                            "--append-eod", "--workers", str(workers), "--no-progress", "--bpe-engine", engine],
                           check=True, env=env, capture_output=True)
            best = min(best, time.perf_counter() - t0)
        cli[engine] = best
    for ext in (".bin", ".idx"):
        compiled = (out / f"cli_numba_text_document{ext}").read_bytes()
        if compiled != (out / f"cli_sentencepiece_text_document{ext}").read_bytes():
            raise Mismatch(f"the two engines wrote different {ext} files")
    start = float(np.median(starts))
    return {"start_seconds_median": start, "start_seconds": starts,
            "what_starts": "import numba, build the tables, self-check (loads the compiled loop from its cache)",
            "cli_process_seconds": cli, "cli_input_bytes": corpus.stat().st_size,
            "seconds_saved_per_MB": saved_per_mb,
            "workers": workers, "break_even_MB": start / saved_per_mb if saved_per_mb > 0 else None,
            "break_even_MB_per_worker": start / saved_per_mb / workers if saved_per_mb > 0 else None,
            "auto_numba_MB_per_worker": AUTO_NUMBA_BYTES_PER_WORKER / 1e6}


def _time_reads(fn, indices, repeats: int) -> float:
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn(indices)
        best = min(best, time.perf_counter() - t0)
    return best


def bench_reads(prefix: str, n_reads: int, window: int, repeats: int, seed: int = 0) -> dict:

    mc = _megatron()
    ours, theirs = IndexedDataset(prefix), mc.IndexedDataset(prefix)
    rng = np.random.default_rng(seed)
    n = len(ours)
    idx = rng.integers(0, n, n_reads).tolist()
    lengths = ours.sequence_lengths
    # random windows of up to `window` tokens inside a sequence, like GPTDataset samples
    win = []
    for i in idx:
        L = int(lengths[i])
        w = min(window, L)
        win.append((i, int(rng.integers(0, L - w + 1)), w))

    def getitem(ds):
        def run(ix):
            for i in ix:
                ds[i]
        return run

    def get(ds):
        def run(ws):
            for i, o, w in ws:
                ds.get(i, o, w)
        return run

    # the same data either way
    for i in idx[:1000]:
        if not np.array_equal(ours[i], theirs[i]):
            raise Mismatch(f"sequence {i} differs")
    for i, o, w in win[:1000]:
        if not np.array_equal(ours.get(i, o, w), theirs.get(i, o, w)):
            raise Mismatch(f"window {(i, o, w)} differs")
    out = {"sequences": n, "reads": n_reads, "window_tokens": window, "methods": {}}
    best = {}
    for r in range(repeats):
        order = ("megatron", "labsupport") if r % 2 == 0 else ("labsupport", "megatron")
        for name in order:
            ds = theirs if name == "megatron" else ours
            for kind, fn, arg in (("getitem", getitem(ds), idx), ("get_window", get(ds), win)):
                key = (name, kind)
                best[key] = min(best.get(key, float("inf")), _time_reads(fn, arg, 1))
    for (name, kind), s in best.items():
        out["methods"].setdefault(name, {})[kind] = {"seconds": s, "reads_per_s": n_reads / s}
    out["ratio_labsupport_over_megatron"] = {
        kind: out["methods"]["labsupport"][kind]["reads_per_s"]
        / out["methods"]["megatron"][kind]["reads_per_s"] for kind in ("getitem", "get_window")}
    return out


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--repeat", type=int, default=6, help="copies of the four corpora")
    ap.add_argument("--repeats", type=int, default=5, help="timed runs per method (best kept)")
    ap.add_argument("--single-copy-repeats", type=int, default=5,
                    help="timed runs per method on one copy of the corpora (best kept)")
    ap.add_argument("--foreign-bytes", type=int, default=8_000_000,
                    help="bytes of Python standard-library source for the foreign tokenizer case")
    ap.add_argument("--foreign-vocab", type=int, default=8000)
    ap.add_argument("--grid-sentences", type=int, default=50_000,
                    help="lines of the foreign corpus sampled to train each model of the grid")
    ap.add_argument("--grid-repeats", type=int, default=5, help="timed runs per method and grid model")
    ap.add_argument("--grid-cells", nargs="+", metavar="NAME",
                    help=f"only these grid models (default all: {' '.join(c['name'] for c in grid_cells())})")
    ap.add_argument("--no-grid", action="store_true", help="skip the foreign grid")
    ap.add_argument("--grid-only", action="store_true",
                    help="run only the foreign grid; writes benchmarks/results/indexed_grid.json "
                         "unless --out is given")
    ap.add_argument("--hf-only", action="store_true",
                    help="run only the Hugging Face tokenizer case; writes benchmarks/results/indexed_hf.json "
                         "unless --out is given")
    ap.add_argument("--large-bytes", type=int, default=128_000_000,
                    help="bytes of installed Python source (stdlib, then site-packages) for the whole-process "
                         "CLI case (0 skips it)")
    ap.add_argument("--large-repeats", type=int, default=3)
    ap.add_argument("--reads", type=int, default=200_000)
    ap.add_argument("--window", type=int, default=2049)
    ap.add_argument("--out", type=Path, default=None, help=f"default {RESULTS}")
    args = ap.parse_args(argv)
    if args.grid_only:
        return _grid_only(args)
    if args.hf_only:
        return _hf_only(args)
    args.out = RESULTS if args.out is None else args.out


    model = workbook_tokenizer()
    tmp = Path(tempfile.mkdtemp(prefix="bench_indexed_"))
    try:
        corpus_info = make_corpus(tmp / "corpus.jsonl", args.repeat)
        make_corpus(tmp / "single.jsonl", 1)
        machine = _machine()
        pre = bench_preprocess(tmp / "corpus.jsonl", str(model), tmp, args.workers, args.repeats)
        (tmp / "single").mkdir()
        single = bench_preprocess(tmp / "single.jsonl", str(model), tmp / "single", args.workers,
                                  args.single_copy_repeats, tokenizer_only=False)
        reads = bench_reads(str(tmp / "labsupport_text_document"), args.reads, args.window,
                            args.repeats)
        (tmp / "foreign").mkdir()
        foreign_corpus = make_foreign_corpus(tmp / "foreign.jsonl", args.foreign_bytes)
        foreign_tok = train_foreign_tokenizer(tmp / "foreign.jsonl", tmp / "foreign.model", args.foreign_vocab)
        foreign = bench_preprocess(tmp / "foreign.jsonl", str(tmp / "foreign.model"), tmp / "foreign",
                                   args.workers, args.repeats, tokenizer_only=False,
                                   methods=METHODS + ("labsupport_fine_cut",))
        foreign.update(corpus=foreign_corpus, tokenizer=foreign_tok)
        large = None
        if args.large_bytes:
            (tmp / "large").mkdir()
            large_corpus = make_foreign_corpus(tmp / "large.jsonl", args.large_bytes, site_packages=True)
            large = bench_large(tmp / "large.jsonl", str(tmp / "foreign.model"), tmp / "large", args.workers,
                                args.large_repeats)
            large.update(corpus=large_corpus, tokenizer="the foreign nmt_nfkc model (trained on the stdlib sample)")
        (tmp / "hf").mkdir()
        hf = bench_preprocess_hf(tmp / "corpus.jsonl", str(workbook_hf_tokenizer()), tmp / "hf", args.workers,
                                 args.repeats)
        engine_start = bench_bpe_engine_start(tmp / "foreign.jsonl", str(tmp / "foreign.model"), tmp / "foreign",
                                              args.workers, 3, foreign["numba_seconds_saved_per_MB"])
        grid = None if args.no_grid else bench_foreign_grid(
            tmp / "foreign.jsonl", tmp, args.workers, args.grid_repeats, args.foreign_vocab,
            args.grid_sentences, args.grid_cells)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    machine["loadavg_1_5_15min_at_end"] = None
    try:
        machine["loadavg_1_5_15min_at_end"] = [round(v, 2) for v in os.getloadavg()]
        machine["loadavg_1min_at_end"] = round(os.getloadavg()[0], 2)  # other users of the CPUs
    except OSError:  # pragma: no cover
        pass
    result = {
        "benchmark": "indexed",
        "parameters": {"workers": args.workers, "repeat": args.repeat, "repeats": args.repeats,
                       "single_copy_repeats": args.single_copy_repeats,
                       "reads": args.reads, "window": args.window, "append_eod": True,
                       "megatron_imap_chunksize": 32, "tokenizer": "workbook_tokenizer()",
                       "foreign_bytes": args.foreign_bytes, "foreign_vocab": args.foreign_vocab,
                       "large_bytes": args.large_bytes, "large_repeats": args.large_repeats,
                       "grid": None if args.no_grid else {"sentences": args.grid_sentences,
                                                          "repeats": args.grid_repeats,
                                                          "cells": args.grid_cells or "all"}},
        "corpus": corpus_info,
        "machine": machine,
        "preprocess": pre,
        "preprocess_single_copy": single,
        "preprocess_foreign": foreign,
        "preprocess_foreign_grid": grid,
        "bpe_engine_start": engine_start,
        "preprocess_large_cli": large,
        "preprocess_hf": hf,
        "random_access": reads,
        "targets": {"preprocess_ratio_at_2_workers": 1.5, "random_access_ratio": 1.2},
        "ratios": {"preprocess": pre["ratio_labsupport_over_megatron"],
                   "preprocess_numba": pre["ratio_labsupport_numba_over_megatron"],
                   "preprocess_single_copy_numba": single["ratio_labsupport_numba_over_megatron"],
                   "preprocess_foreign_nmt_nfkc_numba": foreign["ratio_labsupport_numba_over_megatron"],
                   "preprocess_no_word_cache": pre["ratio_labsupport_no_word_cache_over_megatron"],
                   "preprocess_single_copy": single["ratio_labsupport_over_megatron"],
                   "preprocess_single_copy_no_word_cache":
                       single["ratio_labsupport_no_word_cache_over_megatron"],
                   "preprocess_foreign_nmt_nfkc": foreign["ratio_labsupport_over_megatron"],
                   "preprocess_foreign_nmt_nfkc_no_word_cache":
                       foreign["ratio_labsupport_no_word_cache_over_megatron"],
                   "preprocess_foreign_nmt_nfkc_fine_cut": foreign["ratio_labsupport_fine_cut_over_megatron"],
                   "preprocess_hf": hf["ratio_labsupport_over_megatron"],
                   "random_access_getitem": reads["ratio_labsupport_over_megatron"]["getitem"],
                   "random_access_get_window": reads["ratio_labsupport_over_megatron"]["get_window"]},
    }
    if grid is not None:
        result["ratios"].update(_grid_ratios(grid))
    if large is not None:
        result["ratios"]["preprocess_large_cli_process"] = large["ratio_cli_over_megatron_in_process"]
    args.out.parent.mkdir(parents=True, exist_ok=True)
    write_results(args.out, result)
    r = result["ratios"]
    m = pre["methods"]
    print(f"preprocess: labsupport {m['labsupport']['tokens_per_s']:,.0f} tokens/s, "
          f"megatron {m['megatron']['tokens_per_s']:,.0f} tokens/s "
          f"→ {r['preprocess']:.2f}× at {args.workers} workers "
          f"(word cache hit rate {pre['word_cache']['hit_rate']:.1%})")
    print(f"  without the word cache {r['preprocess_no_word_cache']:.2f}×; SentencePiece alone on every "
          f"document, {args.workers} threads: {pre['ratio_tokenizer_only_over_megatron']:.2f}×")
    print(f"  one copy of the corpora (no repeated text): {r['preprocess_single_copy']:.2f}× "
          f"(without the word cache {r['preprocess_single_copy_no_word_cache']:.2f}×, "
          f"hit rate {single['word_cache']['hit_rate']:.1%})")
    print(f"  compiled BPE for new words (--bpe-engine numba): {r['preprocess_numba']:.2f}×, one copy "
          f"{r['preprocess_single_copy_numba']:.2f}×, foreign {r['preprocess_foreign_nmt_nfkc_numba']:.2f}×; "
          f"start {engine_start['start_seconds_median']:.2f} s once per process, pays from "
          f"{engine_start['break_even_MB'] or float('nan'):.0f} MB at {args.workers} workers "
          f"(auto: from {engine_start['auto_numba_MB_per_worker']:.0f} MB per worker)")
    print(f"  foreign nmt_nfkc BPE on Python stdlib source: {r['preprocess_foreign_nmt_nfkc']:.2f}× "
          f"(without the word cache {r['preprocess_foreign_nmt_nfkc_no_word_cache']:.2f}×, "
          f"with the fine cut {r['preprocess_foreign_nmt_nfkc_fine_cut']:.2f}×, "
          f"hit rate {foreign['word_cache']['hit_rate']:.1%})")
    if grid is not None:
        print(f"  foreign grid ({len(grid['cells'])} models): min {grid['ratio_min']:.2f}×, "
              f"median {grid['ratio_median']:.2f}×; below 1.5×: {grid['cells_below_1_5'] or 'none'}; "
              f"compiled BPE: min {grid['ratio_numba_min']:.2f}×, median {grid['ratio_numba_median']:.2f}×, "
              f"below 1.5×: {grid['cells_below_1_5_numba'] or 'none'}")
    if large is not None:
        print(f"  {large['input_bytes'] / 1e6:.0f} MB of installed Python source, "
              f"whole `python -m labsupport preprocess` "
              f"process (default engine: {large['default_engine_used']}): "
              f"{large['ratio_cli_over_megatron_in_process']:.2f}× "
              f"Megatron in-process, {large['ratio_cli_over_megatron_process']:.2f}× Megatron as a process; "
              f"with --bpe-engine sentencepiece {large['ratio_cli_sentencepiece_over_megatron_in_process']:.2f}×")
    print(f"random access: ds[i] {r['random_access_getitem']:.2f}×, "
          f"get(i, offset, length) {r['random_access_get_window']:.2f}× (labsupport / megatron)")
    print(f"wrote {args.out}")
    return result


def _grid_ratios(grid: dict) -> dict:
    """The grid's summary for the "ratios" section: min and median over its models, and each one."""
    out = {"preprocess_foreign_grid_min": grid["ratio_min"],
           "preprocess_foreign_grid_median": grid["ratio_median"],
           "preprocess_foreign_grid_numba_min": grid["ratio_numba_min"],
           "preprocess_foreign_grid_numba_median": grid["ratio_numba_median"]}
    out.update({f"preprocess_foreign_grid_{k}": r["ratio_labsupport_over_megatron"]
                for k, r in grid["cells"].items()})
    out.update({f"preprocess_foreign_grid_numba_{k}": r["ratio_labsupport_numba_over_megatron"]
                for k, r in grid["cells"].items()})
    return out


def _grid_only(args) -> dict:
    """``--grid-only``: the foreign corpus and grid alone, written to ``--out``
    (default ``results/indexed_grid.json``, so the full results file is left alone)."""
    out = RESULTS.with_name("indexed_grid.json") if args.out is None else args.out
    tmp = Path(tempfile.mkdtemp(prefix="bench_indexed_grid_"))
    try:
        machine = _machine()
        corpus = make_foreign_corpus(tmp / "foreign.jsonl", args.foreign_bytes)
        grid = bench_foreign_grid(tmp / "foreign.jsonl", tmp, args.workers, args.grid_repeats,
                                  args.foreign_vocab, args.grid_sentences, args.grid_cells)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    result = {"benchmark": "indexed", "parameters": {"workers": args.workers, "foreign_bytes": args.foreign_bytes,
                                                     "foreign_vocab": args.foreign_vocab},
              "machine": machine, "corpus": corpus, "preprocess_foreign_grid": grid,
              "targets": {"preprocess_ratio_at_2_workers": 1.5}, "ratios": _grid_ratios(grid)}
    write_results(out, result)
    print(f"foreign grid: min {grid['ratio_min']:.2f}×, median {grid['ratio_median']:.2f}×; wrote {out}")
    return result


def _hf_only(args) -> dict:
    """``--hf-only``: the Hugging Face tokenizer case alone (the main corpus, ``--repeat`` copies), written to
    ``--out`` (default ``results/indexed_hf.json``, so the full results file is left alone)."""
    out = RESULTS.with_name("indexed_hf.json") if args.out is None else args.out
    tmp = Path(tempfile.mkdtemp(prefix="bench_indexed_hf_"))
    try:
        machine = _machine()
        corpus = make_corpus(tmp / "corpus.jsonl", args.repeat)
        hf = bench_preprocess_hf(tmp / "corpus.jsonl", str(workbook_hf_tokenizer()), tmp, args.workers, args.repeats)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    machine["loadavg_1min_at_end"] = round(os.getloadavg()[0], 2)
    result = {"benchmark": "indexed", "parameters": {"workers": args.workers, "repeat": args.repeat,
                                                     "repeats": args.repeats, "append_eod": True,
                                                     "megatron_imap_chunksize": 32},
              "machine": machine, "corpus": corpus, "preprocess_hf": hf,
              "targets": {"preprocess_ratio_at_2_workers": 1.5},
              "ratios": {"preprocess_hf": hf["ratio_labsupport_over_megatron"]}}
    write_results(out, result)
    m = hf["methods"]
    print(f"Hugging Face tokenizer: labsupport {m['labsupport']['tokens_per_s']:,.0f} tokens/s, megatron "
          f"{m['megatron']['tokens_per_s']:,.0f} tokens/s ({hf['ratio_labsupport_over_megatron']:.2f}×), "
          f"byte-identical; wrote {out.name}")
    return result


if __name__ == "__main__":
    main(sys.argv[1:])
