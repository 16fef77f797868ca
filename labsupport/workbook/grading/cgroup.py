"""Per-submission memory and process limits with a control group (the grader's side; workbook tooling).

One cgroup per student process tree: every process the student's code starts is charged to it, so
three children of 2 GiB each hit the same memory limit as one, and a fork bomb hits one process
count.  cgroup v2 (``memory.max``, ``pids.max``, ``cgroup.kill``) is used where the grader may create
a child of its own cgroup with both controllers; otherwise cgroup v1's ``memory`` and ``pids``
hierarchies (``memory.limit_in_bytes``, ``memory.memsw.limit_in_bytes``, ``pids.max``).  Where
neither is writable (an ordinary user on most machines) :func:`available` says so and the run's
header names what is not enforced.
"""
from __future__ import annotations

import functools
import itertools
import os
import signal
import time
from pathlib import Path

ROOT = Path("/sys/fs/cgroup")
_COUNTER = itertools.count()


def _own(controller: str) -> str | None:
    """This process's cgroup path in ``controller``'s v1 hierarchy ("" for v2 with ``controller=""``)."""
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        _, names, path = line.split(":", 2)
        if controller in names.split(",") or (controller == "" and names == ""):
            return path
    return None


def _try_create(parent: Path, files: tuple[str, ...]) -> Path | None:
    probe = parent / f"labsupport-probe-{os.getpid()}"
    try:
        probe.mkdir()
    except OSError:
        return None
    try:
        return parent if all((probe / f).exists() for f in files) else None
    finally:
        try:
            probe.rmdir()
        except OSError:
            pass


@functools.lru_cache(maxsize=None)
def available() -> dict[str, str]:
    """``{"memory": parent_dir, "pids": parent_dir}`` for the controllers this process can use."""
    found: dict[str, str] = {}
    v2 = ROOT / "cgroup.controllers"
    if v2.exists():
        own = _own("")
        if own is not None:
            parent = ROOT / own.lstrip("/")
            listed = parent / "cgroup.controllers"
            controllers = listed.read_text().split() if listed.exists() else []
            if "memory" in controllers and "pids" in controllers:
                try:
                    (parent / "cgroup.subtree_control").write_text("+memory +pids")
                except OSError:
                    pass
                if _try_create(parent, ("memory.max", "pids.max")):
                    return {"memory": str(parent), "pids": str(parent), "version": "2"}
    for controller, probe in (("memory", ("memory.limit_in_bytes",)), ("pids", ("pids.max",))):
        own = _own(controller)
        if own is None:
            continue
        parent = ROOT / controller / own.lstrip("/")
        if _try_create(parent, probe):
            found[controller] = str(parent)
    if found:
        found["version"] = "1"
    return found


class Group:
    """The cgroup(s) of one student process tree: ``join`` from the child before exec, ``kill`` after."""

    def __init__(self, memory_bytes: int, max_procs: int):
        self.dirs: list[Path] = []
        info = available()
        name = f"labsupport-grade-{os.getpid()}-{next(_COUNTER)}"
        if info.get("version") == "2":
            d = Path(info["memory"]) / name
            d.mkdir()
            self.dirs.append(d)
            (d / "memory.max").write_text(str(memory_bytes))
            if (d / "memory.swap.max").exists():
                (d / "memory.swap.max").write_text("0")
            (d / "pids.max").write_text(str(max_procs))
            self.memory = self.pids = True
            return
        self.memory = self.pids = False
        if "memory" in info:
            d = Path(info["memory"]) / name
            d.mkdir()
            self.dirs.append(d)
            (d / "memory.limit_in_bytes").write_text(str(memory_bytes))
            try:  # no swapping around the limit
                (d / "memory.memsw.limit_in_bytes").write_text(str(memory_bytes))
            except OSError:
                pass
            self.memory = True
        if "pids" in info:
            d = Path(info["pids"]) / name
            d.mkdir()
            self.dirs.append(d)
            (d / "pids.max").write_text(str(max_procs))
            self.pids = True

    def join(self) -> None:
        """Move the calling process into the group (called in the child, before exec)."""
        for d in self.dirs:
            with open(d / "cgroup.procs", "w") as fh:
                fh.write(str(os.getpid()))

    def peak_bytes(self) -> int | None:
        for d in self.dirs:
            for name in ("memory.peak", "memory.max_usage_in_bytes"):
                try:
                    return int((d / name).read_text())
                except (OSError, ValueError):
                    continue
        return None

    def oom_kills(self) -> int:
        """How many of the group's processes the kernel killed at the memory limit."""
        for d in self.dirs:
            for name in ("memory.events", "memory.oom_control"):
                try:
                    for line in (d / name).read_text().splitlines():
                        key, _, value = line.partition(" ")
                        if key == "oom_kill":
                            return int(value)
                except (OSError, ValueError):
                    continue
        return 0

    def kill(self) -> None:
        """SIGKILL every process left in the group, then remove it."""
        _kill_and_remove(self.dirs)
        self.dirs = []


def is_running(pid: int) -> bool:
    """Whether a process ``pid`` exists (ours or somebody else's)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:   # it exists, and belongs to somebody else
        return True
    return True


def owner_pid(name: str) -> int | None:
    """The grader's pid in a name this module or the grader gave (``labsupport-grade-<pid>-…``)."""
    parts = name.split("-")
    if name.startswith("labsupport-grade-") and len(parts) > 3 and parts[2].isdigit():
        return int(parts[2])
    return None


def sweep() -> list[str]:
    """Remove the groups a grader that was killed (SIGKILL, OOM) left behind: those named for a
    process that no longer runs, their processes killed first.  Returns what was removed."""
    info = available()
    parents = {Path(info[k]) for k in ("memory", "pids") if k in info}
    stale = [d for parent in parents for d in sorted(parent.glob("labsupport-grade-*"))
             if d.is_dir() and (pid := owner_pid(d.name)) is not None and not is_running(pid)]
    _kill_and_remove(stale)
    return [str(d) for d in stale if not d.exists()]


def _kill_and_remove(dirs: list[Path]) -> None:
    """SIGKILL every process in each group (``cgroup.kill`` where v2 has it), then remove the group."""
    for d in dirs:
        if (d / "cgroup.kill").exists():
            try:
                (d / "cgroup.kill").write_text("1")
            except OSError:
                pass
    for d in dirs:
        for _ in range(200):
            try:
                pids = [int(p) for p in (d / "cgroup.procs").read_text().split()]
            except OSError:
                break
            if not pids:
                break
            for pid in pids:
                try:
                    os.kill(pid, signal.SIGKILL)
                except OSError:
                    pass
            time.sleep(0.01)
        try:
            d.rmdir()
        except OSError:
            pass
