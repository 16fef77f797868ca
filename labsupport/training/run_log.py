"""The training log holds every step once — chapter 6 (``--log``; docs/training.md "The log").

:func:`reconcile_log` is called once per run, after every check that could refuse the run has
passed and just before step ``start + 1``, with the step the run starts from (the checkpoint's,
or 0):

* the records of steps after ``start`` are dropped: those steps run again now (a validation line,
  ``{"val_step": n, …}``, counts as step ``n``: the validation after step ``n`` runs again too);
* a run that starts at step 0 (no checkpoint: a fresh run, or ``--resume-if-exists`` that found
  none, e.g. a job killed before its first save) starts an empty log; an old log that held records
  is kept aside as ``<log>.old`` (replacing an earlier one), and one line says so;
* a line that is not a JSON record — a half-written last line of a killed run, or bytes that are
  not UTF-8 — is dropped, so the next record is never glued onto it.

The file is rewritten atomically (:func:`labsupport.fileio.atomic_write`) and only when something
changes.  :func:`read_log` reads a log back as (training records, validation records): a reader of
per-step records takes the first, as :func:`training_records` does for records already parsed.
"""
from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Iterable, TextIO

from labsupport.fileio import PathLike, atomic_write

__all__ = ["reconcile_log", "aside_name", "read_log", "training_records", "validation_records", "VAL_KEY"]

#: the key of a validation line (labsupport/training/validation.py; kept here so that reading a log needs no torch)
VAL_KEY = "val_step"


def aside_name(log_file: PathLike) -> Path:
    """Where a run starting at step 0 keeps the old log: ``<log>.old``."""
    path = Path(log_file)
    return path.with_name(path.name + ".old")


def _record_step(line: bytes) -> int | None:
    """The step of a training line (``step``) or of a validation line (``val_step``); None: not a record."""
    try:
        value = json.loads(line.decode("utf-8"))
        if not isinstance(value, dict):
            return None
        return int(value[VAL_KEY] if VAL_KEY in value and "step" not in value else value["step"])
    except (UnicodeDecodeError, ValueError, KeyError, TypeError):
        return None


def training_records(records: Iterable[Any]) -> list[dict[str, Any]]:
    """The training lines' records of a log (validation lines, which have ``val_step`` and no
    ``step``, left out): what every reader of per-step records wants."""
    return [r for r in records if isinstance(r, dict) and "step" in r]


def validation_records(records: Iterable[Any]) -> list[dict[str, Any]]:
    """The validation lines' records (:mod:`~labsupport.training.validation`), in log order."""
    return [r for r in records if isinstance(r, dict) and VAL_KEY in r and "step" not in r]


def read_log(log_file: PathLike) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """A run log as (training records, validation records); lines that are not JSON objects are skipped."""
    records = []
    for line in Path(log_file).read_bytes().split(b"\n"):
        try:
            records.append(json.loads(line.decode("utf-8")))
        except (UnicodeDecodeError, ValueError):
            continue
    return training_records(records), validation_records(records)


def reconcile_log(log_file: PathLike, start: int, warn: TextIO | None = None) -> dict[str, Any]:
    """Make ``log_file`` hold the records (training and validation lines) of steps 1..``start`` only
    (see the module docstring).

    Returns ``{"dropped": n records of later steps, "bad": n lines that were not records,
    "aside": path or None}``; prints one line to ``warn`` per thing it did."""
    path = Path(log_file)
    done: dict[str, Any] = {"dropped": 0, "bad": 0, "aside": None}
    if not path.is_file():
        return done
    data = path.read_bytes()
    lines = data.split(b"\n")
    if lines and lines[-1] == b"":
        lines.pop()
    elif lines:
        lines[-1] = b"\0"            # no newline at the end: a torn last line, never a record
    steps = [_record_step(x) for x in lines]
    if start == 0:
        if any(s is not None for s in steps):
            aside = aside_name(path)
            os.replace(path, aside)
            done["aside"] = aside
            done["dropped"] = sum(s is not None for s in steps)
            if warn is not None:
                print(f"train: {path} held {done['dropped']} record(s) of an earlier run that left no checkpoint to "
                      f"continue from; moved it to {aside.name}, this run starts an empty log", file=warn)
            return done
        if data:
            done["bad"] = len(lines)
            atomic_write(path, b"")
        return done
    kept = [x for x, s in zip(lines, steps) if s is not None and s <= start]
    done["dropped"] = sum(s is not None and s > start for s in steps)
    done["bad"] = sum(s is None for s in steps)
    if done["dropped"] or done["bad"]:
        atomic_write(path, b"".join(x + b"\n" for x in kept))
    if warn is not None and done["bad"]:
        print(f"train: {path}: dropped {done['bad']} line(s) that were not JSON records (a half-written last "
              "line of a killed run, or damage)", file=warn)
    return done
