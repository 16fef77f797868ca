"""Chapter 2 benchmark: preprocessing throughput and random-access reads vs megatron-core.

Measured side by side in one run, on the same input, tokenizer and worker count:

1. **Preprocessing** (tokens/s): ``labsupport.preprocess.preprocess`` against Megatron's own
   method, re-created from ``tools/preprocess_data.py``: ``multiprocessing.Pool(workers)
   .imap(encoder.encode, fin, 32)`` over the lines of the file, each worker doing
   ``json.loads`` + tokenize + EOD, and the main process writing every document through
   megatron-core's ``IndexedDatasetBuilder.add_document``.  Both use the same
   ``labsupport.tokenizer.Tokenizer.encode`` (so both write the same ids; the run checks that the
   two ``.bin``/``.idx`` pairs are byte-identical).  Input: the four shipped domain corpora
   concatenated ``--repeat`` times.  Target: ≥ 1.3× at 2 workers.  Also timed: ``tokenizer_only``,
   ``Tokenizer.encode_batch(texts, num_threads=workers)`` on the already parsed texts in memory —
   no JSON, no processes, no writing — the ceiling for any preprocessor using this tokenizer
   with that many threads, so the ratios say how much of the run is not the tokenizer.
2. **Random access** (reads/s): ``ds[i]`` for random sequence indices, and ``ds.get(i, offset,
   length)`` for random windows, ``labsupport.indexed.IndexedDataset`` against megatron-core's
   ``IndexedDataset`` on the same files.  Target: at least equal.

Each timing is the best of ``--repeats`` interleaved runs.  Run:
``.venv/bin/python -m benchmarks.bench_indexed``; writes ``benchmarks/results/indexed.json``.
"""
from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import platform
import shutil
import sys
import tempfile
import time
import warnings
from pathlib import Path

import numpy as np

RESULTS = Path(__file__).resolve().parent / "results" / "indexed.json"


def _machine() -> dict:
    import sentencepiece

    info = {"cpu_count": os.cpu_count(), "platform": platform.platform(),
            "machine": platform.machine(), "python": platform.python_version(),
            "numpy": np.__version__, "sentencepiece": sentencepiece.__version__}
    try:
        import torch

        info["torch"] = torch.__version__
    except ImportError:  # pragma: no cover
        info["torch"] = None
    try:
        import megatron.core

        info["megatron_core"] = megatron.core.__version__
    except (ImportError, AttributeError):  # pragma: no cover
        info["megatron_core"] = None
    try:
        info["loadavg_1min_at_start"] = round(os.getloadavg()[0], 2)
    except OSError:  # pragma: no cover
        pass
    return info


def _megatron():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from megatron.core.datasets import indexed_dataset
    return indexed_dataset


# ----------------------------------------------------------------------------- Megatron's method
class MegatronEncoder:
    """The ``Encoder`` of Megatron's ``tools/preprocess_data.py`` (no sentence splitting)."""

    tokenizer = None

    def __init__(self, model_path: str, json_keys: list[str], append_eod: bool) -> None:
        self.model_path, self.json_keys, self.append_eod = model_path, json_keys, append_eod

    def initializer(self) -> None:
        from labsupport.tokenizer import Tokenizer

        MegatronEncoder.tokenizer = Tokenizer(self.model_path)

    def encode(self, json_line: str):
        data = json.loads(json_line)
        ids, lens = {}, {}
        for key in self.json_keys:
            text = data[key]
            sentences = text if isinstance(text, list) else [text]
            doc_ids, sentence_lens = [], []
            for sentence in sentences:
                sentence_ids = MegatronEncoder.tokenizer.encode(sentence)
                if len(sentence_ids) > 0:
                    doc_ids.extend(sentence_ids)
                    sentence_lens.append(len(sentence_ids))
            if len(doc_ids) > 0 and self.append_eod:
                doc_ids.append(MegatronEncoder.tokenizer.eod)
                sentence_lens[-1] += 1
            ids[key], lens[key] = doc_ids, sentence_lens
        return ids, lens, len(json_line)


def megatron_preprocess(input_path: str, model_path: str, output_prefix: str, workers: int,
                        json_keys=("text",), append_eod: bool = True) -> dict:
    """Megatron's ``process_json_file`` with megatron-core's builder; returns counts."""
    mc = _megatron()
    from labsupport.tokenizer import Tokenizer

    encoder = MegatronEncoder(model_path, list(json_keys), append_eod)
    vocab = Tokenizer(model_path).vocab_size
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
    from labsupport.paths import DOMAINS, data_file

    parts = [data_file(d).read_bytes() for d in DOMAINS]
    with open(path, "wb") as fh:
        for _ in range(repeat):
            for p in parts:
                fh.write(p)
    return {"files": [f"data/{d}.jsonl" for d in DOMAINS], "repeat": repeat,
            "bytes": path.stat().st_size, "lines": sum(p.count(b"\n") for p in parts) * repeat}


def bench_preprocess(corpus: Path, model: str, out: Path, workers: int, repeats: int) -> dict:
    from labsupport.preprocess import preprocess

    best = {"labsupport": float("inf"), "megatron": float("inf")}
    counts = {}
    for r in range(repeats):
        for name in ("megatron", "labsupport") if r % 2 == 0 else ("labsupport", "megatron"):
            prefix = out / name
            t0 = time.perf_counter()
            if name == "labsupport":
                res = preprocess([corpus], prefix, model, append_eod=True, workers=workers,
                                 strict=True, show_progress=False)
                c = {"documents": res.documents, "tokens": res.tokens["text"]}
            else:
                c = megatron_preprocess(str(corpus), model, str(prefix), workers)
            best[name] = min(best[name], time.perf_counter() - t0)
            counts[name] = c
    if counts["labsupport"] != counts["megatron"]:
        raise AssertionError(f"different counts: {counts}")
    for ext in (".bin", ".idx"):
        a = (out / f"labsupport_text_document{ext}").read_bytes()
        b = (out / f"megatron_text_document{ext}").read_bytes()
        if a != b:
            raise AssertionError(f"labsupport and Megatron wrote different {ext} files")
    tokens = counts["labsupport"]["tokens"]
    # the floor for any preprocessor with this tokenizer and this many threads: tokenizing the
    # already parsed texts in memory, nothing else (no JSON, no IPC, no writing)
    from labsupport.tokenizer import Tokenizer

    tok = Tokenizer(model)
    texts = [json.loads(line)["text"] for line in corpus.read_bytes().splitlines()]
    bound = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        ids = tok.encode_batch(texts, num_threads=workers)
        bound = min(bound, time.perf_counter() - t0)
    if sum(len(x) for x in ids) + sum(1 for x in ids if x) != tokens:
        raise AssertionError("tokenizer-only pass counted different tokens")
    best["tokenizer_only"] = bound
    rows = {k: {"seconds": v, "tokens_per_s": tokens / v,
                "MB_per_s": corpus.stat().st_size / 1e6 / v} for k, v in best.items()}
    megatron = rows["megatron"]["tokens_per_s"]
    return {"workers": workers, "documents": counts["labsupport"]["documents"], "tokens": tokens,
            "byte_identical_output": True, "methods": rows,
            "ratio_labsupport_over_megatron": rows["labsupport"]["tokens_per_s"] / megatron,
            "ratio_tokenizer_only_over_megatron": rows["tokenizer_only"]["tokens_per_s"] / megatron,
            "labsupport_share_of_tokenizer_only": rows["labsupport"]["tokens_per_s"]
            / rows["tokenizer_only"]["tokens_per_s"]}


def _time_reads(fn, indices, repeats: int) -> float:
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn(indices)
        best = min(best, time.perf_counter() - t0)
    return best


def bench_reads(prefix: str, n_reads: int, window: int, repeats: int, seed: int = 0) -> dict:
    from labsupport.indexed import IndexedDataset

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
            raise AssertionError(f"sequence {i} differs")
    for i, o, w in win[:1000]:
        if not np.array_equal(ours.get(i, o, w), theirs.get(i, o, w)):
            raise AssertionError(f"window {(i, o, w)} differs")
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
    ap.add_argument("--repeats", type=int, default=3, help="timed runs per method (best kept)")
    ap.add_argument("--reads", type=int, default=200_000)
    ap.add_argument("--window", type=int, default=2049)
    ap.add_argument("--out", type=Path, default=RESULTS)
    args = ap.parse_args(argv)

    from labsupport.tokenizer import workbook_tokenizer

    model = workbook_tokenizer()
    tmp = Path(tempfile.mkdtemp(prefix="bench_indexed_"))
    try:
        corpus_info = make_corpus(tmp / "corpus.jsonl", args.repeat)
        machine = _machine()
        pre = bench_preprocess(tmp / "corpus.jsonl", str(model), tmp, args.workers, args.repeats)
        reads = bench_reads(str(tmp / "labsupport_text_document"), args.reads, args.window,
                            args.repeats)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    try:
        machine["loadavg_1min_at_end"] = round(os.getloadavg()[0], 2)  # other users of the CPUs
    except OSError:  # pragma: no cover
        pass
    result = {
        "benchmark": "indexed",
        "parameters": {"workers": args.workers, "repeat": args.repeat, "repeats": args.repeats,
                       "reads": args.reads, "window": args.window, "append_eod": True,
                       "megatron_imap_chunksize": 32, "tokenizer": "workbook_tokenizer()"},
        "corpus": corpus_info,
        "machine": machine,
        "preprocess": pre,
        "random_access": reads,
        "targets": {"preprocess_ratio_at_2_workers": 1.3, "random_access_ratio": 1.0},
        "ratios": {"preprocess": pre["ratio_labsupport_over_megatron"],
                   "random_access_getitem": reads["ratio_labsupport_over_megatron"]["getitem"],
                   "random_access_get_window": reads["ratio_labsupport_over_megatron"]["get_window"]},
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    tmp_out = args.out.with_suffix(".json.tmp")
    tmp_out.write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
    os.replace(tmp_out, args.out)
    r = result["ratios"]
    print(f"preprocess: labsupport {pre['methods']['labsupport']['tokens_per_s']:,.0f} tokens/s, "
          f"megatron {pre['methods']['megatron']['tokens_per_s']:,.0f} tokens/s "
          f"→ {r['preprocess']:.2f}× at {args.workers} workers "
          f"(tokenizer alone, {args.workers} threads: {pre['ratio_tokenizer_only_over_megatron']:.2f}×)")
    print(f"random access: ds[i] {r['random_access_getitem']:.2f}×, "
          f"get(i, offset, length) {r['random_access_get_window']:.2f}× (labsupport / megatron)")
    print(f"wrote {args.out}")
    return result


if __name__ == "__main__":
    main(sys.argv[1:])
    sys.exit(0)
