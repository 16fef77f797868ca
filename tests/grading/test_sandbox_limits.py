"""The sandbox's limits against a hostile student (issue #31): as root the student runs as an
unprivileged uid outside its namespace too, and memory that no address space holds (memfd, SysV
shared memory) is bounded with a cgroup and refused without one."""
from __future__ import annotations

import os
import struct

import pytest

from labsupport.workbook.grading import cgroup, sandbox, seccomp

pytestmark = pytest.mark.skipif(sandbox.sandbox_mode() != "bwrap", reason="needs bubblewrap")


def _uids(session: int) -> set[str]:
    """The real, effective, saved and file-system uids (as the host sees them) of a session's processes."""
    found = set()
    for entry in os.listdir("/proc"):
        try:
            if entry.isdigit() and os.getsid(int(entry)) == session:
                status = open(f"/proc/{entry}/status").read()
                found |= set(next(x for x in status.splitlines() if x.startswith("Uid:")).split()[1:])
        except OSError:
            continue
    return found


def _run(tmp_path, source: str, limits: sandbox.Limits | None = None, secret: bool = False) -> tuple[dict, bool]:
    """Run ``source`` as one cell in a fresh worker: (its reply or {"died": True}, killed at the memory limit);
    the reply's ``uids`` are those its processes have on the host."""
    lib = sandbox.prepare_folder(tmp_path)
    if secret:  # a grader-owned 0600 file inside what is bound (the student's own copy of labsupport)
        (lib / "labsupport" / "token.conf").write_text("index-token-123\n")
        os.chmod(lib / "labsupport" / "token.conf", 0o600)
    worker = sandbox.Worker(tmp_path, limits or sandbox.Limits())
    worker.start()
    try:
        assert worker.request({"op": "init"}, 30)["ok"]
        try:
            reply = worker.request({"op": "exec", "cell": 0, "source": source}, 60)
        except sandbox.WorkerDied:
            reply = {"died": True}
        reply["uids"] = _uids(worker.proc.pid) if worker.proc is not None else set()
    finally:
        worker.kill()
    return reply, worker.out_of_memory


@pytest.mark.skipif(os.geteuid() != 0, reason="an ordinary user's sandbox maps to that user: nothing to drop")
def test_as_root_the_student_is_an_unprivileged_uid_outside_too(tmp_path):
    if sandbox.host_uid() != sandbox.SANDBOX_UID:
        pytest.skip("this machine refuses user namespaces to unprivileged users (the header says uid 0 on the host)")
    assert "and on the host" in sandbox.enforcement()[0]
    probe = """
import os
def _read(path):
    try:
        open(path).read()
        return "read"
    except OSError as exc:
        return type(exc).__name__
print(os.getuid(), os.getgid())
print(_read('/grading/lib/labsupport/token.conf'), _read('/proc/cmdline'))
def _list(path):
    try:
        os.listdir(path)
        return "listed"
    except OSError as exc:
        return type(exc).__name__
print(_read('/grading/lib/labsupport/__init__.py'), _list('/etc/ssl/private') if os.path.isdir('/etc/ssl/private')
      else "PermissionError")
import labsupport
print(labsupport.__file__)
"""
    reply, _ = _run(tmp_path, probe, secret=True)
    lines = reply["output"].split("\n")
    # uid 65534 inside is 65534 on the host too (not 0: root's files are not the student's)
    assert lines[0] == f"{sandbox.SANDBOX_UID} {sandbox.SANDBOX_UID}", reply
    assert reply["uids"] == {str(sandbox.SANDBOX_UID)}, reply
    assert lines[1] == "PermissionError PermissionError", reply       # the 0600 token, the host's cmdline
    assert lines[2] == "read PermissionError", reply   # its copy of labsupport is readable, /etc/ssl/private not
    assert lines[3] == "/grading/lib/labsupport/__init__.py", reply


@pytest.mark.skipif(os.geteuid() != 0, reason="only a root grader has a fallback to start bwrap as itself")
def test_where_unprivileged_namespaces_are_refused_root_starts_bwrap_itself_and_says_so(tmp_path, monkeypatch):
    monkeypatch.setattr(sandbox, "host_uid", lambda: 0)
    assert "uid 0 on the host" in sandbox.enforcement()[0] and "ARE readable" in sandbox.enforcement()[0]
    reply, _ = _run(tmp_path, "print(open('/grading/lib/labsupport/token.conf').read().strip())", secret=True)
    assert reply["output"].strip() == "index-token-123" and reply["uids"] == {"0"}, reply   # what the header says


def test_the_seccomp_filter_is_well_formed():
    for machine in seccomp.TABLES:
        code = seccomp.program(machine)
        assert len(code) % 8 == 0
        ins = [struct.unpack("=HBBI", code[i:i + 8]) for i in range(0, len(code), 8)]
        assert ins[-2] == (0x06, 0, 0, 0x7FFF0000) and ins[-1] == (0x06, 0, 0, 0x00050001)
        for i, (op, jt, jf, _) in enumerate(ins):   # every jump lands inside, on the deny at most
            assert op == 0x06 or i + 1 + max(jt, jf) <= len(ins) - 1
    with pytest.raises(ValueError, match="error: seccomp filter"):
        seccomp.program("vax")


_HOLD = """
import mmap, os
_held, _how = [], []
def _memfd(total):
    for _ in range(total >> 26):          # 64 MiB files (the file-size limit), written, not mapped
        fd = os.memfd_create("x")
        for _ in range(16):
            os.write(fd, b"x" * (4 << 20))
        _held.append(fd)
def _sysv(total):
    import ctypes
    libc = ctypes.CDLL(None, use_errno=True)
    libc.shmat.restype = ctypes.c_void_p
    for _ in range(total >> 28):          # 256 MiB segments, touched, then detached
        sid = libc.shmget(0, 256 << 20, 0o1600)
        if sid < 0:
            raise PermissionError(ctypes.get_errno(), "shmget")
        addr = libc.shmat(sid, None, 0)
        ctypes.memset(addr, 1, 256 << 20)
        libc.shmdt(ctypes.c_void_p(addr))
for _name, _fn in (("memfd", _memfd), ("sysv", _sysv)):
    try:
        _fn(2 << 30)
        _how.append(_name + " held")
    except OSError as exc:
        _how.append(_name + " " + type(exc).__name__)
print(" ".join(_how))
"""


def test_memory_outside_any_address_space_is_bounded_by_the_cgroup(tmp_path):
    if "memory" not in cgroup.available():
        pytest.skip("no writable memory cgroup here")
    assert any("for the whole submission" in line for line in sandbox.enforcement())
    reply, out_of_memory = _run(tmp_path, _HOLD, sandbox.Limits(memory_mb=1024))
    # 2 GiB of memfd under a 1 GiB submission: the kernel kills it at the limit (or a call fails)
    assert reply.get("died") and out_of_memory or "held" not in reply.get("output", ""), reply


def test_without_a_cgroup_memfd_and_sysv_memory_are_refused(tmp_path, monkeypatch):
    if not seccomp.supported():
        pytest.skip("no seccomp table for this machine")
    monkeypatch.setattr(cgroup, "available", lambda: {})
    line = next(x for x in sandbox.enforcement(sandbox.Limits(memory_mb=1024)) if x.startswith("memory:"))
    assert "memfd_create" in line and "shmget" in line
    reply, _ = _run(tmp_path, _HOLD, sandbox.Limits(memory_mb=1024))
    assert reply.get("output", "").strip() == "memfd PermissionError sysv PermissionError", reply


_CHILDREN = """
import subprocess, sys
code = ("b = bytearray(600 << 20); b[::4096] = b'x' * len(b[::4096]); print('ok', flush=True); "
        "import time; time.sleep(20)")
kids = [subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE) for _ in range(3)]
print(sum(b"ok" in k.stdout.readline() for k in kids), "children hold 600 MiB each")
for k in kids:
    k.wait()
"""


def test_without_a_cgroup_the_submissions_processes_are_bounded_together(tmp_path, monkeypatch):
    """Each child is under the per-process limit; together they pass the submission's: the grader's sampling
    of their Pss (memwatch) stops the submission and says it was memory."""
    from labsupport.workbook.grading import memwatch

    monkeypatch.setattr(cgroup, "available", lambda: {})
    line = next(x for x in sandbox.enforcement(sandbox.Limits(memory_mb=1024)) if x.startswith("memory:"))
    assert "1024 MiB across the submission's processes" in line
    reply, out_of_memory = _run(tmp_path, _CHILDREN, sandbox.Limits(memory_mb=1024))
    assert reply.get("died") and out_of_memory, reply
    assert "children hold" not in reply.get("output", "")     # stopped before the cell could finish
    assert os.getpid() in memwatch.submission_processes(os.getpid())
    assert memwatch.pss_bytes(os.getpid()) > 0 and memwatch.pss_bytes(2 ** 22 + 7) == 0
