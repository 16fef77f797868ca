"""What the workbook measures on an NVIDIA GPU, written to ``benchmarks/results/gpu.json``.

    make gpu-report          # on a CUDA machine: make test-gpu (JUnit log) + these measurements
    python -m benchmarks.gpu_report --junit runs/test-gpu.xml

The notebooks quote this file in their ``requires-gpu`` cells (a CPU machine cannot show these
numbers).  Not a ``bench_*`` module: ``python -m benchmarks`` runs on every machine, this one
needs CUDA and refuses without it (exit 2) unless ``--device cpu`` is given, which runs the same
code at toy sizes to test it (the tests do that; its numbers mean nothing).

What is measured (each part records its inputs):

* ``environment`` — device name and count, memory, compute capability, torch / CUDA / NCCL
  versions, bf16 support, the date (chapter 0);
* ``attention`` — chapter 4's varlen / FlexAttention path with ``cu_seqlens`` against per-document
  SDPA on one packed 4,096-token row of random documents, bf16: max |difference| and the path;
* ``packing_throughput`` — training tokens/s of packed vs padded batches for a causal LM of tens
  of millions of parameters at sequence length 4,096 (chapter 4's model, bigger), bf16 autocast;
* ``collectives`` — NCCL all-reduce time, algbw and busbw over sizes on the GPUs there are; with
  one GPU NCCL has no link to measure, so the local device-to-device copy bandwidth is measured
  and the α–β model predicts the ring on NVLink and on InfiniBand (chapter 5);
* ``end_to_end`` — chapter 6's run (``configs/megatron_gpt_tiny.yaml``) on CUDA with bf16: the
  loss at the first and last step and the median training tokens/s;
* ``reproducibility`` — chapter 6's run repeated, each run a fresh process: twice with
  ``trainer.deterministic=true`` and twice without; whether each pair's losses are bitwise equal
  (labsupport/training/determinism.py says what the switch sets and what it cannot);
* ``test_gpu`` — pass/fail/skip counts and seconds from ``make test-gpu``'s JUnit XML.
"""
from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks._common import machine_info, require, write_results
from labsupport.datasets.bin_packing import first_fit_decreasing
from labsupport.datasets.gpt_samples import attention_mask_from_cu_seqlens, position_ids_from_cu_seqlens
from labsupport.distributed import collectives as C

RESULTS = Path(__file__).parent / "results" / "gpu.json"

#: Link models for the single-GPU prediction (chapter 5's α–β model). The bandwidths are per
#: direction and the same as chapter 0's TP-across-nodes warning uses: NVLink 4 on H100/H200 is
#: 900 GB/s bidirectional per GPU, 450 GB/s each way; one NDR InfiniBand port is 400 Gb/s = 50 GB/s
#: (chapter 0 cites the DGX H100 User Guide for both). The latencies are assumptions of the order
#: nccl-tests shows for small messages, stated as such, not measurements.
LINKS = {
    "NVLink 4 (8 GPUs, one node)": {"world_size": 8, "alpha_s": 5e-6, "beta_s_per_byte": 1 / 450e9},
    "InfiniBand NDR (8 nodes × 1 port)": {"world_size": 8, "alpha_s": 15e-6, "beta_s_per_byte": 1 / 50e9},
}


def _sync(device) -> None:
    import torch  # noqa: PLC0415 - torch only for this benchmark (start-up time of python -m benchmarks)
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def environment(device) -> dict[str, Any]:
    import torch  # noqa: PLC0415 - torch only for this benchmark (start-up time of python -m benchmarks)
    info: dict[str, Any] = {"date_utc": _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M"),
                            "torch": torch.__version__, "cuda": torch.version.cuda, "device_type": device.type}
    if device.type == "cuda":
        props = torch.cuda.get_device_properties(device)
        info.update({"device_name": props.name, "device_count": torch.cuda.device_count(),
                     "memory_gib": round(props.total_memory / 2**30, 1),
                     "compute_capability": f"{props.major}.{props.minor}",
                     "bf16_supported": bool(torch.cuda.is_bf16_supported())})
        try:
            info["nccl"] = ".".join(map(str, torch.cuda.nccl.version()))
        except Exception as exc:  # noqa: BLE001 - report, do not fail
            info["nccl"] = f"unknown ({type(exc).__name__})"
    return info


def _document_lengths(rng: np.random.Generator, total: int, mean: int) -> list[int]:
    lens: list[int] = []
    while sum(lens) < total:
        lens.append(int(np.clip(rng.lognormal(np.log(mean), 0.6), 16, total)))
    lens[-1] -= sum(lens) - total
    return [n for n in lens if n > 0]


def attention_check(device, seq: int, heads: int, head_dim: int, seed: int) -> dict[str, Any]:
    """Chapter 4's varlen path on one packed row vs per-document SDPA (the reference)."""
    import torch  # noqa: PLC0415 - torch only for this benchmark (start-up time of python -m benchmarks)
    import torch.nn.functional as F  # noqa: PLC0415 - torch only for this benchmark (start-up time of python -m benchmarks)

    from labsupport.models.tiny_lm import varlen_attention  # noqa: PLC0415 - labsupport.models pulls in torch (start-up time)

    rng = np.random.default_rng(seed)
    lens = _document_lengths(rng, seq, seq // 6)
    cu = torch.tensor([0, *np.cumsum(lens)], dtype=torch.int32, device=device)
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    gen = torch.Generator(device=device).manual_seed(seed)
    q, k, v = (torch.randn(seq, heads, head_dim, device=device, dtype=dtype, generator=gen) for _ in range(3))
    out, path = varlen_attention(q, k, v, cu, max(lens))
    ref = torch.cat([F.scaled_dot_product_attention(q[a:b].transpose(0, 1), k[a:b].transpose(0, 1),
                                                    v[a:b].transpose(0, 1), is_causal=True).transpose(0, 1)
                     for a, b in zip(cu[:-1].tolist(), cu[1:].tolist())])
    err = float((out.float() - ref.float()).abs().max())
    tolerance = 2e-2 if dtype == torch.bfloat16 else 1e-4
    require(err < tolerance, f"varlen attention ({path}) differs from per-document SDPA by {err:.3g}")
    return {"seq_length": seq, "heads": heads, "head_dim": head_dim, "documents": len(lens),
            "dtype": str(dtype).replace("torch.", ""), "path": path, "max_abs_difference": err,
            "tolerance": tolerance}


def packing_throughput(device, *, seq: int, vocab: int, d_model: int, n_heads: int, n_layers: int,
                       examples: int, mean_tokens: int, steps: int, seed: int) -> dict[str, Any]:
    """Training tokens/s, packed rows (boundary mask, restarted positions) vs one example per padded row."""
    import torch  # noqa: PLC0415 - torch only for this benchmark (start-up time of python -m benchmarks)

    from labsupport.models.tiny_lm import TinyCausalLM  # noqa: PLC0415 - labsupport.models pulls in torch (start-up time)

    rng = np.random.default_rng(seed)
    lengths = np.clip(np.round(rng.lognormal(np.log(mean_tokens), 0.6, examples)), 16, seq).astype(np.int64)
    torch.manual_seed(seed)
    model = TinyCausalLM(vocab, d_model, n_heads, n_layers, max_positions=seq).to(device)
    params = sum(p.numel() for p in model.parameters())
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    autocast = torch.autocast(device.type, dtype=torch.bfloat16, enabled=device.type == "cuda")

    def rows_packed():
        for b in first_fit_decreasing(lengths, seq):
            lens = lengths[b]
            cu = np.concatenate([[0], np.cumsum(lens)])
            t = int(cu[-1])
            masked = attention_mask_from_cu_seqlens(cu)
            pos = position_ids_from_cu_seqlens(cu)
            yield t, masked, pos

    def rows_padded():
        causal = ~torch.ones(1, seq, seq, dtype=torch.bool).tril()
        for n in lengths:
            yield int(n), causal, torch.arange(seq)

    def run(rows) -> tuple[int, int, float]:
        real = done = 0
        _sync(device)
        start = time.perf_counter()
        for real_tokens, masked, pos in rows:
            t = masked.shape[-1]
            tokens = torch.randint(0, vocab, (1, t + 1), device=device)
            with autocast:
                logits = model(tokens[:, :-1], pos.reshape(1, -1).to(device), masked.to(device))
                loss = torch.nn.functional.cross_entropy(logits.float().reshape(-1, vocab), tokens[:, 1:].reshape(-1))
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
            real += real_tokens
            done += 1
            if done == steps:
                break
        _sync(device)
        return done, real, time.perf_counter() - start

    run(rows_packed())                                   # warm-up (kernels, allocator)
    result = {}
    for name, rows in (("padded", rows_padded()), ("packed", rows_packed())):
        n, real, sec = run(rows)
        result[name] = {"steps": n, "real_tokens": real, "seconds": sec, "real_tokens_per_s": real / sec}
    return {"seq_length": seq, "parameters": params, "model": {"vocab": vocab, "d_model": d_model,
            "n_heads": n_heads, "n_layers": n_layers}, "examples": {"n": examples, "mean_tokens": mean_tokens,
            "lengths": "lognormal(σ=0.6), clipped to 16…seq_length"}, "precision": "bf16 autocast"
            if device.type == "cuda" else "float32", "steps_per_side": steps, **result,
            "packed_over_padded": result["packed"]["real_tokens_per_s"] / result["padded"]["real_tokens_per_s"]}


def collectives(device, sizes: list[int]) -> dict[str, Any]:
    """NCCL all-reduce over every GPU there is; with one GPU, the local copy and the α–β predictions."""
    import torch  # noqa: PLC0415 - torch only for this benchmark (start-up time of python -m benchmarks)


    out: dict[str, Any] = {"sizes_bytes": sizes}
    n = torch.cuda.device_count() if device.type == "cuda" else 0
    if n >= 2:
        secs = C.measure_all_reduce(n, sizes, 20, backend="nccl", timeout=300)
        out["all_reduce"] = [{"bytes": s, "seconds": t, "algbw_GBps": C.algo_bandwidth(s, t),
                              "busbw_GBps": C.bus_bandwidth("all_reduce", s, t, n)} for s, t in zip(sizes, secs)]
        out["world_size"] = n
    else:
        out["world_size"] = max(n, 1)
        out["note"] = ("one GPU: an NCCL all-reduce over one rank moves no bytes over any link, so it measures "
                       "launch latency only; measured instead: the device-local copy bandwidth a ring step needs, "
                       "and the α–β model's prediction for 8 GPUs on NVLink and over InfiniBand")
        copies = []
        for s in sizes:
            src = torch.empty(s // 4, dtype=torch.float32, device=device)
            dst = torch.empty_like(src)
            dst.copy_(src)
            _sync(device)
            reps = max(5, min(200, (1 << 28) // max(s, 1)))
            start = time.perf_counter()
            for _ in range(reps):
                dst.copy_(src)
            _sync(device)
            sec = (time.perf_counter() - start) / reps
            copies.append({"bytes": s, "seconds": sec, "GBps_read_plus_write": 2 * s / sec / 1e9})
        out["local_copy"] = copies
    out["alpha_beta_predictions"] = {}
    for name, link in LINKS.items():
        rows = []
        for s in sizes:
            t = C.alpha_beta_time("all_reduce", s, link["world_size"], link["alpha_s"], link["beta_s_per_byte"])
            rows.append({"bytes": s, "seconds": t,
                         "busbw_GBps": C.bus_bandwidth("all_reduce", s, t, link["world_size"])})
        out["alpha_beta_predictions"][name] = {"assumptions": link, "all_reduce": rows}
    return out


def end_to_end(device, steps: int) -> dict[str, Any]:
    """Chapter 6's training run on ``device`` (bf16 autocast on CUDA), through the same ``train()``."""
    from labsupport.training.trainer import train  # noqa: PLC0415 - labsupport.training pulls in torch (start-up time of python -m benchmarks)

    cuda = device.type == "cuda"
    overrides = [f"trainer.max_steps={steps}", f"trainer.accelerator={'gpu' if cuda else 'cpu'}",
                 f"trainer.precision={'bf16' if cuda else '32'}"]
    log = train(None, overrides, show_progress=False).log
    require(len(log) == steps, f"the run logged {len(log)} steps, not {steps}")
    warm = log[min(5, len(log) - 1):]
    return {"config": "configs/megatron_gpt_tiny.yaml", "overrides": overrides, "steps": len(log),
            "first_loss": log[0]["loss"], "last_loss": log[-1]["loss"],
            "median_tokens_per_s": float(np.median([r["tokens_per_s"] for r in warm]))}


def _run_losses(deterministic: bool, device_type: str, steps: int, folder: Path) -> dict[str, Any]:
    """One ``python -m labsupport train`` process of ``steps`` steps: its exit status, losses and last stderr line.

    ``CUBLAS_WORKSPACE_CONFIG`` is removed from the child's environment, so that only the switch sets it."""
    from labsupport.paths import REPO_ROOT  # noqa: PLC0415 - labsupport.paths only for this part (start-up time)

    log = folder / f"log-{'on' if deterministic else 'off'}-{len(list(folder.iterdir()))}.jsonl"
    cmd = [sys.executable, "-m", "labsupport", "train", "--no-progress", "--log-file", str(log),
           f"trainer.max_steps={steps}", f"trainer.accelerator={'gpu' if device_type == 'cuda' else 'cpu'}",
           f"trainer.deterministic={str(deterministic).lower()}"]
    env = {k: v for k, v in os.environ.items() if k != "CUBLAS_WORKSPACE_CONFIG"}
    proc = subprocess.run(cmd, cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=600)
    lines = [x for x in proc.stderr.splitlines() if x.strip()]
    losses = [json.loads(x)["loss"] for x in log.read_text().splitlines()] if log.exists() else []
    said = [x for x in lines if x.startswith("train: trainer.deterministic=true")]
    return {"returncode": proc.returncode, "losses": losses, "last_stderr": lines[-1] if lines else "",
            "line": said[0] if said else None}


def reproducibility(device, steps: int) -> dict[str, Any]:
    """Chapter 6's run twice with ``trainer.deterministic=true`` and twice without, each a fresh process
    (CUDA reads ``CUBLAS_WORKSPACE_CONFIG`` when its runtime initialises; PyTorch's own test harness starts a
    new process for it); per switch setting: both runs' losses, whether they are bitwise equal and the
    largest |difference| between them (the loss's own unit)."""
    out: dict[str, Any] = {"config": "configs/megatron_gpt_tiny.yaml", "steps": steps,
                           "nccl_algo": os.environ.get("NCCL_ALGO")}
    with tempfile.TemporaryDirectory(prefix="repro-") as tmp:
        for deterministic in (True, False):
            runs = [_run_losses(deterministic, device.type, steps, Path(tmp)) for _ in range(2)]
            a, b = runs[0]["losses"], runs[1]["losses"]
            complete = all(r["returncode"] == 0 and len(r["losses"]) == steps for r in runs)
            out["deterministic" if deterministic else "default"] = {
                "runs": runs, "completed": complete, "bitwise_equal": complete and a == b,
                "max_abs_difference": max((abs(x - y) for x, y in zip(a, b)), default=None) if complete else None}
    return out


def junit_summary(path: Path) -> dict[str, Any]:
    """Counts and seconds of a pytest JUnit XML file (``pytest --junitxml``)."""
    try:
        root = ET.parse(path).getroot()
    except (OSError, ET.ParseError) as exc:
        raise SystemExit(f"gpu_report: cannot read the JUnit log {path}: {exc}") from None
    suites = [root] if root.tag == "testsuite" else list(root.iter("testsuite"))
    total = {k: sum(int(s.get(k, 0)) for s in suites) for k in ("tests", "failures", "errors", "skipped")}
    total["passed"] = total["tests"] - total["failures"] - total["errors"] - total["skipped"]
    total["seconds"] = round(sum(float(s.get("time", 0)) for s in suites), 1)
    total["skipped_tests"] = [f"{c.get('classname')}::{c.get('name')}" for s in suites for c in s.iter("testcase")
                              if c.find("skipped") is not None][:50]
    return total


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.gpu_report", description=__doc__.split("\n\n")[0])
    ap.add_argument("--device", choices=("cuda", "cpu"), default="cuda",
                    help="cpu runs the same code at toy sizes (for the tests); the numbers mean nothing")
    ap.add_argument("--junit", type=Path, help="JUnit XML of `make test-gpu` to summarise")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", type=Path, default=RESULTS)
    args = ap.parse_args(argv)

    import torch  # noqa: PLC0415 - torch only for this benchmark (start-up time of python -m benchmarks)

    if args.device == "cuda" and not torch.cuda.is_available():
        print("gpu_report: torch sees no CUDA device here; run it on a GPU machine (make gpu-report)", file=sys.stderr)
        raise SystemExit(2)
    device = torch.device(args.device)
    toy = device.type == "cpu"
    result: dict[str, Any] = {
        "benchmark": "gpu", "machine": machine_info("torch", "numpy"),
        "environment": environment(device),
        "attention": attention_check(device, 256 if toy else 4096, 2 if toy else 16, 16 if toy else 64, args.seed),
        "packing_throughput": packing_throughput(
            device, seq=128 if toy else 4096, vocab=256 if toy else 32000, d_model=32 if toy else 512,
            n_heads=2 if toy else 8, n_layers=1 if toy else 8, examples=64 if toy else 4000,
            mean_tokens=24 if toy else 300, steps=3 if toy else 30, seed=args.seed),
        "collectives": collectives(device, [1 << k for k in range(10, 17 if toy else 31, 2)]),
        "end_to_end": end_to_end(device, 3 if toy else 300),
        "reproducibility": reproducibility(device, 2 if toy else 20),
    }
    if toy:
        result["note"] = "--device cpu: toy sizes to test the code; these numbers are not GPU measurements"
    if args.junit:
        result["test_gpu"] = junit_summary(args.junit)
    write_results(args.out, result)
    pt = result["packing_throughput"]
    print(f"{result['environment'].get('device_name', 'cpu')}: attention {result['attention']['path']} "
          f"max|Δ| {result['attention']['max_abs_difference']:.2e}; packed/padded {pt['packed_over_padded']:.1f}× "
          f"({pt['parameters'] / 1e6:.0f} M parameters); wrote {args.out}")
    return result


if __name__ == "__main__":
    main(sys.argv[1:])
