"""Checkpoints in ``torch.distributed.checkpoint`` (DCP) format — chapter 6 (Megatron's ``torch_dist``).

A ``torch_dist`` checkpoint is a *directory* named like the single file without ``.ckpt``::

    <save dir>/step=000020-consumed_samples=160/
        .metadata          DCP's index: every tensor's key, dtype, shape and which shard file holds it
                           at which byte offset (a pickle, a few KB)
        __0_0.distcp       the bytes rank 0 wrote (tensors and small pickled values)
        __1_0.distcp       the bytes rank 1 wrote, … one file per rank that saved
        checkpoint.json    ours: format, step, consumed_samples, the ranks that saved, each file's
                           size in bytes and ``content_sha256`` (the digest of the whole content)

With data parallelism only every rank holds the same full state; DCP's default save planner sees
the same keys on every rank, keeps each replicated item once and spreads the items over the ranks
(balanced by size), so each rank writes a shard and together the shards hold every tensor once.
Loading reads the whole state on each rank independently (no collective, no process group
needed): a run saved by 2 ranks resumes on 1 or on 4.

Nothing half-written appears under a final name: the ranks write into ``.<name>.<pid>-dcp.tmp``
(``pid`` of rank 0), DCP fsyncs each file, rank 0 writes ``checkpoint.json`` (fsynced), fsyncs the
folder, and once every rank finished (a barrier) renames it to ``<name>`` and fsyncs the save dir.
:func:`remove_stale_dirs` deletes the temporary directory of a save that was killed.

``async_save`` uses :func:`torch.distributed.checkpoint.async_save` (a background thread; its
collectives run on a gloo group of their own, so they never interleave with the training's): the
state is first copied (cloned, on the training thread, so later steps do not change what is
written), then written while training goes on; :meth:`PendingSave.wait` blocks until every rank
finished and renames the directory.  This module only writes and reads; verifying the digest and
choosing the newest intact checkpoint is :mod:`labsupport.training.checkpoint`'s.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import signal
import threading
import warnings
from concurrent.futures import Future
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.api import CheckpointException
from torch.distributed.checkpoint.default_planner import _EmptyStateDictLoadPlanner
from torch.distributed.checkpoint.state_dict_loader import _load_state_dict

from labsupport.fileio import atomic_write, fsync_folder, writer_gone

__all__ = ["SIDECAR", "dir_name", "PendingSave", "save_sharded", "read_sharded", "shard_files",
           "remove_stale_dirs", "UnreadableShards", "DIR_NAME"]

#: the small JSON file beside DCP's files
SIDECAR = "checkpoint.json"
DIR_NAME = re.compile(r"^step=(\d+)-consumed_samples=(\d+)$")
_TEMP_DIR = re.compile(r"^\.(?P<name>step=\d+-consumed_samples=\d+)\.(?P<pid>\d+)-(dcp|old)\.tmp$")
_GROUPS: dict[int, Any] = {}   # id(default group) → the gloo group async saves use


class UnreadableShards(ValueError):
    """A torch_dist checkpoint directory that cannot be read back (a file missing, short or garbled)."""


def dir_name(step: int, consumed_samples: int) -> str:
    """``step=000020-consumed_samples=160`` (zero-padded so names sort by step)."""
    return f"step={step:06d}-consumed_samples={consumed_samples}"


@contextmanager
def _quiet() -> Iterator[None]:
    """DCP warns that it assumes one process when there is no group: that is the intent here."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*torch.distributed is disabled.*")
        warnings.filterwarnings("ignore", category=FutureWarning, module="torch.distributed.checkpoint")
        yield


def _rank() -> int:
    return dist.get_rank() if dist.is_initialized() else 0


def _barrier(group: Any = None) -> None:
    if dist.is_initialized():
        dist.barrier(group=group)


def _temp_dir(final: Path) -> Path:
    """The temporary directory of this save, the same on every rank (rank 0's pid)."""
    names = [f".{final.name}.{os.getpid()}-dcp.tmp"]
    if dist.is_initialized():
        dist.broadcast_object_list(names, src=0)
    return final.parent / names[0]


def _async_group() -> Any:
    """A gloo group for the background writer's collectives (created once, a collective itself)."""
    if not dist.is_initialized():
        return None
    key = id(dist.group.WORLD)
    if key not in _GROUPS:
        try:   # the world's timeout (trainer.rank_timeout_s), not gloo's default 30 minutes
            timeout = dist.group.WORLD._get_backend(torch.device("cpu")).options._timeout
        except (AttributeError, RuntimeError):
            timeout = None
        _GROUPS[key] = dist.new_group(backend="gloo", timeout=timeout)
    return _GROUPS[key]


_EMPTY = "<labsupport: empty dict>"


def _to_dcp(value: Any) -> Any:
    """DCP flattens nested dicts to string keys and drops empty ones: the optimizer's int parameter ids
    become ``"0"``, ``"1"``…, and an empty dict (a fresh optimizer's ``state``) becomes a marker.
    :func:`_from_dcp` turns both back."""
    if isinstance(value, dict):
        return {str(k): _to_dcp(v) for k, v in value.items()} if value else _EMPTY
    return value


def _from_dcp(value: Any, key: str = "") -> Any:
    if isinstance(value, dict):
        return {(int(k) if key == "optimizer.state" and k.isdigit() else k): _from_dcp(v, f"{key}.{k}".lstrip("."))
                for k, v in value.items()}
    return {} if isinstance(value, str) and value == _EMPTY else value


def _clone(value: Any) -> Any:
    """A copy of every tensor (what an async save writes may not change under it)."""
    if isinstance(value, torch.Tensor):
        return value.detach().clone()
    if isinstance(value, dict):
        return {k: _clone(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(_clone(v) for v in value)
    return value


def _unwrapped(exc: BaseException) -> BaseException:
    """The first rank's own exception inside DCP's CheckpointException; a Ctrl-C or an OSError behind it (a
    full disk or an interrupt that ``torch.save`` reports as a RuntimeError of its zip writer) comes first."""
    if isinstance(exc, CheckpointException) and exc.failures:
        inner = next(iter(exc.failures.values()))
        exc = inner[0] if isinstance(inner, tuple) else inner
    chain: list[BaseException] = []
    cause: BaseException | None = exc
    while cause is not None and cause not in chain:
        chain.append(cause)
        cause = cause.__cause__ or cause.__context__
    return next((c for c in chain if isinstance(c, KeyboardInterrupt)),
                next((c for c in chain if isinstance(c, OSError)), exc))


@contextmanager
def _interrupts_held() -> Iterator[None]:
    """A Ctrl-C (SIGINT) during the block is held until the block has ended, then delivered by the handler that was
    in place (a KeyboardInterrupt, as the command expects).  Delivered inside DCP's writer it came out as a
    RuntimeError of torch's zip writer ("unexpected pos"), a half-written shard, and on every rank "another rank
    stopped responding" instead of "interrupted (Ctrl-C)".  A save takes milliseconds to seconds."""
    previous = signal.getsignal(signal.SIGINT)
    if threading.current_thread() is not threading.main_thread() or not callable(previous):
        yield                       # not the main thread, or SIGINT ignored / not Python's: nothing to hold
        return
    held: list[Any] = []
    signal.signal(signal.SIGINT, lambda signum, frame: held.append(frame))
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
        if held:
            previous(signal.SIGINT, held[0])


@contextmanager
def _writing(temp: Path) -> Iterator[None]:
    """Re-raise a failed save as the rank's own exception (a full disk: OSError), its directory removed."""
    try:
        yield
    except BaseException as exc:
        shutil.rmtree(temp, ignore_errors=True)
        inner = _unwrapped(exc)
        if inner is exc:
            raise
        if isinstance(inner, OSError):    # the one line names the save dir, as check_writable's does
            raise OSError(inner.errno, inner.strerror, os.fspath(temp.parent)) from None
        raise inner from None


def shard_files(path: str | os.PathLike) -> dict[str, int]:
    """The files of a torch_dist checkpoint directory and their sizes in bytes (name → bytes)."""
    folder = Path(path)
    return {p.name: p.stat().st_size for p in sorted(folder.iterdir()) if p.is_file()}


class PendingSave:
    """A torch_dist save under way; :meth:`wait` (on every rank) finishes it and returns the final path."""

    def __init__(self, final: Path, temp: Path, sidecar: dict[str, Any], future: Future | None,
                 group: Any = None) -> None:
        self.final, self.temp, self.sidecar, self.future, self.group = final, temp, sidecar, future, group
        self.done = False

    def wait(self) -> Path:
        """Block until every rank's shard is written, then rank 0 writes ``checkpoint.json`` and renames
        the temporary directory to the final name (a collective: call it on every rank)."""
        if self.done:
            return self.final
        if self.future is not None:
            with _quiet(), _writing(self.temp):
                self.future.result()
        _barrier(self.group)
        if _rank() == 0:
            files = shard_files(self.temp)
            atomic_write(self.temp / SIDECAR, json.dumps({**self.sidecar, "files": files}, indent=1) + "\n")
            fsync_folder(self.temp)
            _replace_dir(self.temp, self.final)
        _barrier(self.group)
        self.done = True
        return self.final


def _replace_dir(temp: Path, final: Path) -> None:
    """Rename ``temp`` to ``final``; an existing ``final`` (the same step saved again) is moved aside first."""
    old = None
    if final.exists():
        old = final.parent / f".{final.name}.{os.getpid()}-old.tmp"
        os.replace(final, old)
    os.replace(temp, final)
    fsync_folder(final.parent)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


def save_sharded(final: Path, state: dict[str, Any], sidecar: dict[str, Any], *,
                 async_save: bool = False) -> PendingSave:
    """Write ``state`` as a torch_dist checkpoint to be renamed ``final``; a collective under torch.distributed.

    ``sidecar``: what ``checkpoint.json`` records (step, consumed_samples, content_sha256…).
    Synchronous: returns a PendingSave already finished.  ``async_save``: returns at once after
    copying the state; call :meth:`PendingSave.wait` on every rank before the next save."""
    with _interrupts_held():
        return _save_sharded(final, state, sidecar, async_save)


def _save_sharded(final: Path, state: dict[str, Any], sidecar: dict[str, Any], async_save: bool) -> PendingSave:
    final.parent.mkdir(parents=True, exist_ok=True)
    temp = _temp_dir(final)
    if _rank() == 0:
        shutil.rmtree(temp, ignore_errors=True)
        temp.mkdir()
    _barrier()
    writer = dcp.FileSystemWriter(temp, sync_files=True)
    sidecar = {**sidecar, "world_size": dist.get_world_size() if dist.is_initialized() else 1}
    no_dist = not dist.is_initialized()
    if async_save and no_dist:   # the background thread warns after _quiet has ended: a filter for that message
        warnings.filterwarnings("ignore", message=".*torch.distributed is disabled.*save in a single process")
    with _quiet(), _writing(temp):
        if async_save:
            group = _async_group()
            future = dcp.async_save(_clone(_to_dcp(state)), storage_writer=writer, process_group=group,
                                    no_dist=no_dist)
            return PendingSave(final, temp, sidecar, future, group)
        dcp.save(_to_dcp(state), storage_writer=writer, no_dist=no_dist)
    pending = PendingSave(final, temp, sidecar, None)
    pending.wait()
    return pending


def read_sharded(path: Path) -> tuple[dict[str, Any], dict[str, Any]]:
    """``checkpoint.json`` and the whole state of a torch_dist checkpoint directory, on any world size
    (each caller reads every shard itself: no collective).  UnreadableShards says what is wrong."""
    try:
        sidecar = json.loads((path / SIDECAR).read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        why = exc.strerror if isinstance(exc, OSError) else "not valid JSON"
        raise UnreadableShards(f"{SIDECAR} cannot be read ({why})") from None
    for name, size in dict(sidecar.get("files") or {}).items():
        try:
            have = (path / name).stat().st_size
        except OSError:
            raise UnreadableShards(f"{name} is missing") from None
        if have != size:
            raise UnreadableShards(f"{name} has {have:,} bytes, {size:,} when saved")
    state: dict[str, Any] = {}
    try:
        with _quiet(), _interrupts_held():   # a Ctrl-C inside torch's reader would read as a damaged shard
            _load_state_dict(state, storage_reader=dcp.FileSystemReader(path),
                             planner=_EmptyStateDictLoadPlanner(), no_dist=True)
    except (Exception, CheckpointException) as exc:  # noqa: BLE001 - any unreadable shard: the same problem
        exc = _unwrapped(exc)
        first = (str(exc).strip().splitlines() or [""])[0][:160]
        raise UnreadableShards(f"its shards cannot be read ({type(exc).__name__}: {first})") from None
    return sidecar, _from_dcp(state)


def remove_stale_dirs(directory: str | os.PathLike, locked: bool = False) -> list[Path]:
    """Delete the temporary directories of torch_dist saves that were killed; return them.

    A directory whose rank-0 writer is alive is kept, unless ``locked`` (the caller holds the save
    dir's lock, so every temporary directory but this process's own is a killed run's)."""
    folder = Path(directory)
    removed: list[Path] = []
    if not folder.is_dir():
        return removed
    for p in sorted(folder.iterdir()):
        m = _TEMP_DIR.match(p.name)
        if m is None or not p.is_dir():
            continue
        pid = int(m["pid"])
        if (locked and pid != os.getpid()) or writer_gone(pid, p):
            shutil.rmtree(p, ignore_errors=True)
            removed.append(p)
    return removed
