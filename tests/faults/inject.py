"""A small fault injector for the workbook's commands (issue #32): a case is data — a command, a
fault, the exit codes it may end with — and :func:`run_case` runs it and :func:`broken_promises`
lists what it did that the README and docs/training.md do not allow.

Faults (:class:`Fault`):

* ``signal`` — SIGKILL / SIGINT / SIGSTOP ``after_ms`` after the start, or after a file matching
  ``when_exists`` appears; to the whole process group (a terminal's Ctrl-C), the leader only (the
  torchrun agent), or one torchrun worker (``target="rank1"``, found by its ``RANK``); ``again_ms``
  sends it a second time that many ms later (a second Ctrl-C);
* ``strace`` — ``strace -f -e inject=<spec>``: a signal at the N-th call of a syscall
  (``rename:signal=KILL:when=3``) or an errno (``fsync:error=ENOSPC``);
* ``flip`` — one byte of a named file (a glob in the case folder) XOR 0xFF before the run;
* ``concurrent`` — the command twice at the same time, in the same folder.

The promise (:func:`broken_promises`): the exit status is in the case's documented set; stderr
has no traceback and is either empty of errors or ends with exactly one line starting
``error:`` (the other lines are the command's notes: :data:`NOTES`); under torchrun the same for
each worker's own stderr (``--log-dir … --redirects 3``; torchrun's own report is torch's, as
docs/training.md says); no file under a final name is damaged: every checkpoint verifies, every
line of the JSON log parses; and a ``then`` command (the next run, e.g. ``--resume-if-exists``)
exits 0 on what the fault left.
"""
from __future__ import annotations

import contextlib
import glob
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

from labsupport.paths import REPO_ROOT

PYTHON = sys.executable
#: how the command's notes on stderr begin (a skipped checkpoint, a rebuilt index cache, a resume)
NOTES = ("train: ", "warning: ", "index cache ")
TORCHRUN = [PYTHON, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2"]


@dataclass(frozen=True)
class Fault:
    kind: str                      #: "signal", "strace", "flip", "concurrent" or "none"
    sig: int = 0                   #: signal: which one
    after_ms: int = 0              #: signal: delay after the start (or after ``when_exists`` appears)
    when_exists: str = ""          #: signal: a glob in the case folder to wait for first
    target: str = "group"          #: signal: "group", "leader" or "rank<N>" (a torchrun worker)
    again_ms: int | None = None    #: signal: send it again this many ms later
    spec: str = ""                 #: strace: the ``-e inject=`` expression
    file: str = ""                 #: flip: a glob in the case folder
    offset: int | None = None      #: flip: the byte (default: the middle of the file)


@dataclass(frozen=True)
class Case:
    name: str
    argv: tuple[str, ...]          #: after ``python``; ``{dir}`` and ``{prefix}`` are filled in
    fault: Fault
    codes: frozenset[int]          #: the exit statuses the docs allow for this fault
    torchrun: bool = False         #: run under ``torchrun --standalone --nproc-per-node=2``
    setup: tuple[str, ...] = ()    #: a command that must succeed first (e.g. write checkpoints)
    then: tuple[str, ...] = ()     #: a command that must succeed afterwards, on what is left
    worker_codes: frozenset[int] | None = None  #: torchrun: each worker's status (from its report)
    within_s: float | None = None  #: the job must end within this many seconds of the fault
    must_say: str = ""             #: the error line must contain this (e.g. the stopped rank)
    every_worker: bool = False     #: torchrun: every worker's stderr says ``must_say`` (not only one's)
    own_corpus: bool = False       #: a copy of the corpus in the case folder (``{prefix}``), to damage
    timeout_s: float = 120.0


@dataclass
class Outcome:
    codes: list[int] = field(default_factory=list)
    stderr: list[str] = field(default_factory=list)        # one text per process started
    worker_stderr: dict[str, str] = field(default_factory=dict)
    seconds_after_fault: float | None = None
    then_code: int | None = None
    then_stderr: str = ""
    timed_out: bool = False


def env() -> dict[str, str]:
    e = {k: v for k, v in os.environ.items() if k != "LABSUPPORT_FAULT"}
    return {**e, "PYTHONPATH": str(REPO_ROOT), "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}


def _expand(argv: Sequence[str], folder: Path, prefix: str) -> list[str]:
    return [a.format(dir=folder, prefix=prefix) for a in argv]


def _command(case: Case, folder: Path, prefix: str) -> list[str]:
    argv = _expand(case.argv, folder, prefix)
    cmd = ([*TORCHRUN, f"--log-dir={folder / 'torchrun-logs'}", "--redirects=3", *argv] if case.torchrun
           else [PYTHON, *argv])
    if case.fault.kind == "strace":
        syscalls = case.fault.spec.split(":", 1)[0]
        # --seccomp-bpf stops only at the traced syscalls (torch makes thousands of others), but
        # strace 6.1 then never delivers an injected signal: only for errno injection
        fast = ["--seccomp-bpf"] if "signal=" not in case.fault.spec else []
        cmd = ["strace", "-f", *fast, "-qq", "-o", os.devnull, "-e", f"trace={syscalls}", "-e",
               f"inject={case.fault.spec}", *cmd]
    return cmd


def _as_in_a_terminal() -> None:
    """In the child: SIGINT as a terminal's foreground job has it (a suite started with ``&``
    passes it on ignored, and Python then leaves it ignored)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _children(leader: int) -> dict[int, bytes]:
    """The processes whose parent is ``leader`` (torchrun's workers): pid → environment."""
    out = {}
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            if int((proc / "stat").read_text().rsplit(")", 1)[1].split()[1]) == leader:
                out[int(proc.name)] = (proc / "environ").read_bytes()
        except (OSError, IndexError, ValueError):
            continue
    return out


def _worker_pid(leader: int, rank: str) -> int | None:
    """The pid of the child of ``leader`` whose environment says ``RANK=<rank>``."""
    return next((pid for pid, environ in _children(leader).items()
                 if f"RANK={rank}".encode() in environ.split(b"\0")), None)


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


def _wait_pids(pids: Sequence[int], seconds: float) -> None:
    """Wait until every pid has ended (torchrun's workers live in their own sessions, so a killed
    agent's workers are not in its group); SIGKILL the ones left after ``seconds``."""
    deadline = time.monotonic() + seconds
    while any(map(_alive, pids)) and time.monotonic() < deadline:
        time.sleep(0.05)
    for pid in pids:
        if _alive(pid):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


def _send(proc: subprocess.Popen, fault: Fault) -> None:
    if fault.target == "group":
        os.killpg(proc.pid, fault.sig)
    elif fault.target == "leader":
        proc.send_signal(fault.sig)
    else:
        pid = None
        deadline = time.monotonic() + 30
        while pid is None and time.monotonic() < deadline:
            pid = _worker_pid(proc.pid, fault.target.removeprefix("rank"))
            time.sleep(0.05)
        assert pid is not None, f"no torchrun worker with {fault.target}"
        os.kill(pid, fault.sig)


def flip_byte(folder: Path, pattern: str, offset: int | None = None) -> Path:
    """XOR one byte of the (first) file matching ``pattern`` in ``folder``; returns its path."""
    matches = sorted(glob.glob(str(folder / pattern)))
    assert matches, f"no file {pattern} in {folder}"
    path = Path(matches[0])
    data = bytearray(path.read_bytes())
    data[len(data) // 2 if offset is None else offset] ^= 0xFF
    path.write_bytes(bytes(data))
    return path


def run_case(case: Case, folder: Path, prefix: str) -> Outcome:
    """Run ``case`` in ``folder`` (the corpus ``prefix`` filled in); what every process did."""
    folder.mkdir(parents=True, exist_ok=True)
    out = Outcome()
    if case.own_corpus:
        (folder / "corpus").mkdir()
        for ext in (".bin", ".idx", ".json"):
            if os.path.exists(prefix + ext):
                shutil.copy(prefix + ext, folder / "corpus" / (Path(prefix).name + ext))
        prefix = str(folder / "corpus" / Path(prefix).name)
    if case.setup:
        done = subprocess.run([PYTHON, *_expand(case.setup, folder, prefix)], env=env(), capture_output=True,
                              text=True, timeout=case.timeout_s)
        assert done.returncode == 0, f"{case.name}: setup failed: {done.stderr[-2000:]}"
    if case.fault.kind == "flip":
        flip_byte(folder, case.fault.file, case.fault.offset)
    cmd = _command(case, folder, prefix)
    copies = 2 if case.fault.kind == "concurrent" else 1
    errs = [open(folder / f"stderr{i}.txt", "w+", encoding="utf-8") for i in range(copies)]
    procs = [subprocess.Popen(cmd, env=env(), cwd=folder, stdout=subprocess.DEVNULL, stderr=errs[i],
                              start_new_session=True, preexec_fn=_as_in_a_terminal) for i in range(copies)]
    fault_at = time.monotonic()
    workers: list[int] = []
    try:
        if case.fault.kind == "signal":
            deadline = time.monotonic() + case.timeout_s
            while case.fault.when_exists and not glob.glob(str(folder / case.fault.when_exists)):
                assert procs[0].poll() is None and time.monotonic() < deadline, \
                    f"{case.name}: {case.fault.when_exists} never appeared"
                time.sleep(0.02)
            time.sleep(case.fault.after_ms / 1000)
            workers = list(_children(procs[0].pid)) if case.torchrun else []
            _send(procs[0], case.fault)
            fault_at = time.monotonic()
            if case.fault.again_ms is not None:
                time.sleep(case.fault.again_ms / 1000)
                if procs[0].poll() is None:
                    _send(procs[0], case.fault)
        for p in procs:
            p.wait(timeout=max(1.0, case.timeout_s - (time.monotonic() - fault_at)))
        _wait_pids(workers, 30)   # an agent killed on purpose leaves its workers: they must end too
        out.seconds_after_fault = time.monotonic() - fault_at
    except subprocess.TimeoutExpired:
        out.timed_out = True
    finally:
        for p in procs:
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()
        _wait_pids(workers, 0)
    out.codes = [p.returncode for p in procs]
    for fh in errs:
        fh.seek(0)
        out.stderr.append(fh.read())
        fh.close()
    for log in sorted((folder / "torchrun-logs").glob("*/attempt_*/*/stderr.log")):
        out.worker_stderr[f"{log.parent.parent.name}/rank{log.parent.name}"] = log.read_text()
    if case.then:
        done = subprocess.run([PYTHON, *_expand(case.then, folder, prefix)], env=env(), capture_output=True,
                              text=True, timeout=case.timeout_s)
        out.then_code, out.then_stderr = done.returncode, done.stderr
    return out


def _stderr_problems(who: str, text: str, failed: bool | None, must_say: str = "") -> list[str]:
    """One stream against the promise: no traceback; no error line on success; on failure the
    last line is the one error line.  ``failed=None``: either (a torchrun worker's status is not
    always known)."""
    lines = [x for x in text.splitlines() if x.strip()]
    errors = [x for x in lines if x.startswith("error:")]
    problems = []
    if "Traceback" in text or "frame #" in text:
        problems.append(f"{who}: a traceback on stderr: {text[-1500:]}")
    others = [x for x in lines if not x.startswith(("error:", *NOTES))]
    if others:
        problems.append(f"{who}: lines that are neither the error nor a note: {others[:5]}")
    if failed is False and errors:
        problems.append(f"{who}: succeeded but printed {errors}")
    if failed and (len(errors) != 1 or lines[-1] != errors[0]):
        problems.append(f"{who}: failed without exactly one error line at the end: {lines[-5:]}")
    if failed is None and len(errors) > 1:
        problems.append(f"{who}: {len(errors)} error lines: {errors}")
    if must_say and errors and must_say not in errors[0]:
        problems.append(f"{who}: the error line does not say {must_say!r}: {errors[0]}")
    return problems


def _damaged_files(folder: Path) -> list[str]:
    from labsupport.training import checkpoint as ckpt  # noqa: PLC0415 - torch only when a case ran

    out = []
    for path in sorted(p for p in folder.rglob("step=*") if p.suffix == ".ckpt" or p.is_dir()):
        try:
            ckpt._read_verified(path)
        except Exception as exc:  # noqa: BLE001 - DamagedCheckpoint and whatever torch.load raises
            out.append(f"{path.name}: {exc}")
    for log in sorted(folder.rglob("log.jsonl")):
        for n, line in enumerate(log.read_text(encoding="utf-8").splitlines(), 1):
            try:
                json.loads(line)
            except ValueError:
                out.append(f"{log.name} line {n} is not JSON: {line[:80]!r}")
    return out


def worker_codes(torchrun_stderr: str) -> list[int]:
    """The workers' statuses in torchrun's failure report (``exitcode  : 2``)."""
    import re  # noqa: PLC0415 - only for torchrun cases

    return [int(m) for m in re.findall(r"exitcode\s*:\s*(-?\d+)", torchrun_stderr)]


def broken_promises(case: Case, out: Outcome, folder: Path) -> list[str]:
    """What the run did that the docs do not allow (an empty list: every promise kept)."""
    problems = []
    if out.timed_out:
        return [f"{case.name}: still running after {case.timeout_s:g} s"]
    for i, (code, err) in enumerate(zip(out.codes, out.stderr)):
        if code not in case.codes:
            problems.append(f"{case.name}: exit status {code}, not one of {sorted(case.codes)}: {err[-1500:]}")
        if not case.torchrun:
            problems += _stderr_problems(f"{case.name} (process {i})", err, code not in (0, -9, 137),
                                         case.must_say)
    if case.torchrun:
        if not out.worker_stderr:
            problems.append(f"{case.name}: no worker stderr under torchrun-logs/")
        said = [w for w, text in out.worker_stderr.items() if case.must_say and case.must_say in text]
        for who, text in out.worker_stderr.items():
            problems += _stderr_problems(f"{case.name} {who}", text, None)
        if case.must_say and not said:
            problems.append(f"{case.name}: no worker's error says {case.must_say!r}: {out.worker_stderr}")
        if case.every_worker and len(said) != len(out.worker_stderr):
            problems.append(f"{case.name}: not every worker's error says {case.must_say!r}: {out.worker_stderr}")
        if case.worker_codes is not None:
            codes = worker_codes(out.stderr[0])
            if not codes or not set(codes) <= case.worker_codes:
                problems.append(f"{case.name}: workers ended with {codes}, not in {sorted(case.worker_codes)}")
    if case.within_s is not None and (out.seconds_after_fault or 0) > case.within_s:
        problems.append(f"{case.name}: ended {out.seconds_after_fault:.1f} s after the fault, "
                        f"more than {case.within_s:g} s")
    if case.fault.kind != "flip":   # the flipped file is damaged on purpose
        problems += [f"{case.name}: damaged under a final name: {x}" for x in _damaged_files(folder)]
    if case.then and out.then_code != 0:
        problems.append(f"{case.name}: the next run failed ({out.then_code}): {out.then_stderr[-1500:]}")
    return problems
