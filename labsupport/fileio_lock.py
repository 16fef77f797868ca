"""One writer at a time: an exclusive lock on a file beside what a command writes (chapters 2 and 6,
the grader; docs/training.md "Locks").

``python -m labsupport preprocess`` holds ``<output prefix>.lock`` while it writes a prefix,
``python -m labsupport train`` holds ``<save dir>/.lock`` (and ``<log>.lock``) while it uses them,
the grader holds ``gradebook.lock`` in its folder.  A second run is refused with
:class:`LockHeld`, whose message names the holder (pid, host, command).

The lock is ``fcntl.flock`` on that file, which holds the holder's pid, host and command as one
JSON line (for the message only: the kernel decides who holds the lock, not the file).  The kernel
drops a flock when its process dies, however it dies (``kill -9`` included), so the lock file of a
killed run is simply taken over by the next one: no stale lock to delete by hand.  A forked child
closes its copy of the lock (the parent keeps it), so a pool worker that outlives a killed parent
never holds the parent's lock.  A released lock removes its file (``remove=True``); a run that
opened the old file just before that finds, once it holds the flock, that the path now names
another file (or none) and tries again, so two runs never both hold "the" lock.  Two takes in one
process conflict like two processes (each its own open file), unless both pass ``reentrant=True``:
then the second joins the first (a count), so a function that locks a prefix may call another
that locks it too.

>>> import tempfile, os
>>> path = os.path.join(tempfile.mkdtemp(), "x.lock")
>>> with hold_lock(path, "--save-dir x") as held:
...     holder_of(path)["pid"] == os.getpid()
True
>>> os.path.exists(path)
False
"""
from __future__ import annotations

import fcntl
import json
import os
import socket
import sys
import time
import weakref
from pathlib import Path
from typing import Any

from labsupport.fileio import PathLike

__all__ = ["LockHeld", "HeldLock", "hold_lock", "holder_of"]

#: the ``reentrant=True`` locks this process holds: absolute path → HeldLock
_HELD: dict[str, "HeldLock"] = {}
#: every lock this process holds (a forked child drops its copies: see :func:`_forget_in_child`)
_ALL: "weakref.WeakSet[HeldLock]" = weakref.WeakSet()


def _forget_in_child() -> None:
    """After ``fork``: close the child's copies of the parent's lock files.  A flock belongs to the
    open file, which a forked child shares: a worker that outlived a killed parent (a pool
    worker) would otherwise keep the parent's lock held.  The parent still holds it."""
    for lock in list(_ALL):
        if lock.fd >= 0:
            try:
                os.close(lock.fd)
            except OSError:
                pass
            lock.fd = -1
    _HELD.clear()


os.register_at_fork(after_in_child=_forget_in_child)


class LockHeld(RuntimeError):
    """Another live process holds the lock; ``holder`` is what it wrote in the lock file."""

    def __init__(self, path: Path, what: str, holder: dict[str, Any] | None) -> None:
        self.path, self.what, self.holder = path, what, holder or {}
        h = self.holder
        who = f"pid {h.get('pid', '?')}" + (f" on {h['host']}" if h.get("host") else "")
        command = str(h.get("command") or "")
        if command:
            who += f": {command[:120]}{'…' if len(command) > 120 else ''}"
        super().__init__(f"{what} is in use by another run ({who}; lock {path})")


def _describe() -> str:
    return json.dumps({"pid": os.getpid(), "host": socket.gethostname(), "command": " ".join(sys.argv),
                       "since": time.strftime("%Y-%m-%dT%H:%M:%S%z")}) + "\n"


def holder_of(path: PathLike) -> dict[str, Any] | None:
    """What the holder of the lock file ``path`` wrote in it (``None``: no file or unreadable)."""
    try:
        text = Path(path).read_text(encoding="utf-8", errors="replace").strip()
        value = json.loads(text) if text.startswith("{") else {"pid": int(text)}
    except (OSError, ValueError):
        return None
    return value if isinstance(value, dict) else None


class HeldLock:
    """A lock this process holds; :meth:`close` (or leaving the ``with`` block) releases it."""

    def __init__(self, path: Path, fd: int, remove: bool) -> None:
        self.path, self.fd, self.remove, self.count = path, fd, remove, 1

    def close(self) -> None:
        """Release once; the last release unlinks the file (``remove``) and drops the flock."""
        if self.fd < 0:
            return
        self.count -= 1
        if self.count > 0:
            return
        if _HELD.get(os.fspath(self.path)) is self:
            del _HELD[os.fspath(self.path)]
        if self.remove:
            try:
                os.unlink(self.path)      # while still holding it: a waiter then re-checks the path
            except OSError:
                pass
        os.close(self.fd)
        self.fd = -1

    release = close

    def __enter__(self) -> "HeldLock":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def hold_lock(path: PathLike, what: str, *, wait: bool = False, remove: bool = True,
              reentrant: bool = False) -> HeldLock:
    """Take the exclusive lock ``path`` (created, its folder too), or raise :class:`LockHeld`.

    ``what`` names the locked thing in the message (e.g. ``"--save-dir work/runs/a"``).
    ``wait``: block until the holder releases it instead of raising.  ``remove``: unlink the file
    on release (False: it stays, e.g. a lock held until the process ends).  OSError when the file
    cannot be created (a read-only folder), naming it.  ``reentrant``: join a ``reentrant`` lock
    this process already holds on ``path``."""
    path = Path(os.path.abspath(os.fspath(path)))
    key = os.fspath(path)
    held = _HELD.get(key) if reentrant else None
    if held is not None and held.fd >= 0:
        held.count += 1
        return held
    path.parent.mkdir(parents=True, exist_ok=True)
    while True:
        fd = os.open(key, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | (0 if wait else fcntl.LOCK_NB))
        except BlockingIOError:
            os.close(fd)
            raise LockHeld(path, what, holder_of(path)) from None
        except BaseException:
            os.close(fd)
            raise
        try:
            same = os.stat(key).st_ino == os.fstat(fd).st_ino
        except FileNotFoundError:   # the holder released it and removed the file meanwhile
            same = False
        if same:
            break
        os.close(fd)                # locked a file that is no longer the lock: take the new one
    os.ftruncate(fd, 0)
    os.write(fd, _describe().encode())
    lock = HeldLock(path, fd, remove)
    _ALL.add(lock)
    if reentrant:
        _HELD[key] = lock
    return lock
