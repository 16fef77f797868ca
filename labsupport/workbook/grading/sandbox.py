"""Starting and talking to a student's worker process (the grader's side of the boundary).

Each worker runs ``python -I`` in its own session and working folder, with limits set by
``resource.setrlimit`` (address space, file size, CPU time, no core dumps), a scrubbed
environment (no ``$LABSUPPORT_CHECK_SEED``, ``HOME`` and ``TMPDIR`` inside its folder) and its
own copy of the ``labsupport`` package and data, so nothing it writes reaches the repository,
the next submission or the gradebook.  Where the kernel allows unprivileged namespaces
(util-linux ``unshare``), the worker also gets its own PID and network namespaces: it cannot see
or signal the grader and has no network.  ``bwrap``, when installed, is used instead and also
makes the whole file system read-only except the worker's folder.  :func:`sandbox_mode` says
which one a run uses (the grader prints it in its header).
"""
from __future__ import annotations

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
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from labsupport.paths import REPO_ROOT

_HEADER = struct.Struct("<Q")
_BOOT = ("import sys; sys.path.insert(0, sys.argv[1]); "
         "from labsupport.workbook.grading.worker import main; main()")
# without namespaces, a go-between parent: the student's os.getppid() is this process, not the grader
_NANNY = "import subprocess, sys; sys.exit(subprocess.call(sys.argv[1:], close_fds=False))"
SANDBOX_ENV = "LABSUPPORT_GRADE_SANDBOX"


@dataclass
class Limits:
    """Per-submission limits (seconds, MiB, bytes)."""

    cell_timeout: float = 20.0
    question_timeout: float = 30.0
    submission_timeout: float = 300.0
    memory_mb: int = 3072
    file_mb: int = 64
    reply_bytes: int = 256 * 1024 * 1024


class WorkerTimeout(BaseException):
    """The student's code ran past its time limit (a BaseException: checks never catch it)."""


class WorkerDied(BaseException):
    """The student's process ended (os._exit, a signal, the memory limit)."""


class LearnerError(Exception):
    """An exception of a non-builtin type raised by the student's code, carried back by name."""


def _probe(cmd: list[str]) -> bool:
    try:
        return subprocess.run(cmd + ["true"], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL, timeout=20).returncode == 0
    except (OSError, subprocess.SubprocessError):
        return False


_UNSHARE = ["--user", "--map-root-user", "--pid", "--net", "--fork", "--kill-child", "--mount-proc"]
# inside the namespaces: the protected folders become read-only bind mounts, the worker's own
# folder stays writable, then the worker starts (a failed remount is logged, not fatal)
_MOUNTS = r"""
IFS=:
for p in $LABSUPPORT_RO; do
  [ -d "$p" ] || continue
  mount --bind "$p" "$p" && mount -o remount,bind,ro "$p" || echo "grading sandbox: could not make $p read-only" >&2
done
mount --bind "$LABSUPPORT_RW" "$LABSUPPORT_RW" && mount -o remount,bind,rw "$LABSUPPORT_RW" || echo "grading sandbox: $LABSUPPORT_RW stays as it is" >&2
unset LABSUPPORT_RO LABSUPPORT_RW IFS
"$@"
"""
# (not `exec`: this shell stays the namespace's init, the worker's parent, which a signal from
# inside the namespace cannot kill — os.kill(os.getppid(), SIGKILL) does nothing, deterministically)


@functools.lru_cache(maxsize=None)
def sandbox_mode() -> str:
    """``"bwrap"``, ``"unshare"`` or ``"none"`` (``$LABSUPPORT_GRADE_SANDBOX`` forces one)."""
    forced = os.environ.get(SANDBOX_ENV, "").strip().lower()
    if forced == "none":
        return "none"
    bwrap, unshare = shutil.which("bwrap"), shutil.which("unshare")
    if forced in ("", "bwrap") and bwrap and _probe([bwrap, "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc",
                                                      "--unshare-all", "--die-with-parent", "--"]):
        return "bwrap"
    if forced in ("", "unshare") and unshare and _probe([unshare, *_UNSHARE, "sh", "-c",
                                                        "mount --bind / /mnt 2>/dev/null || mount --bind /tmp /tmp; exec \"$@\"",
                                                        "sh"]):
        return "unshare"
    return "none"


def sandbox_note(mode: str | None = None) -> str:
    mode = mode or sandbox_mode()
    return {
        "bwrap": "sandbox: bwrap — read-only file system except the worker's folder, own PID and network namespaces",
        "unshare": "sandbox: unshare — own PID, network and mount namespaces: cannot see or signal the grader, "
                   "no network; the repository, the submissions, the gradebook, your home and the other "
                   "students' folders are read-only to it",
        "none": "sandbox: NONE available (no bwrap, no unprivileged unshare) — student code runs as your user "
                "with limits, its own session and folder, but could reach your files and processes; grade on "
                "a machine or account you can spare, or install bubblewrap",
    }[mode]


def _needed_under_tmp() -> list[str]:
    """The interpreter, its virtualenv and the repository, where they lie under /tmp (outermost only)."""
    tmp = Path("/tmp").resolve()
    found: list[Path] = []
    for raw in (sys.prefix, sys.base_prefix, os.path.dirname(os.path.realpath(sys.executable)), REPO_ROOT):
        path = Path(raw).resolve()
        if path != tmp and tmp in path.parents:
            found.append(path)
    outer = [p for p in found if not any(q != p and q in p.parents for q in found)]
    return sorted({str(p) for p in outer})


def _prefix(mode: str, workdir: Path) -> list[str]:
    if mode == "bwrap":
        # /tmp becomes an empty tmpfs; what the worker needs from it (a checkout or a virtualenv that
        # lives under /tmp, e.g. a CI clone) is mounted back read-only on top, the worker's folder writable
        keep = []
        for path in _needed_under_tmp():
            keep += ["--ro-bind", path, path]
        return [shutil.which("bwrap") or "bwrap", "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc",
                "--tmpfs", "/tmp", *keep, "--bind", str(workdir), str(workdir), "--unshare-all", "--die-with-parent",
                "--new-session", "--chdir", str(workdir / "home"), "--"]
    if mode == "unshare":
        return [shutil.which("unshare") or "unshare", *_UNSHARE, "sh", "-c", _MOUNTS, "sh"]
    return [sys.executable, "-I", "-c", _NANNY]


def prepare_folder(workdir: Path) -> Path:
    """Give ``workdir`` a private copy of ``labsupport`` and its data (``lib/``) and an empty home."""
    lib = workdir / "lib"
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    shutil.copytree(REPO_ROOT / "labsupport", lib / "labsupport", ignore=ignore)
    for extra in ("data", "configs"):
        if (REPO_ROOT / extra).is_dir():
            shutil.copytree(REPO_ROOT / extra, lib / extra, ignore=ignore)
    (workdir / "home" / "tmp").mkdir(parents=True)
    return lib


class Worker:
    """One student process; :meth:`request` sends a message and waits for the answer."""

    def __init__(self, workdir: Path, limits: Limits, mode: str | None = None, protect: tuple[Path, ...] = ()):
        self.workdir, self.limits, self.mode = Path(workdir), limits, mode or sandbox_mode()
        self.protect = tuple(Path(p) for p in protect)
        self.proc: subprocess.Popen | None = None
        self._to = self._from = -1

    # ------------------------------------------------------------------
    def start(self) -> None:
        home = self.workdir / "home"
        req_r, req_w = os.pipe()
        resp_r, resp_w = os.pipe()
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(home), "TMPDIR": str(home / "tmp"),
               "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8", "LABSUPPORT_HEADLESS": "1", "PYTHONHASHSEED": "0",
               "MPLBACKEND": "Agg", "LABSUPPORT_WORK": str(home / "work"), "OMP_NUM_THREADS": "1",
               "MKL_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "PYTHONDONTWRITEBYTECODE": "1",
               "CUDA_VISIBLE_DEVICES": ""}
        if self.mode == "unshare":
            ro = [REPO_ROOT, Path.home(), self.workdir.parent, *self.protect]
            env["LABSUPPORT_RO"] = ":".join(dict.fromkeys(str(Path(p).resolve()) for p in ro if ":" not in str(p)))
            env["LABSUPPORT_RW"] = str(self.workdir.resolve())
        limits = self.limits

        def set_limits() -> None:  # runs in the child before exec: inherited by everything it starts
            mem = limits.memory_mb * 1024 * 1024
            resource.setrlimit(resource.RLIMIT_AS, (mem, mem))
            size = limits.file_mb * 1024 * 1024
            resource.setrlimit(resource.RLIMIT_FSIZE, (size, size))
            resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
            cpu = int(limits.submission_timeout) + 30
            resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu))

        cmd = _prefix(self.mode, self.workdir) + [sys.executable, "-I", "-c", _BOOT, str(self.workdir / "lib"),
                                                  str(req_r), str(resp_w)]
        log = open(self.workdir / "worker.log", "ab")
        try:
            self.proc = subprocess.Popen(cmd, cwd=home, env=env, stdin=subprocess.DEVNULL, stdout=log,
                                         stderr=subprocess.STDOUT, pass_fds=(req_r, resp_w),
                                         start_new_session=True, preexec_fn=set_limits)
        finally:
            log.close()
            os.close(req_r)
            os.close(resp_w)
        self._to, self._from = req_w, resp_r
        os.set_blocking(self._to, False)

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
        return json.loads(self._read(size, deadline))

    def _wait(self, fd: int, deadline: float, write: bool) -> None:
        left = deadline - time.monotonic()
        if left <= 0:
            self.kill()
            raise WorkerTimeout
        ready = select.select([], [fd], [], left) if write else select.select([fd], [], [], left)
        if not (ready[1] if write else ready[0]):
            self.kill()
            raise WorkerTimeout

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
    :class:`LearnerError` otherwise; ``learner_where`` tells :func:`_core._blame` whose it was."""
    import builtins

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
