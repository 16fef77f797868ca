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

>>> from pathlib import Path; import tempfile
>>> p = Path(tempfile.mkdtemp()) / "out.txt"
>>> atomic_write(p, "hello\\n")
>>> p.read_text()
'hello\\n'
"""
from __future__ import annotations

import os
import re
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Iterator, Union

#: What every public function of the workbook accepts as a path.
PathLike = Union[str, os.PathLike]

__all__ = ["PathLike", "atomic_open", "atomic_write", "fsync_folder", "remove_stale_temporaries", "process_alive",
           "process_started_after", "writer_gone"]


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


def process_started_after(pid: int, when: float) -> bool:
    """True when process ``pid`` started after the time ``when`` (seconds since the epoch), so it
    cannot have written a file last modified then: its pid was reused.  False when unknown (no
    ``/proc``)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            fields = fh.read().rsplit(b")", 1)[1].split()
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
    written there (:mod:`labsupport.fileio_lock`), so every temporary but its own is a killed
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
