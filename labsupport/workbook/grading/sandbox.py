"""Starting and talking to a student's worker process (the grader's side of the boundary).

The student's code runs in ``python -I`` inside a bubblewrap (``bwrap``) sandbox:

* uid/gid 65534 (``nobody``) outside its user namespace as well as in it: a root grader drops to it
  before starting bwrap (in a private mount namespace where the folders to bind are reachable by that
  uid, :func:`_drop_to_student`), so the grader's 0600 files are not readable; every capability dropped
  (``--cap-drop ALL``), ``no_new_privs``, no further user namespaces;
* its own mount, PID, IPC, UTS, cgroup and network namespaces: it cannot see or signal the grader,
  has no network and no host socket (abstract or in ``/tmp``/``/run``);
* a file system of its own: ``/usr``, a few files of ``/etc``, the Python environment and the
  submission's private copy of ``labsupport`` (checks replaced by stubs), all read-only; a
  size-limited tmpfs as its home, ``/tmp`` and ``/dev/shm``.  The repository, ``solutions/``,
  the gradebook, other submissions and the run's seed are not in it at all;
* per submission, not per process, where a cgroup can be made (:mod:`.cgroup`): memory and number
  of processes; otherwise the number of processes of its user namespace (``RLIMIT_NPROC``) and a
  per-process address-space limit, and ``memfd_create``, SysV shared memory and message queues refused
  (:mod:`.seccomp`: memory those hold is outside that limit); always a file-size limit, CPU time and
  the grader's wall clocks.

Without bwrap (``$LABSUPPORT_GRADE_SANDBOX=none``, or no user namespaces) a worker still gets its
own session, folder and limits, but runs as the grader's user: the command refuses that unless the
instructor passes ``--no-sandbox``.  :func:`enforcement` says exactly what a run enforces.
"""
from __future__ import annotations

import builtins
import ctypes
import functools
import json
import os
import resource
import select
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from labsupport.paths import REPO_ROOT
from labsupport.workbook.grading import cgroup, seccomp
from labsupport.workbook.grading.memwatch import MemoryWatch
from labsupport.workbook.grading.stubs import hidden_references, strip_references, write_check_stubs

_HEADER = struct.Struct("<Q")
_BOOT = ("import sys; sys.path.insert(0, sys.argv[1]); "
         "from labsupport.workbook.grading.worker import main; main()")
# without namespaces, a go-between parent: the student's os.getppid() is this process, not the grader
_NANNY = "import subprocess, sys; sys.exit(subprocess.call(sys.argv[1:], close_fds=False))"
SANDBOX_ENV = "LABSUPPORT_GRADE_SANDBOX"
SANDBOX_UID = 65534
INSIDE = Path("/grading")            # inside the sandbox: lib/ (read-only) and home/ (tmpfs)
_ETC = ("ld.so.cache", "ld.so.conf", "ld.so.conf.d", "localtime", "timezone", "nsswitch.conf", "passwd", "group",
        "hosts", "fonts", "ssl", "mime.types", "alternatives", "matplotlibrc")
# CUDA builds of torch map about 3.2 GB of address space at import (measured: torch 2.13.0+cu130,
# VmPeak 3 202 580 kB, resident 0.5 GB); an address-space limit (used only where no memory cgroup
# is available) leaves room for that on top of --memory-mb
CUDA_ADDRESS_SLACK_MB = 4096
# a root grader's child binds the folders bwrap needs under this name, in its own mount namespace,
# before it drops to SANDBOX_UID (which may not traverse /root, a 0700 temporary folder, ...)
STAGE = "/tmp"
_CLONE_NEWNS, _MS_BIND, _MS_MOVE, _MS_REC, _MS_PRIVATE = 0x20000, 4096, 8192, 16384, 1 << 18
_LIBC = ctypes.CDLL(None, use_errno=True)


@dataclass
class Limits:
    """Per-submission limits (seconds, MiB, bytes, processes)."""

    cell_timeout: float = 20.0
    question_timeout: float = 30.0
    submission_timeout: float = 300.0
    memory_mb: int = 3072
    file_mb: int = 64
    disk_mb: int = 256              # the tmpfs home; /tmp and /dev/shm get a quarter each
    max_procs: int = 64
    reply_bytes: int = 64 * 1024 * 1024
    reply_values: int = 4_000_000   # JSON values in one reply (bounds the grader's memory decoding it)


class WorkerTimeout(BaseException):
    """The student's code ran past its time limit (a BaseException: checks never catch it)."""


class WorkerDied(BaseException):
    """The student's process ended (os._exit, a signal, the memory limit)."""


class LearnerError(Exception):
    """An exception of a non-builtin type raised by the student's code, carried back by name."""


def _probe(lib: Path, drop: bool) -> bool:
    scratch = Path(tempfile.mkdtemp(prefix="labsupport-probe-"))
    staged = _stage_map(lib) if drop else {}
    try:
        return subprocess.run(bwrap_args(lib, Limits(), staged) + ["/usr/bin/true"], stdin=subprocess.DEVNULL,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=20,
                              preexec_fn=(lambda: _drop_to_student(staged, scratch)) if staged else None,
                              ).returncode == 0
    except (OSError, subprocess.SubprocessError):
        return False
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def _stage_map(lib: Path) -> dict[str, str]:
    return {src: f"{STAGE}/{i}" for i, src in enumerate([*_python_roots(), str(lib)])}


@functools.lru_cache(maxsize=None)
def host_uid() -> int:
    """The uid the student's processes have on the host: the grader's own for an ordinary user;
    :data:`SANDBOX_UID` for root, unless this machine refuses user namespaces to unprivileged
    users (then bwrap is started as root, as before, and its sandbox is uid 0 on the host)."""
    if os.geteuid() != 0:
        return os.geteuid()
    return SANDBOX_UID if _probe(Path(sys.prefix), drop=True) else 0


def staging(lib: Path) -> dict[str, str]:
    """As root: ``{folder bwrap binds: where the unprivileged launcher sees it}`` (the Python environment
    and ``lib``); ``{}`` where bwrap starts as the grader's user (an ordinary user, or see :func:`host_uid`)."""
    if os.geteuid() != 0 or host_uid() == 0:
        return {}
    return _stage_map(lib)


def _mount(source: str | None, target: str, fstype: str | None, flags: int, data: str | None = None) -> None:
    def enc(value: str | None) -> bytes | None:
        return value.encode() if value is not None else None

    if _LIBC.mount(enc(source), enc(target), enc(fstype), flags, enc(data)) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"mount {source} on {target}: {os.strerror(err)}")


def _drop_to_student(staged: dict[str, str], scratch: Path) -> None:
    """In the child, before exec, as root: a private mount namespace where each folder of ``staged``
    is bound under :data:`STAGE` (reachable by any uid), then uid/gid :data:`SANDBOX_UID`, no groups,
    no capabilities; bwrap then starts as that uid and binds the staged folders."""
    if _LIBC.unshare(_CLONE_NEWNS) != 0:
        raise OSError(ctypes.get_errno(), "unshare(CLONE_NEWNS)")
    _mount(None, "/", None, _MS_REC | _MS_PRIVATE)
    _mount("labsupport-stage", str(scratch), "tmpfs", 0, "mode=0755,size=64k")
    for source, seen in staged.items():
        os.mkdir(scratch / Path(seen).name, 0o755)
        _mount(source, str(scratch / Path(seen).name), None, _MS_BIND | _MS_REC)
    _mount(str(scratch), STAGE, None, _MS_MOVE)
    os.chdir("/")
    os.setgroups([])
    os.setresgid(SANDBOX_UID, SANDBOX_UID, SANDBOX_UID)
    os.setresuid(SANDBOX_UID, SANDBOX_UID, SANDBOX_UID)


def _python_roots() -> list[str]:
    """The folders the interpreter and its packages need (read-only in the sandbox), outermost only,
    never the repository itself (a checkout's .venv inside it is fine)."""
    repo = REPO_ROOT.resolve()
    venv = Path(sys.prefix).resolve()     # the environment in use (.venv, .venv-3.12, …), wherever it is
    found: list[Path] = []
    for raw in (sys.prefix, sys.base_prefix, os.path.dirname(os.path.realpath(sys.executable)),
                *[p for p in sys.path if p and "site-packages" in p]):
        path = Path(raw).resolve()
        inside_venv = path == venv or venv in path.parents
        if not path.is_dir() or path == repo or (repo in path.parents and not (inside_venv and venv != repo)):
            continue
        found.append(path)
    outer = [p for p in found if not any(q != p and q in p.parents for q in found)]
    return sorted({str(p) for p in outer})


def bwrap_args(lib: Path, limits: Limits, staged: dict[str, str] | None = None, seccomp_fd: int = -1) -> list[str]:
    """The bwrap command line (up to ``--``) for one worker whose private library is ``lib``;
    ``staged`` (:func:`staging`) says where a root grader's launcher sees the folders it binds,
    ``seccomp_fd`` a filter for bwrap to load (:mod:`.seccomp`)."""
    staged = staged or {}
    args = [shutil.which("bwrap") or "bwrap", "--unshare-all", "--unshare-user", "--uid", str(SANDBOX_UID),
            "--gid", str(SANDBOX_UID), "--cap-drop", "ALL", "--disable-userns", "--die-with-parent",
            "--new-session", "--hostname", "grading", "--ro-bind", "/usr", "/usr"]
    for top in ("bin", "sbin", "lib", "lib32", "lib64", "libx32"):
        p = Path("/") / top
        if p.is_symlink():
            args += ["--symlink", os.readlink(p), str(p)]
        elif p.is_dir():
            args += ["--ro-bind", str(p), str(p)]
    for name in _ETC:
        if (Path("/etc") / name).exists():
            args += ["--ro-bind", f"/etc/{name}", f"/etc/{name}"]
    disk = limits.disk_mb * 1024 * 1024
    # the private /tmp (and /dev) first: the Python environment is bound after them, so a checkout
    # whose .venv lives under /tmp (a CI clone) is bound onto the tmpfs instead of hidden by it
    # /dev is bwrap's own tmpfs: read-only (its device nodes still work), or a student could fill
    # memory through it; /dev/shm is a bounded tmpfs mounted onto it
    args += ["--dev", "/dev", "--remount-ro", "/dev", "--proc", "/proc",
             "--size", str(disk // 4), "--tmpfs", "/tmp", "--size", str(disk // 4), "--tmpfs", "/dev/shm"]
    # the host's kernel command line is not the student's business (unreadable: a nodev null device)
    args += ["--ro-bind", "/dev/null", "/proc/cmdline"]
    for root in _python_roots():
        args += ["--ro-bind", staged.get(root, root), root]
    if seccomp_fd >= 0:
        args += ["--seccomp", str(seccomp_fd)]
    args += ["--size", str(disk), "--tmpfs", str(INSIDE / "home"), "--ro-bind", staged.get(str(lib), str(lib)),
             str(INSIDE / "lib"), "--remount-ro", "/", "--chdir", str(INSIDE / "home"), "--"]
    return args


@functools.lru_cache(maxsize=None)
def sandbox_mode() -> str:
    """``"bwrap"`` or ``"none"`` (``$LABSUPPORT_GRADE_SANDBOX=none`` forces none)."""
    if os.environ.get(SANDBOX_ENV, "").strip().lower() == "none" or not shutil.which("bwrap"):
        return "none"
    probe = Path(sys.prefix)  # any readable folder stands in for the library
    root = os.geteuid() == 0
    return "bwrap" if _probe(probe, drop=root) or (root and _probe(probe, drop=False)) else "none"


def _cuda_torch() -> bool:
    """Is the torch this interpreter would import a CUDA build (big address-space mappings)?"""
    for root in sys.path:
        if root and "site-packages" in root and (Path(root) / "nvidia").is_dir() and (Path(root) / "torch").is_dir():
            return True
    return False


def enforcement(limits: Limits | None = None, mode: str | None = None) -> list[str]:
    """What this machine enforces on the student's code, one line each (the run's header)."""
    limits, mode = limits or Limits(), mode or sandbox_mode()
    groups = cgroup.available()
    lines = []
    if mode == "bwrap":
        on_host = host_uid()
        if os.geteuid() != 0:
            who = (f"uid {SANDBOX_UID} in its own user namespace (your uid {on_host} on the host: it can read your "
                   "files in what is bound, the Python environment)")
        elif on_host == SANDBOX_UID:
            who = (f"uid {SANDBOX_UID} in its own user namespace and on the host (the root grader drops to it before "
                   "starting bwrap: root's 0600 files are not readable)")
        else:
            who = (f"uid {SANDBOX_UID} in its own user namespace but uid 0 on the host (this machine refuses user "
                   "namespaces to unprivileged users: root's 0600 files in what is bound ARE readable)")
        lines.append(f"isolation: bwrap — {who}, no capabilities, "
                     "no_new_privs, no nested user namespaces; own mount/PID/IPC/UTS/network namespaces "
                     "(no network, no host sockets); "
                     "sees /usr, the Python environment and its own read-only copy of labsupport (no check code, no "
                     "answer keys), never the repository, solutions/, the gradebook, other submissions or the seed")
        lines.append(f"disk: {limits.disk_mb} MiB tmpfs home, {limits.disk_mb // 4} MiB /tmp, "
                     f"{limits.disk_mb // 4} MiB /dev/shm (private), {limits.file_mb} MiB per file")
    else:
        lines.append("isolation: NONE (--no-sandbox) — the student's code runs as your user, with its own session, "
                     "folder and limits, but could read or change whatever your user can (your files, the "
                     "gradebook, solutions/), reach the network and see your processes")
        lines.append(f"disk: not limited (only {limits.file_mb} MiB per file)")
    if "memory" in groups:
        lines.append(f"memory: {limits.memory_mb} MiB for the whole submission (cgroup v{groups['version']})")
    else:
        slack = CUDA_ADDRESS_SLACK_MB if _cuda_torch() else 0
        line = (f"memory: no writable cgroup — {limits.memory_mb} MiB across the submission's processes, sampled "
                f"(the grader adds up their Pss every 0.25 s), and {limits.memory_mb + slack} MiB of address "
                f"space per process" + (" (--memory-mb + room for CUDA torch's mappings)" if slack else ""))
        if mode == "bwrap" and seccomp.supported():
            line += (f"; memory outside address spaces refused ({', '.join(seccomp.refused_calls())} fail with "
                     "EPERM), /dev/shm and /tmp bounded as disk")
        elif mode == "bwrap":
            line += "; memfd and SysV shared memory NOT bounded (no seccomp table for this machine)"
        lines.append(line)
    if "pids" in groups:
        lines.append(f"processes: {limits.max_procs} for the whole submission (cgroup v{groups['version']})")
    elif mode == "bwrap" and host_uid() != 0:   # as root too, where its students run as SANDBOX_UID
        lines.append(f"processes: {limits.max_procs} in the submission's user namespace (RLIMIT_NPROC)")
    else:
        lines.append("processes: NOT limited (no writable cgroup" + (", and RLIMIT_NPROC does not bind root)" if
                                                                   os.geteuid() == 0 else ")"))
    lines.append(f"time: {limits.cell_timeout:g} s per answer cell, {limits.question_timeout:g} s per question, "
                 f"{limits.submission_timeout:g} s per submission (wall clock), CPU time "
                 f"{int(limits.submission_timeout) + 30} s")
    return lines


def sandbox_note(mode: str | None = None) -> str:
    return enforcement(mode=mode)[0]


def prepare_folder(workdir: Path, chapter: Any = None) -> Path:
    """Give ``workdir`` the student's private ``labsupport`` and data (``lib/``) and an empty home.

    The copy holds no check code: ``labsupport/check`` becomes stubs carrying only the option lists
    the exercise prints, and the reference functions of ``chapter``'s questions raise instead of
    answering, except those its setup cells call (:mod:`.stubs`)."""

    lib = workdir / "lib"
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    shutil.copytree(REPO_ROOT / "labsupport", lib / "labsupport", ignore=ignore)
    write_check_stubs(lib / "labsupport" / "check")
    if chapter is not None:
        strip_references(lib, hidden_references(chapter)[0])
    for extra in ("data", "configs"):
        if (REPO_ROOT / extra).is_dir():
            shutil.copytree(REPO_ROOT / extra, lib / extra, ignore=ignore)
    (workdir / "home" / "tmp").mkdir(parents=True)
    _readable_by_all(lib)   # a root grader's student runs as SANDBOX_UID: its copy must be readable
    return lib


def _readable_by_all(folder: Path) -> None:
    for here, dirs, files in os.walk(folder):
        os.chmod(here, os.stat(here).st_mode | 0o555)
        for name in files:
            p = os.path.join(here, name)
            if not os.path.islink(p):
                os.chmod(p, os.stat(p).st_mode | 0o444)


class Worker:
    """One student process; :meth:`request` sends a message and waits for the answer."""

    def __init__(self, workdir: Path, limits: Limits, mode: str | None = None, protect: tuple[Path, ...] = ()):
        self.workdir, self.limits, self.mode = Path(workdir), limits, mode or sandbox_mode()
        self.protect = tuple(Path(p) for p in protect)
        self.group: cgroup.Group | None = None
        self.out_of_memory = False   # the kernel killed one of its processes at the submission's memory limit
        self.proc: subprocess.Popen | None = None
        self.watch: MemoryWatch | None = None
        self._to = self._from = -1

    # ------------------------------------------------------------------
    def start(self) -> None:
        """Start the student's process (its cgroup first, where one can be made)."""
        sandboxed = self.mode == "bwrap"
        home = (INSIDE / "home") if sandboxed else self.workdir / "home"
        lib = (INSIDE / "lib") if sandboxed else self.workdir / "lib"
        req_r, req_w = os.pipe()
        resp_r, resp_w = os.pipe()
        env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": str(home),
               "TMPDIR": "/tmp" if sandboxed else str(home / "tmp"),
               "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8", "LABSUPPORT_HEADLESS": "1", "PYTHONHASHSEED": "0",
               "MPLBACKEND": "Agg", "LABSUPPORT_WORK": str(home / "work"), "OMP_NUM_THREADS": "1",
               "MKL_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "PYTHONDONTWRITEBYTECODE": "1",
               "CUDA_VISIBLE_DEVICES": "", "LABSUPPORT_GRADE_NPROC": str(self.limits.max_procs)}
        limits = self.limits
        self.group = None
        if cgroup.available():
            try:
                self.group = cgroup.Group(limits.memory_mb * 1024 * 1024, limits.max_procs)
            except OSError:
                self.group = None
        group = self.group
        per_submission_memory = group is not None and group.memory
        slack = CUDA_ADDRESS_SLACK_MB if _cuda_torch() else 0
        staged = staging(self.workdir / "lib") if sandboxed else {}
        scratch = self.workdir / "stage"
        if staged:
            scratch.mkdir(exist_ok=True)
        # without a memory cgroup, memory outside any address space (memfd, SysV) is refused
        filter_fd = seccomp.pipe_fd() if sandboxed and not per_submission_memory and seccomp.supported() else -1

        def set_limits() -> None:  # runs in the child before exec: inherited by everything it starts
            if group is not None:
                group.join()    # as root, before the drop: the cgroup's files are root's
            if not per_submission_memory:
                mem = (limits.memory_mb + slack) * 1024 * 1024
                resource.setrlimit(resource.RLIMIT_AS, (mem, mem))
            size = limits.file_mb * 1024 * 1024
            resource.setrlimit(resource.RLIMIT_FSIZE, (size, size))
            resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
            cpu = int(limits.submission_timeout) + 30
            resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu))
            if staged:
                _drop_to_student(staged, scratch)

        prefix = (bwrap_args(self.workdir / "lib", limits, staged, filter_fd) if sandboxed
                  else [sys.executable, "-I", "-c", _NANNY])
        cmd = prefix + [sys.executable, "-I", "-c", _BOOT, str(lib), str(req_r), str(resp_w)]
        log = open(self.workdir / "worker.log", "ab")
        try:
            self.proc = subprocess.Popen(cmd, cwd=self.workdir if sandboxed else home, env=env,
                                         stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                         pass_fds=(req_r, resp_w) + ((filter_fd,) if filter_fd >= 0 else ()),
                                         start_new_session=True, preexec_fn=set_limits)
        except BaseException:
            os.close(req_w)
            os.close(resp_r)
            if group is not None:
                group.kill()
            raise
        finally:
            log.close()
            os.close(req_r)
            os.close(resp_w)
            if filter_fd >= 0:
                os.close(filter_fd)
        self._to, self._from = req_w, resp_r
        os.set_blocking(self._to, False)
        # no memory cgroup: the grader adds up the memory of all the submission's processes (memwatch)
        self.watch = None if per_submission_memory else MemoryWatch(self.proc.pid, limits.memory_mb * 1024 * 1024)

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def kill(self) -> None:
        if self.proc is not None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                pass
            self.proc = None
        if getattr(self, "group", None) is not None:
            self.out_of_memory = self.out_of_memory or self.group.oom_kills() > 0
            self.group.kill()
            self.group = None
        for fd in (self._to, self._from):
            if fd >= 0:
                try:
                    os.close(fd)
                except OSError:
                    pass
        self._to = self._from = -1

    # ------------------------------------------------------------------
    def request(self, message: dict, timeout: float) -> dict:
        """Send ``message``; return the reply. Raises :class:`WorkerTimeout` after ``timeout``
        seconds (the worker is then killed) and :class:`WorkerDied` when the process is gone."""
        self.send(message, timeout)
        return self.receive(timeout)

    def send(self, message: dict, timeout: float) -> None:
        """Send ``message`` without waiting for its reply (see :meth:`receive`)."""
        if not self.alive:
            raise WorkerDied("the student's process is not running")
        deadline = time.monotonic() + max(timeout, 0.01)
        data = json.dumps(message, ensure_ascii=False).encode("utf-8")
        self._write(_HEADER.pack(len(data)) + data, deadline)

    def receive(self, timeout: float) -> dict:
        """The next reply, within ``timeout`` seconds."""
        deadline = time.monotonic() + max(timeout, 0.01)
        (size,) = _HEADER.unpack(self._read(_HEADER.size, deadline))
        if size > self.limits.reply_bytes:
            self.kill()
            raise WorkerDied(f"the reply of the student's code is {size} bytes (limit {self.limits.reply_bytes})")
        data = self._read(size, deadline)
        # each JSON value costs the grader ~100 bytes decoded: count them before decoding
        values = data.count(b",") + data.count(b"[") + data.count(b"{")
        if values > self.limits.reply_values:
            self.kill()
            raise WorkerDied(f"the reply of the student's code holds over {self.limits.reply_values} values")
        return json.loads(data)

    def _wait(self, fd: int, deadline: float, write: bool) -> None:
        """Until ``fd`` is ready; without a memory cgroup, the submission's processes are watched meanwhile."""
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                self.kill()
                raise WorkerTimeout
            step = min(left, self.watch.interval) if self.watch is not None else left
            ready = select.select([], [fd], [], step) if write else select.select([fd], [], [], step)
            if ready[1] if write else ready[0]:
                return
            if self.watch is not None and self.watch.over():
                self.kill()
                self.out_of_memory = True
                raise WorkerDied(f"the submission's processes held more than {self.limits.memory_mb} MiB")

    def _write(self, data: bytes, deadline: float) -> None:
        view = memoryview(data)
        while view:
            self._wait(self._to, deadline, write=True)
            try:
                view = view[os.write(self._to, view):]
            except BlockingIOError:
                continue
            except (BrokenPipeError, OSError):
                self.kill()
                raise WorkerDied("the student's process ended")

    def _read(self, n: int, deadline: float) -> bytes:
        chunks: list[bytes] = []
        while n:
            self._wait(self._from, deadline, write=False)
            chunk = os.read(self._from, min(n, 1 << 20))
            if not chunk:
                self.kill()
                raise WorkerDied("the student's process ended")
            chunks.append(chunk)
            n -= len(chunk)
        return b"".join(chunks)


def raise_learner_exception(info: dict[str, Any]) -> None:
    """Re-raise, in the grader, an exception the student's code raised in its own process: the same
    builtin type where it is an ``Exception`` (so ``except ValueError`` in a check still works),
    :class:`LearnerError` otherwise; ``learner_where`` tells :func:`_core.blame` whose it was."""

    cls: type[Exception] = LearnerError
    for name in info.get("bases", []):
        candidate = getattr(builtins, name, None)
        if isinstance(candidate, type) and issubclass(candidate, Exception) and candidate.__module__ == "builtins":
            cls = candidate
            break
    message = info.get("message", "")
    if cls is LearnerError:
        message = f"{info.get('type', '?')}: {message}"
    try:
        exc = cls(message)
    except Exception:  # noqa: BLE001 - an exception type with a special constructor
        exc = LearnerError(f"{info.get('type', '?')}: {message}")
    if info.get("not_implemented") and not isinstance(exc, NotImplementedError):
        exc.__cause__ = NotImplementedError()
    exc.learner_where = info.get("where", "line ?")
    raise exc
