"""What the training loop checks so that a fault stops it with one clear line — chapter 6.

* :func:`run_lock` — one run at a time on a save dir and a log (a second is refused, naming the
  first's pid); :func:`preflight` — before the first step: the save dir and the log can be
  written, with room for a checkpoint; the temporary files of a killed save are removed;
* :func:`checked_blend` — the blend, with an empty dataset, a zero weight or a token id outside
  the vocabulary named as a config error (not an ``IndexError`` deep in the model);
* :func:`check_finite` — a NaN/inf loss or gradient stops the run naming the step, before the
  optimizer updates anything or a checkpoint is written (Megatron's
  ``check_for_nan_in_loss_and_grad`` does the same); :func:`check_finite_weights` — weights an
  update made NaN/inf (a huge learning rate) stop the run before a checkpoint is written;
* :func:`rank_timeout` — the config checked before the process group starts (under torchrun a
  config error is then one line and status 2 from every rank, with no group to tear down), and its
  ``trainer.rank_timeout_s``;
* :class:`RankHealth` — before every collective each rank writes where it is to the process
  group's store; when a collective fails or times out, the ranks that did not get there are named
  (not the rank that waited for them), and a killed torchrun agent is one line.  Its keys carry
  ``TORCHELASTIC_RESTART_COUNT``: torchrun keeps its store across restarts, and a restarted worker
  must never read a dead worker's entries;
* :func:`resume_source` — ``--resume-if-exists``: the newest checkpoint of the save dir, or a
  fresh start when there is none yet (what a job restarted by torchrun needs);
* fault injection for tests: ``LABSUPPORT_FAULT=kill:rank=1:step=3`` (SIGKILL itself),
  ``hang:rank=1:step=3`` (SIGSTOP itself), ``nan:step=3`` (the loss of step 3 becomes NaN);
  kill and hang fire only in the first attempt (``TORCHELASTIC_RESTART_COUNT`` 0 or unset).
"""
from __future__ import annotations

import contextlib
import datetime
import math
import os
import signal
import socket
import sys
import time
from pathlib import Path
from typing import Any, Iterator, Sequence

import numpy as np
import torch
import torch.distributed as dist

from labsupport.config import ConfigError
from labsupport.datasets.blending import BlendError
from labsupport.datasets.indexed import IndexedDataset
from labsupport.datasets.tokenizer import Tokenizer
from labsupport.fileio import LockHeld, hold_lock, process_stat
from labsupport.training import checkpoint as ckpt
from labsupport.training.data import build_blend
from labsupport.training.schema import read_run_config
from labsupport.training.settings import read_config

__all__ = ["TrainingError", "preflight", "checked_blend", "check_finite", "check_finite_weights", "RankHealth",
           "resume_source", "run_lock", "inject_rank_fault", "inject_nan", "restart_count",
           "rank_timeout"]


class TrainingError(RuntimeError):
    """The run cannot go on (a non-finite loss, a rank that stopped responding): exit status 1."""


def restart_count() -> int:
    """torchrun's ``TORCHELASTIC_RESTART_COUNT`` (0 outside torchrun)."""
    return int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0") or 0)


def rank_timeout(source: Any = None, overrides: Sequence[str] = (), world_size: int | None = None) -> float:
    """The config ``source`` with ``overrides``, checked (every field's rule, and
    ``trainer.devices × trainer.num_nodes`` = ``world_size`` when given), before any process group
    exists; returns its ``trainer.rank_timeout_s``: the seconds a rank waits for the others in a
    collective (300 without a config).  Raises ConfigError naming the field or the file."""
    if source is None:
        return 300.0
    return float(read_run_config(read_config(source, overrides), world_size)[0].trainer.rank_timeout_s)


# --------------------------------------------------------------------------- before training
def run_lock(rank: int, save_dir: Any, log_file: Any) -> contextlib.ExitStack:
    """Rank 0: hold ``<save dir>/.lock`` and ``<log>.lock`` for the run (:func:`labsupport.fileio.hold_lock`),
    so a second run on the same save dir or log is refused (TrainingError, exit 1) naming the
    holder, instead of both writing checkpoints and log lines.  Close the returned stack to release."""
    stack = contextlib.ExitStack()
    if rank != 0:
        return stack
    try:
        for flag, lock in (("--save-dir", None if save_dir is None else Path(save_dir) / ".lock"),
                           ("--log-file", None if log_file is None else Path(f"{os.fspath(log_file)}.lock"))):
            if lock is None:
                continue
            try:
                stack.enter_context(hold_lock(lock, f"{flag} {lock.parent if flag == '--save-dir' else log_file}"))
            except LockHeld as exc:
                raise TrainingError(f"{exc}: wait for that run to finish (or stop it), or choose another {flag}") \
                    from None
            except OSError as exc:   # named as the preflight checks name them: the save dir, the log
                where = lock.parent if flag == "--save-dir" else log_file
                raise OSError(exc.errno, exc.strerror, os.fspath(where)) from None
    except BaseException:
        stack.close()
        raise
    return stack


def preflight(run: Any, save_dir: Any, log_file: Any) -> None:
    """Rank 0: save dir and log writable (OSError naming them), stale save temporaries removed
    (all of them: :func:`run_lock` holds the save dir, so no other run writes there)."""
    if run.rank != 0:
        return

    if save_dir is not None:
        removed = ckpt.remove_stale_temporaries(save_dir, locked=True)
        if removed:
            print(f"train: removed {len(removed)} temporary file(s) left by a killed save: "
                  f"{', '.join(p.name for p in removed)}", file=sys.stderr)
        params = sum(p.numel() * p.element_size() for p in run.model.parameters())
        # weights + 2 Adam moments + RNG: the whole checkpoint (torch_dist's shards together; one save dir)
        ckpt.check_writable(save_dir, need_bytes=4 * params + (1 << 20))
    if log_file is not None:
        Path(log_file).parent.mkdir(parents=True, exist_ok=True)
        with open(log_file, "a", encoding="utf-8"):
            pass


def resume_source(resume: Any, save_dir: Any, rank: int) -> Any:
    """``--resume-if-exists``: the folder to resume from, or None (nothing saved yet: step 0)."""
    folder = resume if resume is not None else save_dir
    if folder is None:
        raise ConfigError("--resume-if-exists needs --save-dir (or --resume DIR): where the checkpoints are")
    one = Path(folder).is_file() or (Path(folder).is_dir() and ckpt.dcp_format.DIR_NAME.match(Path(folder).name))
    if one or ckpt.checkpoints_newest_first(folder):   # a checkpoint (file or torch_dist directory), or a save dir
        if rank == 0 and restart_count() > 0:
            print(f"train: torchrun restart {restart_count()}: resuming from the newest checkpoint in {folder}",
                  file=sys.stderr)
        return folder
    if rank == 0:
        print(f"train: no checkpoint in {folder} yet; starting at step 0", file=sys.stderr)
    return None


def checked_blend(settings: Any) -> Any:
    """:func:`~labsupport.training.data.build_blend`, with data problems as ConfigError."""
    vocab = Tokenizer(settings.tokenizer_path).vocab_size
    for name, prefix in zip(settings.names, settings.prefixes):
        ds = IndexedDataset(prefix)
        if len(ds) == 0 or int(np.asarray(ds.sequence_lengths, dtype=np.int64).sum()) == 0:
            raise ConfigError(f"model.data.data_prefix {name}: the dataset at {prefix} holds no tokens; "
                              "preprocess a corpus with documents in it, or leave it out of the blend")
        top = _max_token(ds)
        if top >= vocab:
            raise ConfigError(f"model.data.data_prefix {name}: token id {top} in {prefix}.bin is outside the "
                              f"vocabulary of model.tokenizer.model (size {vocab}); re-preprocess with this tokenizer")
    try:
        return build_blend(settings)
    except (BlendError, ValueError) as exc:
        raise ConfigError(f"model.data.data_prefix: {exc}") from None


def _max_token(ds: Any) -> int:
    """The largest token id in an indexed dataset's ``.bin`` (read in 16 M-token chunks)."""
    data = np.memmap(f"{ds.path_prefix}.bin", dtype=ds.dtype, mode="r") if hasattr(ds, "path_prefix") else None
    if data is None:
        return max(int(np.max(ds[i])) for i in range(len(ds)) if len(ds[i]))
    top, chunk = 0, 1 << 24
    for i in range(0, data.size, chunk):
        top = max(top, int(data[i:i + chunk].max()))
    return top


# --------------------------------------------------------------------------- during training
def check_finite(loss: float, model: torch.nn.Module, step: int) -> None:
    """TrainingError naming ``step`` when the loss or a gradient is NaN or inf."""
    if not math.isfinite(loss):
        raise TrainingError(f"step {step}: the loss is {loss} (not finite); stopped before the optimizer step, "
                            "so no checkpoint holds it — resume from the last checkpoint with a lower "
                            "model.optim.lr, or check the data of this step")
    grads = [p.grad for p in model.parameters() if p.grad is not None]
    # one sum per tensor: a NaN or inf anywhere makes the total non-finite (it can also overflow
    # without one, so only then is every gradient searched, by name); ~0.5 ms a step here against
    # ~5 ms for an isfinite pass over each of the 29 tensors
    if not grads or math.isfinite(float(torch.stack([g.sum(dtype=torch.float64) for g in grads]).sum())):
        return
    for name, p in model.named_parameters():
        if p.grad is not None and not bool(torch.isfinite(p.grad).all()):
            raise TrainingError(f"step {step}: the gradient of {name} holds NaN or inf; stopped before the optimizer "
                                "step, so no checkpoint holds it — lower model.optim.lr or check the data of this step")


def check_finite_weights(model: torch.nn.Module, step: int) -> None:
    """TrainingError naming ``step`` and the first parameter holding NaN or inf: checked before a
    checkpoint is written, so none holds them.  An update can overflow finite gradients (a huge
    ``model.optim.lr``: AdamW's step is about lr per weight), which :func:`check_finite` cannot see."""
    params = list(model.parameters())
    # one float64 sum per tensor, as in check_finite: float32 weights cannot overflow it, so a
    # finite total means every weight is finite
    if not params or math.isfinite(float(torch.stack([p.detach().sum(dtype=torch.float64) for p in params]).sum())):
        return
    for name, p in model.named_parameters():
        if not bool(torch.isfinite(p.detach()).all()):
            raise TrainingError(f"step {step}: after the optimizer step the weights of {name} hold NaN or inf, so no "
                                "checkpoint was written (the ones already saved are intact); lower model.optim.lr "
                                "and resume from the last checkpoint")


def _fault() -> dict[str, str]:
    spec = os.environ.get("LABSUPPORT_FAULT", "")
    if not spec:
        return {}
    kind, *fields = spec.split(":")
    return {"kind": kind, **dict(f.split("=", 1) for f in fields if "=" in f)}


def inject_rank_fault(rank: int, step: int) -> None:
    """Tests only: ``LABSUPPORT_FAULT=kill|hang:rank=R:step=S`` stops rank R as step S begins."""
    f = _fault()
    if f.get("kind") in ("kill", "hang") and restart_count() == 0 \
            and int(f.get("rank", 0)) == rank and int(f.get("step", 0)) == step:
        os.kill(os.getpid(), signal.SIGKILL if f["kind"] == "kill" else signal.SIGSTOP)


def inject_nan(loss: torch.Tensor, step: int) -> torch.Tensor:
    """Tests only: ``LABSUPPORT_FAULT=nan:step=S`` makes step S's loss NaN."""
    f = _fault()
    if f.get("kind") == "nan" and int(f.get("step", 0)) == step:
        return loss * float("nan")
    return loss


def _stopped_here(host: str, pid: int) -> bool:
    """Is ``pid`` a stopped (SIGSTOP, state T) labsupport process on this machine?"""
    if host != socket.gethostname() or pid == os.getpid():
        return False
    fields = process_stat(pid)
    if not fields or fields[0] not in (b"T", b"t"):
        return False
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            return b"labsupport" in fh.read()
    except OSError:
        return False


class RankHealth:
    """Where each rank is, in the process group's store: before every collective a rank writes
    ``labsupport/restart<N>/at/<rank>`` = ``<count> <step> <time> <host> <pid>`` (``count``: the
    collectives it has entered).  When a collective fails or times out, the ranks that have entered
    fewer collectives than this one are the ones that stopped (mid-step: a rank stopped anywhere
    before the collective is named, not only one stopped between steps); one stopped (SIGSTOP) on
    this machine inside the collective is found by its process state and SIGKILLed, so that torchrun
    (which waits 30 s for a stopped process to handle its SIGTERM) ends or restarts the job at once.
    Every write also checks that the torchrun agent (this process's parent, which holds the store)
    is still there: when it is gone, one line and status 1 (:meth:`agent_gone`).  All of it runs in
    the training thread, between steps: no thread shares the store with the collectives."""

    def __init__(self, store: Any, rank: int, world: int, timeout: float) -> None:
        self.store, self.rank, self.world, self.timeout = store, rank, world, timeout
        self.prefix = f"labsupport/restart{restart_count()}/at/"   # also under the group's own prefix
        self.entered = 0
        self.step = 0
        self._parent = os.getppid()
        self._where = f"{socket.gethostname()} {os.getpid()}"   # written with every entry

    @classmethod
    def create(cls, run: Any) -> "RankHealth | None":
        try:
            store = dist.distributed_c10d._get_default_store()
        except (AttributeError, RuntimeError, ValueError):
            return None
        return cls(store, run.rank, run.world, run.settings.config.trainer.rank_timeout_s)

    def agent_gone(self, why: str) -> TrainingError:
        """The error for a torchrun agent that went away (killed: the store went with it)."""
        where = f"{os.environ.get('MASTER_ADDR', '?')}:{os.environ.get('MASTER_PORT', '?')}"
        return TrainingError(f"rank {self.rank}: the torchrun agent (pid {self._parent}, the store at {where}) is "
                             f"gone at step {self.step} ({why}); the checkpoints already written are intact — "
                             "start the job again with --resume-if-exists")

    def enter(self, step: int) -> None:
        """Say "rank r enters its next collective, in step ``step``" (one store write)."""
        self.step = step
        if os.getppid() != self._parent:
            raise self.agent_gone("its process exited")
        self.entered += 1
        try:
            with _no_cpp_warnings():
                self.store.set(f"{self.prefix}{self.rank}",
                               f"{self.entered} {step} {time.time():.3f} {self._where}")
        except RuntimeError as exc:  # DistNetworkError, DistStoreError: the store's host is gone
            raise self.agent_gone(_first_line(exc)) from None

    def silent_ranks(self) -> list[str]:
        """The ranks that stopped: fewer collectives entered than this rank, or stopped (SIGSTOP) on
        this machine — "rank 1 (last heard at step 3, 12 s ago)"."""
        out = []
        with contextlib.suppress(Exception):
            self.store.set_timeout(datetime.timedelta(seconds=5))
        for r in range(self.world):
            if r == self.rank:
                continue
            try:
                with _no_cpp_warnings():
                    count, step, when, host, pid = self.store.get(f"{self.prefix}{r}").decode().split()
            except Exception:  # noqa: BLE001 - no key (never started) or the store is gone
                out.append(f"rank {r} (never heard from)")
                continue
            stopped = pid.isdigit() and _stopped_here(host, int(pid))
            if int(count) < self.entered or stopped:
                killed = ""
                if stopped:
                    with contextlib.suppress(OSError):
                        os.kill(int(pid), signal.SIGKILL)
                        killed = f"; it was stopped (SIGSTOP): killed pid {pid} so that torchrun ends the job"
                out.append(f"rank {r} (last heard at step {step}, {time.time() - float(when):.0f} s ago{killed})")
        return out

    @contextlib.contextmanager
    def collective(self, step: int, what: str) -> Iterator[None]:
        """Run a collective; a timeout or a lost peer becomes TrainingError naming the silent ranks."""
        self.enter(step)
        try:
            yield
        except RuntimeError as exc:  # DistBackendError and gloo's timeout are RuntimeErrors
            if os.getppid() != self._parent:    # the peers left because the agent did: its store is gone
                raise self.agent_gone("its process exited") from None
            silent = self.silent_ranks()
            who = ", ".join(silent) if silent else "another rank"
            raise TrainingError(f"step {step}: {who} stopped responding — rank {self.rank} waited in {what} "
                                f"(trainer.rank_timeout_s={self.timeout:g}; "
                                f"{_first_line(exc)}); under torchrun --max-restarts the job restarts from the "
                                "last checkpoint") from None


@contextlib.contextmanager
def _no_cpp_warnings() -> Iterator[None]:
    """File descriptor 2 on /dev/null for one store call: a failed call makes torch's C++ side log
    a ~20-line warning with its stack frames (``TCPStore.cpp … sendBytes failed``) before it
    raises, and the raise is what this module turns into its one line."""
    sys.stderr.flush()
    saved = os.dup(2)
    null = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(null, 2)
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)
        os.close(null)


def _first_line(exc: BaseException) -> str:
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0][:120]
