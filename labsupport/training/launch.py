"""``python -m labsupport train --nproc-per-node N``: torchrun's launch, with the one-line promise kept (chapter 6).

The command starts N workers on this machine exactly as ``torchrun --standalone --nproc-per-node N -m
labsupport train …`` does (torch's own ``torch.distributed.run``, in this process), and adds
``trainer.devices=N`` when the overrides do not set it.  What it changes is what a failure looks like:
each worker prints its own one line (``error: rank R: …``); the launcher then ends with the first failed
worker's status (2 bad input, 1 environment or a failed run, 130 Ctrl-C) instead of torchrun's ~40-line
``ChildFailedError`` report or torch's ``SignalException`` traceback, and torchrun's log lines are quiet.
Plain ``torchrun`` keeps working and shows torch's report (docs/training.md, "Under plain torchrun").
"""
from __future__ import annotations

import importlib
import logging
import signal
import sys
from typing import Sequence

__all__ = ["launch", "worker_argv"]

_QUIET = ("torch.distributed.run", "torch.distributed.elastic", "torch.distributed.launcher")


def worker_argv(nproc: int, argv: Sequence[str]) -> list[str]:
    """torchrun's arguments for ``nproc`` workers running ``python -m labsupport train argv``
    (``trainer.devices=nproc`` added when ``argv`` does not set it)."""
    rest = list(argv)
    if not any(a.startswith("trainer.devices=") for a in rest):
        rest.append(f"trainer.devices={nproc}")
    return ["--standalone", f"--nproc-per-node={nproc}", "-m", "labsupport", "train", *rest]


def _status(exc: BaseException) -> int:
    """The launcher's status from torchrun's failure: the first failed worker's own (a worker killed by a
    signal: 1)."""
    failures = getattr(exc, "failures", {}) or {}
    first = min(failures.values(), key=lambda f: f.timestamp, default=None)
    code = getattr(first, "exitcode", 1)
    return code if isinstance(code, int) and code > 0 else 1


def launch(nproc: int, argv: Sequence[str]) -> int:
    """Run ``nproc`` workers of ``python -m labsupport train argv``; the status of the run (see module doc)."""
    from torch.distributed import run as torchrun  # noqa: PLC0415 - torch start-up: --help, usage errors without torch
    from torch.distributed.elastic.multiprocessing.api import SignalException  # noqa: PLC0415 - same
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError  # noqa: PLC0415 - same

    importlib.import_module("torch.distributed.elastic.agent.server.api")   # its logger exists: quiet it too

    for name in list(logging.root.manager.loggerDict):   # torch sets each module's logger's own level
        if name.startswith(_QUIET):
            logging.getLogger(name).setLevel(logging.CRITICAL)
    try:
        torchrun.run(torchrun.parse_args(worker_argv(nproc, argv)))
    except ChildFailedError as exc:     # each worker has said why on its own stderr
        return _status(exc)
    except (SignalException, KeyboardInterrupt) as exc:
        signum = getattr(exc, "sigval", signal.SIGINT)
        if signum != signal.SIGINT:
            print(f"error: the launcher got {signal.Signals(signum).name}; the checkpoints already written are "
                  "intact — continue with --resume", file=sys.stderr)
            return 1
        return 130                      # each worker printed its own Ctrl-C line
    return 0
