"""Writing files so that they appear only complete (every chapter; the workbook's tooling).

Every file the workbook writes — tokenizer models, ``.idx`` sidecars, blending caches, packed SFT
sets, notebooks, benchmark results, the shipped corpora — goes through :func:`atomic_open`: the
bytes go to a temporary file beside the target, which is renamed over it only when the writer
finished without an exception.  A crash, Ctrl-C or full disk leaves the old file (or none), never
half of a new one, and no temporary file behind.  With ``durable=True`` (the default) the file is
fsynced before the rename and its folder after it, so a host crash cannot leave an empty or
partial file under the final name either (the POSIX recipe; ``torch.distributed.checkpoint``'s
file writer does the same).  A process killed mid-write leaves ``.<name>.<pid>-<random>.tmp``;
:func:`remove_stale_temporaries` deletes those whose writer is gone (its pid dead, or reused by a
process that started after the file was written).

**One writer at a time** (:func:`hold_lock`; chapters 2 and 6, the grader; docs/training.md
"One run at a time: locks"). ``python -m labsupport preprocess`` holds ``<output prefix>.lock``
while it writes a prefix, ``python -m labsupport train`` holds ``<save dir>/.lock`` (and
``<log>.lock``) while it uses them, the grader holds ``gradebook.lock`` in its folder.  A second run is refused with
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

>>> from pathlib import Path; import tempfile
>>> p = Path(tempfile.mkdtemp()) / "out.txt"
>>> atomic_write(p, "hello\\n")
>>> p.read_text()
'hello\\n'
"""
from __future__ import annotations

import fcntl
import json
import os
import re
import socket
import sys
import tempfile
import time
import weakref
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any, Iterator, Union

#: What every public function of the workbook accepts as a path.
PathLike = Union[str, os.PathLike]

__all__ = ["PathLike", "atomic_open", "atomic_write", "fsync_folder", "remove_stale_temporaries", "process_alive",
           "process_stat", "process_started_after", "writer_gone", "LockHeld", "HeldLock", "hold_lock", "holder_of"]


@contextmanager
def atomic_open(path: PathLike, mode: str = "wb", *, encoding: str | None = None,
                file_mode: int | None = None, durable: bool = True) -> Iterator[IO]:
    """Open a temporary file beside ``path`` for writing; rename it to ``path`` on success.

    ``mode`` is ``"wb"`` or ``"w"`` (text, ``encoding`` defaults to UTF-8). ``file_mode`` (e.g.
    ``0o644``) sets the permission bits of the result; by default those of ``mkstemp`` (0o600)
    are widened to what a plain ``open`` would give under the current umask. The folder is created
    when missing. On any exception the temporary file is removed and the exception re-raised.
    ``durable``: fsync the file before the rename and the folder after it.
    """
    if mode not in ("wb", "w"):
        raise ValueError(f"atomic_open: mode must be 'wb' or 'w', not {mode!r}")
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.{os.getpid()}-", suffix=".tmp", dir=path.parent)
    try:
        if file_mode is None:
            umask = os.umask(0)
            os.umask(umask)
            file_mode = 0o666 & ~umask
        os.chmod(tmp, file_mode)
        with os.fdopen(fd, mode, encoding=(encoding or "utf-8") if mode == "w" else None) as fh:
            yield fh
            if durable:
                fh.flush()
                os.fsync(fh.fileno())
        os.replace(tmp, path)
        if durable:
            fsync_folder(path.parent)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise


def atomic_write(path: PathLike, data: bytes | str, *, file_mode: int | None = None,
                 durable: bool = True) -> None:
    """Write ``data`` (bytes, or str as UTF-8) to ``path`` through :func:`atomic_open`."""
    with atomic_open(path, "w" if isinstance(data, str) else "wb", file_mode=file_mode, durable=durable) as fh:
        fh.write(data)


def fsync_folder(folder: PathLike) -> None:
    """fsync a directory, so that the renames and unlinks in it survive a host crash."""
    fd = os.open(os.fspath(folder), os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def process_alive(pid: int) -> bool:
    """True while process ``pid`` exists (on this host)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # exists, owned by someone else
        return True
    return True


_TEMP = re.compile(r"^\.(?P<name>.+)\.(?P<pid>\d+)-[^.]+\.tmp$")


def process_stat(pid: int) -> list[bytes] | None:
    """The fields of ``/proc/<pid>/stat`` after the command name (``[0]`` the state, e.g. ``b"T"``
    stopped; ``[19]`` the start time in clock ticks after boot); None when unknown (no such process,
    no ``/proc``)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            return fh.read().rsplit(b")", 1)[1].split()
    except (OSError, IndexError):
        return None


def process_started_after(pid: int, when: float) -> bool:
    """True when process ``pid`` started after the time ``when`` (seconds since the epoch), so it
    cannot have written a file last modified then: its pid was reused.  False when unknown (no
    ``/proc``)."""
    fields = process_stat(pid)
    if fields is None:
        return False
    try:
        with open("/proc/stat", "rb") as fh:
            boot = next(int(x.split()[1]) for x in fh if x.startswith(b"btime "))
        started = boot + int(fields[19]) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError, StopIteration):
        return False
    return started > when + 1.0     # btime has whole seconds


def writer_gone(pid: int, path: PathLike) -> bool:
    """The process ``pid`` that named the temporary ``path`` is gone: no such process, or one that
    started after ``path`` was last written (an unrelated process that got the pid again)."""
    if pid == os.getpid():
        return False
    if not process_alive(pid):
        return True
    try:
        return process_started_after(pid, os.stat(path).st_mtime)
    except OSError:
        return False


def remove_stale_temporaries(folder: PathLike, name: re.Pattern | None = None, *,
                             locked: bool = False) -> list[Path]:
    """Delete ``folder/.<name>.<pid>-<random>.tmp`` files (left by :func:`atomic_open` in a process
    killed mid-write) whose writer is gone (:func:`writer_gone`: the pid is dead, or belongs to a
    process started after the file was written); ``name`` (a regex) limits it to some targets.
    Files of a live writer are kept, unless ``locked``: the caller holds the lock of what is
    written there (:func:`hold_lock`), so every temporary but its own is a killed
    run's.  Returns the removed paths."""
    folder = Path(folder)
    removed: list[Path] = []
    if not folder.is_dir():
        return removed
    for p in sorted(folder.iterdir()):
        m = _TEMP.match(p.name)
        if m is None or (name is not None and not name.fullmatch(m["name"])):
            continue
        pid = int(m["pid"])
        if (locked and pid != os.getpid()) or writer_gone(pid, p):
            p.unlink(missing_ok=True)
            removed.append(p)
    return removed


# --------------------------------------------------------------------------- one writer at a time
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
