"""The command behind ``python -m labsupport.train`` (chapter 6); see ``labsupport/train.py``."""
from __future__ import annotations

import argparse
import datetime
import os
import sys
from typing import Sequence

__all__ = ["main", "build_parser", "EXIT_OK", "EXIT_USAGE", "EXIT_ENV"]

EXIT_OK, EXIT_ENV, EXIT_USAGE = 0, 1, 2


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # one line, exit 2 (argparse prints usage too)
        print(f"error: {message}", file=sys.stderr)
        raise SystemExit(EXIT_USAGE)


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="python -m labsupport.train", description="Train chapter 6's tiny GPT from a NeMo-layout YAML.")
    p.add_argument("--config", default=None, help="YAML config (default configs/megatron_gpt_tiny.yaml)")
    p.add_argument("--save-dir", default=None, help="write checkpoints here (at the end, and every --save-every steps)")
    p.add_argument("--save-every", type=int, default=0, help="checkpoint every N optimizer steps (0: only at the end)")
    p.add_argument("--resume", default=None, help="continue from the latest checkpoint in this directory (or a file)")
    p.add_argument("--log", "--log-file", dest="log", default=None,
                   help="append one JSON line per optimizer step to this file (under torchrun write --log-file: "
                        "torchrun's own parser reads --log as an ambiguous abbreviation of its --log-dir)")
    p.add_argument("--stop-after", type=int, default=None, help="stop after N steps of this run (simulate an interruption)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.add_argument("overrides", nargs="*", help="Hydra-style key=value overrides, e.g. trainer.max_steps=20")
    return p


def _init_distributed() -> None:
    import torch
    import torch.distributed as dist

    if int(os.environ.get("WORLD_SIZE", "1")) <= 1 or dist.is_initialized():
        return
    backend = "nccl" if torch.cuda.is_available() else "gloo"
    if backend == "nccl":
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
    dist.init_process_group(backend, timeout=datetime.timedelta(seconds=int(os.environ.get("LABSUPPORT_PG_TIMEOUT", "300"))))


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_intermixed_args(argv)
    if args.save_every < 0:
        print("error: --save-every must be ≥ 0", file=sys.stderr)
        return EXIT_USAGE
    from labsupport.config import ConfigError
    from labsupport.training.checkpoint import ResumeError
    from labsupport.training.settings import DEFAULT_CONFIG
    from labsupport.training.trainer import train
    import torch.distributed as dist

    _init_distributed()
    rank = dist.get_rank() if dist.is_initialized() else 0
    try:
        res = train(args.config or DEFAULT_CONFIG, args.overrides, save_dir=args.save_dir, save_every=args.save_every,
                    resume=args.resume, log_file=args.log, stop_after=args.stop_after,
                    show_progress=not args.no_progress)
    except (ConfigError, ResumeError) as exc:
        if rank == 0:
            print(f"error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except OSError as exc:          # e.g. an index cache folder that cannot be written
        if rank == 0:
            print(f"error: {exc}", file=sys.stderr)
        return EXIT_ENV
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()
    if rank == 0 and res.log:
        last = res.log[-1]
        print(f"step {last['step']} · loss {last['loss']:.4f} · consumed_samples {last['consumed_samples']}"
              + (f" · checkpoint {os.path.basename(res.checkpoints[-1])}" if res.checkpoints else ""))
    return EXIT_OK
