"""Chapter 6 benchmark: training throughput with the index + packed samples against tokenizing
every step + one padded document per row — same model, same blend order, one run.

Inputs: ``configs/megatron_gpt_tiny.yaml`` (the workbook's four corpora web/code/books/korean at
0.4/0.3/0.2/0.1, the workbook tokenizer, the tiny GPT of chapter 4 at hidden 64, 2 layers) with
``--seq-length`` tokens per sample and ``--batch`` samples per step (one micro-batch, one process,
one torch thread).  The packed pipeline reads chapter 4's GPT samples from the ``.bin``/``.idx``
files; the naive one (:class:`labsupport.training.data.NaiveTextDataset`) tokenizes each sample's
raw document with the same SentencePiece model when the sample is read, truncates it to the
sequence length and pads the rest.

Recorded per pipeline: tokens/s (all tokens computed), useful tokens/s (tokens with a loss: not
padding), the data loader's share of the step time (sampler + dataset + collate), and the
median step time; step 1 is left out (start-up).  A third run reads the packed samples without
``reset_attention_mask``: on CPU the boundary mask is a dense S×S mask per sample (the GPU path of
chapter 4 uses ``cu_seqlens`` instead), so that run separates the mask's cost from the data path's.
Run: ``.venv/bin/python -m benchmarks.bench_training``.
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

from benchmarks._common import machine_info, require, write_results
from labsupport.datasets.tokenizer import Tokenizer, read_documents
from labsupport.paths import data_file

RESULTS = Path(__file__).resolve().parent / "results" / "training.json"


def measure(seq_length: int, batch: int, steps: int) -> dict:
    import torch  # noqa: PLC0415 - torch only for this benchmark (start-up time of python -m benchmarks)

    from labsupport.training.data import NaiveTextDataset, build_blend  # noqa: PLC0415 - labsupport.training pulls in torch (start-up time of python -m benchmarks)
    from labsupport.training.settings import load_settings  # noqa: PLC0415 - labsupport.training pulls in torch (start-up time of python -m benchmarks)
    from labsupport.training.trainer import train  # noqa: PLC0415 - labsupport.training pulls in torch (start-up time of python -m benchmarks)

    torch.set_num_threads(1)
    settings = load_settings(overrides=[f"model.encoder_seq_length={seq_length}", f"model.micro_batch_size={batch}",
                                        f"model.global_batch_size={batch}", f"trainer.max_steps={steps}"])
    blend = build_blend(settings)
    tok = Tokenizer(settings.tokenizer_path)
    naive = NaiveTextDataset([read_documents(data_file(n)) for n in settings.names], tok, seq_length, blend)
    causal = load_settings(overrides=[f"model.encoder_seq_length={seq_length}", f"model.micro_batch_size={batch}",
                                      f"model.global_batch_size={batch}", f"trainer.max_steps={steps}",
                                      "model.data.reset_attention_mask=false"])
    out, consumed = {}, {}
    runs = (("index_packed", settings, blend), ("tokenize_padded", settings, naive),
            ("index_packed_no_boundary_mask", causal, build_blend(causal)))
    for name, run_settings, ds in runs:
        t0 = time.perf_counter()
        log = train(run_settings, dataset=ds, show_progress=False).log[1:]
        wall = time.perf_counter() - t0
        consumed[name] = [r["consumed_samples"] for r in log]
        step_t = sum(r["step_time"] for r in log)
        out[name] = {
            "tokens_per_s": sum(r["tokens"] for r in log) / step_t,
            "useful_tokens_per_s": sum(r["loss_tokens"] for r in log) / step_t,
            "useful_token_share": sum(r["loss_tokens"] for r in log) / sum(r["tokens"] for r in log),
            "data_loader_share": sum(r["data_time"] for r in log) / step_t,
            "median_step_s": statistics.median(r["step_time"] for r in log),
            "median_data_s": statistics.median(r["data_time"] for r in log),
            "wall_s": wall, "final_loss": log[-1]["loss"],
        }
    first = consumed["index_packed"]
    require(all(c == first for c in consumed.values()),
            f"the pipelines did not walk the same samples: consumed_samples {consumed}")
    return out


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seq-length", type=int, default=512)
    p.add_argument("--batch", type=int, default=4)
    p.add_argument("--steps", type=int, default=30)
    args = p.parse_args(argv if argv is not None else [])
    res = measure(args.seq_length, args.batch, args.steps)
    a, b = res["index_packed"], res["tokenize_padded"]
    result = {
        "benchmark": "training",
        "what": "tiny GPT training: .bin/.idx + packed GPT samples vs tokenize every step + padded rows",
        "inputs": {"config": "configs/megatron_gpt_tiny.yaml", "corpora": ["data/web.jsonl", "data/code.jsonl",
                   "data/books.jsonl", "data/korean.jsonl"], "weights": [0.4, 0.3, 0.2, 0.1],
                   "tokenizer": "workbook_tokenizer() (SentencePiece BPE, 8000)",
                   "model": "TinyCausalLM hidden 64, 2 layers, 2 heads", "device": "cpu, 1 torch thread"},
        "parameters": vars(args),
        "machine": machine_info("torch", "sentencepiece"),
        "pipelines": res,
        "ratios": {"useful_tokens_per_s": a["useful_tokens_per_s"] / b["useful_tokens_per_s"],
                   "tokens_per_s": a["tokens_per_s"] / b["tokens_per_s"],
                   "data_time_per_step_padded_over_packed": b["median_data_s"] / a["median_data_s"],
                   "useful_tokens_per_s_packed_causal_over_padded":
                       res["index_packed_no_boundary_mask"]["useful_tokens_per_s"] / b["useful_tokens_per_s"]},
    }
    write_results(RESULTS, result)
    print(f"useful tokens/s: packed {a['useful_tokens_per_s']:,.0f} vs padded {b['useful_tokens_per_s']:,.0f} "
          f"({result['ratios']['useful_tokens_per_s']:.1f}×); data loader share {a['data_loader_share']:.1%} vs "
          f"{b['data_loader_share']:.1%}; data time per step padded/packed "
          f"{result['ratios']['data_time_per_step_padded_over_packed']:.1f}×")
    return result


if __name__ == "__main__":
    main(sys.argv[1:])
