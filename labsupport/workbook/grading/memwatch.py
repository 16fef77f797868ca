"""A submission's memory across its processes where no memory cgroup bounds it (grading, every chapter).

Without a writable cgroup each process has an address-space limit of ``--memory-mb``, so three children
of 700 MiB each pass a 1536 MiB limit together.  While it waits for a reply the grader adds up the
proportional set size (``Pss`` of ``/proc/<pid>/smaps_rollup``: shared pages split between the processes
that map them, so a fork is not counted twice) of every process that descends from the student's process
or is in its session, and kills the submission when the sum passes the limit (:class:`MemoryWatch`).
It samples: a submission can pass the limit for up to one interval before it is killed.
"""
from __future__ import annotations

import os
import time

from labsupport.fileio import process_stat

__all__ = ["submission_processes", "pss_bytes", "MemoryWatch"]


def submission_processes(root: int) -> list[int]:
    """``root`` and every process that descends from it or is in its session (pids, host view)."""
    children: dict[int, list[int]] = {}
    members, alive = {root}, set()
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        fields = process_stat(int(entry))
        if fields is None or len(fields) < 5:
            continue
        pid, ppid, sid = int(entry), int(fields[1]), int(fields[4])
        alive.add(pid)
        children.setdefault(ppid, []).append(pid)
        if sid == root:
            members.add(pid)
    todo = list(members)
    while todo:                          # descendants of every member
        for child in children.get(todo.pop(), ()):
            if child not in members:
                members.add(child)
                todo.append(child)
    return sorted(members & alive)


def pss_bytes(pid: int) -> int:
    """The proportional set size of ``pid`` in bytes (0 when it is gone or unreadable)."""
    try:
        with open(f"/proc/{pid}/smaps_rollup", "rb") as fh:
            for line in fh:
                if line.startswith(b"Pss:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return 0


class MemoryWatch:
    """``over()`` says when the processes of the submission rooted at ``root`` hold more than ``limit_bytes``;
    it reads /proc at most once per ``interval_s``."""

    def __init__(self, root: int, limit_bytes: int, interval_s: float = 0.25):
        self.root, self.limit, self.interval = root, limit_bytes, interval_s
        self._next = 0.0
        self.peak = 0

    def over(self) -> bool:
        now = time.monotonic()
        if now < self._next:
            return False
        self._next = now + self.interval
        held = sum(pss_bytes(p) for p in submission_processes(self.root))
        self.peak = max(self.peak, held)
        return held > self.limit
