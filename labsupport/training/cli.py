"""``python -m labsupport train``: chapter 6's training run from the command line (docs/training.md).

    python -m labsupport train --config configs/megatron_gpt_tiny.yaml trainer.max_steps=50 \\
        --save-dir work/runs/a --save-every 10 --log work/runs/a/log.jsonl
    torchrun --nproc-per-node 2 -m labsupport train --config configs/megatron_gpt_tiny.yaml trainer.devices=2
    python -m labsupport train --nproc-per-node 2 --config configs/megatron_gpt_tiny.yaml   # the same, one-line errors

Options may come before or after the ``key=value`` overrides.  Under torchrun spell ``--log`` as
``--log-file``: torchrun's parser sees every argument and rejects ``--log`` as an ambiguous
abbreviation of its own ``--log-dir``/``--logs-specs``.  ``--resume DIR`` continues from the
newest intact checkpoint in DIR (a damaged one is skipped, saying so); ``--resume-if-exists``
does so when DIR (default ``--save-dir``) holds one and starts at step 0 otherwise — the flag a
job restarted by ``torchrun --max-restarts N`` needs.  Under torchrun (``WORLD_SIZE`` set) each
process joins the group with gloo on CPU or NCCL on GPU; multi-node runs use torchrun's own
``--nnodes``/``--rdzv-*`` flags.

Exit status: 0 success · 2 bad input: the command line, a config key or value, the data (an
empty dataset, a zero blend weight, a token id outside the vocabulary), a checkpoint that cannot
be resumed or a changed data plan · 1 the environment or a failed run: a save dir or log that
cannot be written, no space left, a save dir or log in use by another run (locked: see
docs/training.md), a NaN/inf loss, a rank that stopped responding · 130 Ctrl-C.
Each is one line on stderr: ``error: <what and where>: <what to do>``.  Under torchrun the config
is checked before the process group starts (each rank: one line, status 2); a Ctrl-C is
one line per worker and 130; a killed agent is one line per worker and 1
(:class:`~labsupport.training.faults.RankHealth`).  torchrun's own report follows a failure
(docs/training.md, "Under plain torchrun: what you see"); ``--nproc-per-node N`` launches the same
workers without it (:mod:`~labsupport.training.launch`).
"""
from __future__ import annotations

import argparse
import datetime
import errno
import os
import sys
import time
from typing import Sequence

from labsupport.config import ConfigError
from labsupport.datasets.utils import DataError
from labsupport.training.settings import DEFAULT_CONFIG

__all__ = ["main", "build_parser", "EXIT_OK", "EXIT_USAGE", "EXIT_ENV", "EXIT_INTERRUPTED"]

EXIT_OK, EXIT_ENV, EXIT_USAGE, EXIT_INTERRUPTED = 0, 1, 2, 130
# a rank whose failure rank 0 reports for the group waits this long (s) for rank 0 to say it and
# torchrun to stop it (exiting first, it had rank 0 stopped unheard); still running then, it says its own line
_SPOKEN_FOR_S = 10.0
INTERRUPTED = "interrupted (Ctrl-C); the checkpoints already written are intact — continue with --resume"


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # one line, exit 2 (argparse prints usage too)
        print(f"error: {message}", file=sys.stderr)
        raise SystemExit(EXIT_USAGE)


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="python -m labsupport train", description="Train chapter 6's tiny GPT from a NeMo-layout YAML.")
    p.add_argument("--config", default=None, help="YAML config (default configs/megatron_gpt_tiny.yaml)")
    p.add_argument("--save-dir", default=None, help="write checkpoints here (at the end, and every --save-every steps)")
    p.add_argument("--save-every", type=int, default=0, help="checkpoint every N optimizer steps (0: only at the end)")
    p.add_argument("--resume", default=None,
                   help="continue from the newest intact checkpoint in this directory (or a file)")
    p.add_argument("--resume-if-exists", action="store_true",
                   help="resume from --resume DIR (default: --save-dir) when it holds a checkpoint, else start at "
                        "step 0: what a job restarted by torchrun --max-restarts needs")
    p.add_argument("--log", "--log-file", dest="log", default=None,
                   help="append one JSON line per optimizer step to this file (under torchrun write --log-file: "
                        "torchrun's own parser reads --log as an ambiguous abbreviation of its --log-dir)")
    p.add_argument("--stop-after", type=int, default=None,
                   help="stop after N steps of this run (simulate an interruption)")
    p.add_argument("--data-args-path", default=None, metavar="FILE",
                   help="the blend from a file, as Megatron-LM's --data-args-path: 'weight prefix …' (or prefixes "
                        "alone), whitespace-separated; instead of model.data.data_prefix=[…]")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.add_argument("--nproc-per-node", type=int, default=None, metavar="N",
                   help="start N data-parallel workers on this machine, as torchrun --standalone does, and end "
                        "with their one-line errors only (labsupport.training.launch)")
    p.add_argument("overrides", nargs="*", help="Hydra-style key=value overrides, e.g. trainer.max_steps=20")
    return p


def _init_distributed(timeout_s: float) -> None:
    import torch  # noqa: PLC0415 - torch start-up: --help, usage errors without torch
    import torch.distributed as dist  # noqa: PLC0415 - torch start-up: --help, usage errors without torch

    if int(os.environ.get("WORLD_SIZE", "1")) <= 1 or dist.is_initialized():
        return
    backend = "nccl" if torch.cuda.is_available() else "gloo"
    if backend == "nccl":
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
    timeout = datetime.timedelta(seconds=timeout_s)
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    if "TORCHELASTIC_RESTART_COUNT" not in os.environ:
        dist.init_process_group(backend, timeout=timeout)
        return
    # torchrun keeps its store across restarts: a restarted worker must not find the dead
    # workers' entries (gloo's and NCCL's connection keys, our heartbeats), so every key of this
    # attempt lives under its own prefix.
    agent_store = os.environ.get("TORCHELASTIC_USE_AGENT_STORE", "False") == "True"
    store = dist.TCPStore(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]), world,
                          is_master=(rank == 0 and not agent_store), timeout=timeout, wait_for_workers=False)
    prefixed = dist.PrefixStore(f"labsupport/restart{os.environ['TORCHELASTIC_RESTART_COUNT']}/", store)
    dist.init_process_group(backend, store=prefixed, rank=rank, world_size=world, timeout=timeout)


def _os_error(exc: OSError) -> str:
    """One line for a disk or permission problem: the file, what happened, what to do."""
    if exc.errno is None:           # our own one-line message (e.g. an index cache folder it cannot write)
        return str(exc)
    where = f"{exc.filename}: " if exc.filename else ""
    names = {errno.ENOSPC: "no space left on device", errno.EDQUOT: "no space left (disk quota exceeded)",
             errno.EROFS: "read-only file system", errno.EACCES: "permission denied"}
    what = names.get(exc.errno, exc.strerror or str(exc))
    todo = ("free space there or choose another --save-dir" if exc.errno in (errno.ENOSPC, errno.EDQUOT)
            else "choose a folder you can write to (--save-dir, --log-file)")
    detail = f" ({exc.strerror})" if exc.errno == errno.ENOSPC and exc.strerror and "bytes free" in exc.strerror else ""
    return f"{where}{what}{detail}; {todo}"


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command; the exit status: 0 done, 2 bad input, 1 environment or a failed run, 130 Ctrl-C."""
    try:
        return _main(argv)
    except KeyboardInterrupt:
        print(f"error: {INTERRUPTED}", file=sys.stderr)
        return EXIT_INTERRUPTED


def _main(argv: Sequence[str] | None) -> int:
    args = build_parser().parse_intermixed_args(argv)
    for flag, value, low in (("--save-every", args.save_every, 0), ("--stop-after", args.stop_after, 1),
                             ("--nproc-per-node", args.nproc_per_node, 1)):
        if value is not None and value < low:
            print(f"error: {flag} {value}: must be ≥ {low}", file=sys.stderr)
            return EXIT_USAGE
    if args.data_args_path is not None:     # Megatron's --data-args-path: the blend from a file
        if any(o.lstrip("+").startswith("model.data.data_prefix=") for o in args.overrides):
            return _report("--data-args-path and model.data.data_prefix=… both give the blend: give one",
                           EXIT_USAGE)
        from labsupport.training.data_args import data_prefix_override  # noqa: PLC0415 - numpy start-up: only with the flag

        try:
            args.overrides.append(data_prefix_override(args.data_args_path))
        except ConfigError as exc:
            return _report(str(exc), EXIT_USAGE)
    if args.nproc_per_node is not None and "WORLD_SIZE" not in os.environ:
        from labsupport.training.launch import launch  # noqa: PLC0415 - torch start-up: --help, usage errors without torch

        return launch(args.nproc_per_node, _without_nproc(list(argv if argv is not None else sys.argv[1:])))
    import torch.distributed as dist  # noqa: PLC0415 - torch start-up: --help, usage errors without torch

    from labsupport.training.checkpoint import ResumeError  # noqa: PLC0415 - torch start-up: --help, usage errors without torch
    from labsupport.training.faults import TrainingError, rank_timeout  # noqa: PLC0415 - torch start-up: --help, usage errors without torch
    from labsupport.training.trainer import train  # noqa: PLC0415 - torch start-up: --help, usage errors without torch

    config = args.config or DEFAULT_CONFIG
    world = int(os.environ.get("WORLD_SIZE", "1") or 1)
    # the config, checked before any process group exists: one line and status 2 from every rank
    # (each worker's own; torchrun stops the others with SIGTERM as soon as one has failed)
    who = f"rank {os.environ.get('RANK', '0')}: " if world > 1 else ""
    try:
        timeout = rank_timeout(config, args.overrides, world)
    except ConfigError as exc:
        return _report(f"{who}{exc}", EXIT_USAGE)
    except OSError as exc:
        return _report(f"{who}{_os_error(exc)}", EXIT_ENV)
    _init_distributed(timeout)
    rank = dist.get_rank() if dist.is_initialized() else 0
    status, message = EXIT_OK, ""
    try:
        res = train(config, args.overrides, save_dir=args.save_dir, save_every=args.save_every,
                    resume=args.resume, log_file=args.log, stop_after=args.stop_after,
                    show_progress=not args.no_progress, resume_if_exists=args.resume_if_exists)
    except (ConfigError, ResumeError, DataError) as exc:   # DataError: a .bin/.idx, sidecar or blend unreadable
        message, status = str(exc), EXIT_USAGE
    except TrainingError as exc:
        message, status = str(exc), EXIT_ENV
    except OSError as exc:
        message, status = _os_error(exc), EXIT_ENV
    except KeyboardInterrupt:
        if not dist.is_initialized():
            raise
        message, status = f"rank {rank}: {INTERRUPTED}", EXIT_INTERRUPTED   # every worker had the Ctrl-C
    finally:
        if dist.is_initialized() and status == EXIT_OK:
            dist.destroy_process_group()
    if status != EXIT_OK:
        if dist.is_initialized():  # a failed group cannot be torn down cleanly: leave at once
            # rank 0 speaks for the group; every rank says what happened to itself (a Ctrl-C, its
            # agent gone) and who it waited for
            shown = rank == 0 or message.startswith(f"rank {rank}: ") or "stopped responding" in message
            if not shown:       # give rank 0 the time to say it (torchrun stops this one when rank 0 has
                time.sleep(_SPOKEN_FOR_S)   # failed); past that, this rank's problem is its own: say it
                message = f"rank {rank}: {message}"
            os.write(2, f"error: {message}\n".encode())   # not print(): os._exit would drop a buffered line
            os._exit(status)
        return _report(message, status)
    if rank == 0 and res.log:
        last = res.log[-1]
        print(f"step {last['step']} · loss {last['loss']:.4f} · consumed_samples {last['consumed_samples']}"
              + (f" · checkpoint {os.path.basename(res.checkpoints[-1])}" if res.checkpoints else "")
              + (f" · val_loss {res.val_log[-1]['val_loss']:.4f} (step {res.val_log[-1]['val_step']})"
                 if res.val_log and res.val_log[-1]["val_loss"] is not None else ""))
    return EXIT_OK


def _without_nproc(argv: list[str]) -> list[str]:
    """``argv`` without ``--nproc-per-node N`` / ``--nproc-per-node=N`` (what each worker is given)."""
    out, skip = [], False
    for arg in argv:
        if skip:
            skip = False
        elif arg == "--nproc-per-node":
            skip = True
        elif not arg.startswith("--nproc-per-node="):
            out.append(arg)
    return out


def _report(message: str, status: int) -> int:
    print(f"error: {message}", file=sys.stderr, flush=True)
    return status
