"""Writing files so that they appear only complete (every chapter; the workbook's tooling).

Every file the workbook writes — tokenizer models, ``.idx`` sidecars, blending caches, packed SFT
sets, notebooks, benchmark results, the shipped corpora — goes through :func:`atomic_open`: the
bytes go to a temporary file beside the target, which is renamed over it only when the writer
finished without an exception.  A crash, Ctrl-C or full disk leaves the old file (or none), never
half of a new one, and no temporary file behind.

>>> from pathlib import Path; import tempfile
>>> p = Path(tempfile.mkdtemp()) / "out.txt"
>>> atomic_write(p, "hello\\n")
>>> p.read_text()
'hello\\n'
"""
from __future__ import annotations

import os
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Iterator, Union

#: What every public function of the workbook accepts as a path.
PathLike = Union[str, os.PathLike]

__all__ = ["PathLike", "atomic_open", "atomic_write"]


@contextmanager
def atomic_open(path: PathLike, mode: str = "wb", *, encoding: str | None = None,
                file_mode: int | None = None) -> Iterator[IO]:
    """Open a temporary file beside ``path`` for writing; rename it to ``path`` on success.

    ``mode`` is ``"wb"`` or ``"w"`` (text, ``encoding`` defaults to UTF-8). ``file_mode`` (e.g.
    ``0o644``) sets the permission bits of the result; by default those of ``mkstemp`` (0o600)
    are widened to what a plain ``open`` would give under the current umask. The folder is created
    when missing. On any exception the temporary file is removed and the exception re-raised.
    """
    if mode not in ("wb", "w"):
        raise ValueError(f"atomic_open: mode must be 'wb' or 'w', not {mode!r}")
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        if file_mode is None:
            umask = os.umask(0)
            os.umask(umask)
            file_mode = 0o666 & ~umask
        os.chmod(tmp, file_mode)
        with os.fdopen(fd, mode, encoding=(encoding or "utf-8") if mode == "w" else None) as fh:
            yield fh
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise


def atomic_write(path: PathLike, data: bytes | str, *, file_mode: int | None = None) -> None:
    """Write ``data`` (bytes, or str as UTF-8) to ``path`` through :func:`atomic_open`."""
    with atomic_open(path, "w" if isinstance(data, str) else "wb", file_mode=file_mode) as fh:
        fh.write(data)
