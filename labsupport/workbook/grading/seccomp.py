"""A seccomp filter that refuses the kinds of memory a per-process limit does not see (the grader's
sandbox, every chapter's exercises; used only where no memory cgroup bounds the submission).

Without a cgroup the student's memory is bounded per process by ``RLIMIT_AS``.  Memory held by a
``memfd`` that is written but not mapped, a SysV shared-memory segment that is detached, or SysV
message queues is in no process's address space, so that limit never sees it (2.3 GB were held under
``--memory-mb 1024``).  This filter makes ``memfd_create``, ``memfd_secret``, ``shmget`` and ``msgget``
fail with ``EPERM`` (Python's ``os.memfd_create`` raises ``PermissionError``), and refuses the
32-bit and x32 system call tables outright (the same calls exist there under other numbers).
POSIX shared memory (``/dev/shm``) and files are bounded by the sandbox's size-limited tmpfs folders.

It is classic BPF, built here (no libseccomp), and handed to bubblewrap with ``--seccomp FD``.
"""
from __future__ import annotations

import os
import platform
import struct

# struct seccomp_data: int nr; __u32 arch; ...
_NR, _ARCH = 0, 4
_LD_W_ABS, _JEQ_K, _JGE_K, _RET_K = 0x20, 0x15, 0x35, 0x06
_RET_ALLOW, _RET_ERRNO = 0x7FFF0000, 0x00050000
_EPERM = 1
_X32 = 0x40000000

#: machine → (audit arch, {refused call: number})
TABLES = {
    "x86_64": (0xC000003E, {"memfd_create": 319, "memfd_secret": 447, "shmget": 29, "msgget": 68}),
    "aarch64": (0xC00000B7, {"memfd_create": 279, "memfd_secret": 447, "shmget": 194, "msgget": 186}),
}


def supported(machine: str | None = None) -> bool:
    """Whether a filter can be built for this machine's system call table."""
    return (machine or platform.machine()) in TABLES


def refused_calls(machine: str | None = None) -> list[str]:
    """The system calls the filter refuses on this machine (empty where it has no table)."""
    return sorted(TABLES.get(machine or platform.machine(), (0, {}))[1])


def program(machine: str | None = None) -> bytes:
    """The filter as ``struct sock_filter[]`` bytes (what ``bwrap --seccomp`` reads)."""
    machine = machine or platform.machine()
    if machine not in TABLES:
        raise ValueError(f"error: seccomp filter for {machine!r}: only {', '.join(TABLES)} have a system call table")
    arch, calls = TABLES[machine]
    numbers = sorted(calls.values())
    # layout: 0 load arch; 1 arch?; 2 load nr; [3 x32?]; one test per call; allow; deny
    checks = ([(_JGE_K, _X32)] if machine == "x86_64" else []) + [(_JEQ_K, nr) for nr in numbers]
    code: list[tuple[int, int, int, int]] = [(_LD_W_ABS, 0, 0, _ARCH)]
    deny_at = 3 + len(checks) + 1          # index of the deny instruction
    code.append((_JEQ_K, 0, deny_at - 2, arch))   # another architecture's table: refused
    code.append((_LD_W_ABS, 0, 0, _NR))
    for i, (op, k) in enumerate(checks):
        here = 3 + i
        code.append((op, deny_at - here - 1, 0, k))
    code.append((_RET_K, 0, 0, _RET_ALLOW))
    code.append((_RET_K, 0, 0, _RET_ERRNO | _EPERM))
    return b"".join(struct.pack("=HBBI", *ins) for ins in code)


def pipe_fd(machine: str | None = None) -> int:
    """A readable file descriptor holding :func:`program` (inheritable; the caller closes it)."""
    data = program(machine)
    r, w = os.pipe()
    try:
        os.write(w, data)   # a few hundred bytes: well within a pipe's buffer
    finally:
        os.close(w)
    return r
