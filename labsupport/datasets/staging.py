"""All-or-nothing outputs for preprocessing — chapter 2 (``python -m labsupport preprocess``).

A run writes every key's ``.bin``/``.idx``/``.json`` into a staging folder beside the output
prefix, ``<folder>/.<prefix name>.staging-<pid>-<hex>/``.  Only when all of them are complete does
it write ``COMMIT`` there (a list of moves, fsynced) and move the files to their final names:
first every old ``.idx`` that will change is removed (a reader then finds no dataset, never an
old ``.idx`` beside a new ``.bin``), then per key ``.bin``, ``.json`` and, last, ``.idx``.  So:

* a fault before ``COMMIT`` leaves the existing dataset untouched, and the next run (or
  :func:`recover`) deletes the staging folder;
* a fault after it (a kill between two renames) is finished by the next run: ``COMMIT`` says the
  new files are complete, so the moves are completed ("rolled forward").  A damaged ``COMMIT``
  still says so: the moves are rebuilt from the files in the folder.

Ctrl-C is held during the moves, so an interrupt lands before or after them; one that arrived
during the moves raises :class:`InterruptedAfterCommit` once they are done, so the command says
the outputs are complete instead of "no output was written".  For tests,
``LABSUPPORT_FAULT=preprocess-kill:after=N`` kills the process (SIGKILL) before step N of the
commit (step 0 writes ``COMMIT``; then the removals and renames), and
``LABSUPPORT_FAULT=preprocess-int:after=N`` sends it a Ctrl-C (SIGINT) there instead.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import signal
import uuid
from pathlib import Path
from typing import Sequence

from labsupport.fileio import PathLike, atomic_write, fsync_folder, process_alive

__all__ = ["new_staging", "commit", "recover", "discard", "staging_folders", "InterruptedAfterCommit"]


class InterruptedAfterCommit(KeyboardInterrupt):
    """Ctrl-C came while the finished outputs were being moved into place: they are complete."""

    def __init__(self, finals: Sequence[str]) -> None:
        self.finals = list(finals)
        self.message = ("interrupted (Ctrl-C) after the outputs were complete: "
                        f"{len(self.finals)} dataset(s) written in full")
        super().__init__(self.message)

_STAGING = re.compile(r"^\.(?P<name>.+)\.staging-(?P<pid>\d+)-[0-9a-f]{8}$")
EXTENSIONS = (".bin", ".json", ".idx")   # the order of the renames: .idx last


def new_staging(output_prefix: PathLike) -> Path:
    """Create and return the staging folder for ``output_prefix`` (beside it, same file system)."""
    prefix = Path(output_prefix)
    prefix.parent.mkdir(parents=True, exist_ok=True)
    folder = prefix.parent / f".{prefix.name}.staging-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    folder.mkdir()
    return folder


def _fault_point(done: int) -> None:
    spec = os.environ.get("LABSUPPORT_FAULT", "")
    for kind, sig in (("preprocess-kill", signal.SIGKILL), ("preprocess-int", signal.SIGINT)):
        if spec.startswith(f"{kind}:after=") and int(spec.split("=", 1)[1]) == done:
            os.kill(os.getpid(), sig)


def _same_bytes(a: Path, b: Path) -> bool:
    try:
        return a.stat().st_size == b.stat().st_size and a.read_bytes() == b.read_bytes()
    except OSError:
        return False


def _moves(folder: Path, finals: Sequence[str]) -> list[tuple[str, str]]:
    return [(str(folder / (Path(f).name + ext)), f + ext) for f in finals for ext in EXTENSIONS]


def _apply(folder: Path, moves: list[tuple[str, str]], done: int = 1) -> None:
    """The moves of a committed staging folder, idempotent (a rerun skips what is done)."""
    for src, dst in moves:
        if (dst.endswith(".idx") and os.path.exists(src) and os.path.exists(dst)
                and not _same_bytes(Path(src), Path(dst))):
            _fault_point(done)
            os.unlink(dst)
            done += 1
    fsync_folder(Path(moves[0][1]).parent)
    for src, dst in moves:
        if os.path.exists(src):
            _fault_point(done)
            os.replace(src, dst)
            done += 1
    fsync_folder(Path(moves[0][1]).parent)
    shutil.rmtree(folder, ignore_errors=True)


def commit(folder: Path, final_prefixes: Sequence[str]) -> None:
    """Move the complete outputs of ``folder`` to ``final_prefixes`` (each ``<p>.{bin,json,idx}``
    is in ``folder`` under ``<name of p>.ext``), with SIGINT held until the moves are done."""
    moves = _moves(folder, [os.fspath(p) for p in final_prefixes])
    missing = [src for src, _ in moves if not os.path.isfile(src)]
    if missing:
        raise FileNotFoundError(f"staging folder {folder} lacks {', '.join(Path(m).name for m in missing)}")
    # Ctrl-C is recorded, not raised, until the moves are done.  A Python-level handler, not a
    # blocked signal mask: a process-directed SIGINT goes to any thread that does not block it, and
    # CPython then raises KeyboardInterrupt in the main thread all the same.
    interrupts: list[int] = []
    try:
        previous = signal.signal(signal.SIGINT, lambda signum, frame: interrupts.append(signum))
    except ValueError:          # not the main thread: signals cannot be handled here anyway
        previous = None
    try:
        _fault_point(0)
        atomic_write(folder / "COMMIT", json.dumps({"moves": moves}) + "\n")
        _apply(folder, moves)
    finally:
        if previous is not None:
            signal.signal(signal.SIGINT, previous)
    if interrupts:
        raise InterruptedAfterCommit([os.fspath(p) for p in final_prefixes])


def discard(folder: Path) -> None:
    """Delete an uncommitted staging folder (the run failed; the old outputs stay as they were)."""
    if not (folder / "COMMIT").exists():
        shutil.rmtree(folder, ignore_errors=True)


def staging_folders(output_prefix: PathLike) -> list[Path]:
    """The staging folders of ``output_prefix`` left in its folder."""
    prefix = Path(output_prefix)
    if not prefix.parent.is_dir():
        return []
    return sorted(p for p in prefix.parent.iterdir()
                  if (m := _STAGING.match(p.name)) and m["name"] == prefix.name and p.is_dir())


def _committed_moves(folder: Path, output_prefix: PathLike) -> tuple[list[tuple[str, str]], bool]:
    """The moves ``COMMIT`` lists, and whether it was readable.  A damaged ``COMMIT`` (a flipped
    bit, garbage) is damage, not a crash: the moves are rebuilt from the files left in the
    folder (each goes to its own name beside the prefix), since ``COMMIT`` is written only once
    every file there is complete."""
    marker = folder / "COMMIT"
    try:
        moves = [(str(a), str(b)) for a, b in json.loads(marker.read_text(encoding="utf-8"))["moves"]]
        if moves and all(Path(a).resolve().parent == folder.resolve() for a, _ in moves):
            return moves, True
    except (OSError, UnicodeDecodeError, ValueError, KeyError, TypeError):
        pass
    prefix = Path(output_prefix)
    names = re.compile(re.escape(prefix.name) + r"_.+_document(" + "|".join(map(re.escape, EXTENSIONS)) + ")$")
    stems = sorted({p.name[: -len(p.suffix)] for p in folder.iterdir() if names.fullmatch(p.name)})
    moves = [(src, dst) for src, dst in _moves(folder, [os.fspath(prefix.parent / s) for s in stems])
             if os.path.exists(src)]
    return moves, False


def recover(output_prefix: PathLike, locked: bool = False) -> list[str]:
    """Finish or delete what killed runs left for ``output_prefix``; returns one note per folder.

    A folder whose process still runs is left alone (another run writing the same prefix) —
    unless ``locked``: the caller holds the prefix's lock, so none is another run's, whatever
    process has its pid now."""
    notes = []
    for folder in staging_folders(output_prefix):
        pid = int(_STAGING.match(folder.name)["pid"])
        if pid != os.getpid() and not locked and process_alive(pid):
            continue
        marker = folder / "COMMIT"
        if marker.is_file():
            moves, readable = _committed_moves(folder, output_prefix)
            if moves:
                _apply(folder, moves)
            else:
                shutil.rmtree(folder, ignore_errors=True)
            notes.append(f"completed the outputs of an interrupted run ({folder.name} was committed"
                         + ("" if readable else "; its COMMIT was damaged (or named other paths), so the moves were "
                            "rebuilt from the files in it") + ")")
        else:
            shutil.rmtree(folder, ignore_errors=True)
            notes.append(f"removed the unfinished outputs of an interrupted run ({folder.name})")
    return notes
