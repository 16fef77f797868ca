"""Chapter 1 benchmark: batch encoding with threads vs one call per document.

Same corpus (the four domain corpora), same tokenizer (the workbook's standard model), three
ways to encode it, measured side by side in one run:

* ``per_document`` — ``[tok.encode(d) for d in docs]``: one Python→C++ call per document;
* ``batch_1_thread`` — ``tok.encode_batch(docs, num_threads=1)``: one call, one thread;
* ``batch_threads`` — ``tok.encode_batch(docs, num_threads=cpu_count)``: one call, C++ threads.

Two workloads: whole documents, and their non-empty lines as separate texts (short texts, where
the per-call cost shows).  Each timing is the best of ``--repeats`` runs (the methods take turns);
all three must give the same ids.  Run: ``.venv/bin/python -m benchmarks.bench_tokenizer``; writes
``benchmarks/results/tokenizer.json``.
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

from benchmarks._common import machine_info, write_results
import labsupport
from labsupport.paths import DOMAINS
from labsupport.datasets.tokenizer import Tokenizer, read_documents, workbook_tokenizer

RESULTS = Path(__file__).resolve().parent / "results" / "tokenizer.json"


def _machine() -> dict:
    return machine_info("numpy", "sentencepiece", "torch")

def measure(tok, texts: list[str], threads: int, repeats: int) -> dict:
    """Time the three methods on ``texts``; raise if they disagree.

    The methods take turns within each repeat (round robin), so a burst of load from another
    process hits all three alike; the best time of each is kept.
    """
    methods = {
        "per_document": lambda: [tok.encode(t) for t in texts],
        "batch_1_thread": lambda: tok.encode_batch(texts, num_threads=1),
        "batch_threads": lambda: tok.encode_batch(texts, num_threads=threads),
    }
    best = {name: float("inf") for name in methods}
    outputs: dict[str, list] = {}
    for _ in range(repeats):
        for name, fn in methods.items():
            t0 = time.perf_counter()
            outputs[name] = fn()
            best[name] = min(best[name], time.perf_counter() - t0)
    reference = outputs["per_document"]
    rows = {}
    for name in methods:
        if outputs[name] != reference:
            raise AssertionError(f"{name} produced different ids than per_document")
        n_tokens = sum(len(x) for x in outputs[name])
        rows[name] = {"seconds": best[name], "tokens": n_tokens, "tokens_per_s": n_tokens / best[name]}
    base = rows["per_document"]["tokens_per_s"]
    return {
        "texts": len(texts),
        "characters": sum(len(t) for t in texts),
        "methods": rows,
        "speedup_vs_per_document": {k: v["tokens_per_s"] / base for k, v in rows.items()},
    }


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=15, help="timing runs per method (best is kept)")
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 1, help="threads for batch_threads")
    ap.add_argument("--out", type=Path, default=RESULTS)
    args = ap.parse_args(argv)


    tok = Tokenizer(workbook_tokenizer())
    docs = [d for name in DOMAINS for d in read_documents(labsupport.data_file(name))]
    lines = [line for d in docs for line in d.split("\n") if line.strip()]
    result = {
        "benchmark": "tokenizer: encode_batch with threads vs one encode call per document",
        "parameters": {"repeats": args.repeats, "threads": args.threads, "domains": list(DOMAINS),
                       "tokenizer_vocab_size": tok.vocab_size, "tokenizer_fingerprint": tok.fingerprint,
                       "timing": "best of repeats (methods take turns), time.perf_counter, wall clock"},
        "machine": _machine(),
        "workloads": {
            "documents": measure(tok, docs, args.threads, args.repeats),
            "lines": measure(tok, lines, args.threads, args.repeats),
        },
    }
    try:
        result["machine"]["loadavg_1min_at_end"] = round(os.getloadavg()[0], 2)
    except OSError:  # pragma: no cover
        pass
    args.out.parent.mkdir(parents=True, exist_ok=True)
    write_results(args.out, result)
    for name, w in result["workloads"].items():
        print(f"{name:9s} ({w['texts']} texts): " + ", ".join(
            f"{k} {v['tokens_per_s'] / 1e6:.2f} M tok/s (×{w['speedup_vs_per_document'][k]:.2f})"
            for k, v in w["methods"].items()))
    print(f"wrote {labsupport.display_path(args.out)}")
    return result


if __name__ == "__main__":
    main(sys.argv[1:])
