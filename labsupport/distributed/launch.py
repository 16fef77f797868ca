"""Launch a real ``torch.distributed`` process group from a notebook cell (chapter 5).

``run_workers(fn, world_size)`` starts ``world_size`` processes, joins them into one process
group (gloo on CPU, NCCL on GPUs), calls ``fn(*args, **kwargs)`` in each and returns the
results to the caller as a list ordered by rank, so a notebook prints them in the same order
on every run.  What a worker prints is collected and echoed in rank order too.

Safety rules:

* ``fn`` must live in an importable module (e.g. ``labsupport.distributed.workers``); a
  function defined in a notebook cell cannot be loaded by the worker processes, so it is
  refused up front with a message saying so.
* The process group is created with ``init_method="file://…"`` in a fresh temporary folder
  (no port to collide with) and a timeout; ``destroy_process_group()`` runs at the end.
* The whole run has a deadline.  A worker that raises, dies or hangs ends the run with a
  :class:`WorkerError` / :class:`WorkerTimeout` naming the rank (for a hang: where every
  unfinished rank was stuck); all workers are stopped and the temporary folder is removed,
  so nothing is left behind.

Workers start from a ``forkserver`` that has already imported torch (about 0.1 s per launch
after the first, instead of ~1 s per process with ``spawn``); platforms without it use spawn.
"""
from __future__ import annotations

import datetime
import faulthandler
import io
import multiprocessing as mp
import os
import pickle
import re
import shutil
import signal
import sys
import tempfile
import time
import traceback
import warnings
from multiprocessing.connection import wait as _wait_any
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

__all__ = ["run_workers", "WorkerError", "WorkerTimeout", "BACKENDS"]

BACKENDS = ("gloo", "nccl")
_THIS_FILE = Path(__file__).name
_PRELOAD = ["torch", "torch.distributed", __name__, __name__.rpartition(".")[0] + ".workers"]
_STACK_SIGNAL = getattr(signal, "SIGUSR1", None)
_ERROR_GRACE_S = 0.3  # after a first error, how long to wait for the others' reports
_KEEP_ALIVE: list = []  # the faulthandler file of this worker (kept open for the signal handler)


class WorkerError(RuntimeError):
    """A worker raised or died.  ``rank`` is the failing rank; ``worker_traceback`` its traceback
    text; ``stderr`` maps rank → what that worker wrote to stderr; ``pids`` the workers' pids
    (all of them have been stopped when this is raised)."""

    def __init__(self, message: str, rank: int | None, worker_traceback: str = "",
                 stderr: Mapping[int, str] | None = None, pids: Sequence[int] = ()):
        super().__init__(message)
        self.rank = rank
        self.worker_traceback = worker_traceback
        self.stderr = dict(stderr or {})
        self.pids = list(pids)


class WorkerTimeout(WorkerError, TimeoutError):
    """Some ranks did not finish before the deadline.  ``ranks`` lists them; ``stacks`` maps
    rank → the Python stack the rank was in when it was stopped (when the platform can tell)."""

    def __init__(self, message: str, ranks: Sequence[int], stacks: Mapping[int, str],
                 stderr: Mapping[int, str] | None = None, pids: Sequence[int] = ()):
        super().__init__(message, ranks[0] if ranks else None, "", stderr, pids)
        self.ranks = list(ranks)
        self.stacks = dict(stacks)


# ----------------------------------------------------------------------------- worker side

def clean_message(text: str) -> str:
    """Drop the ``[rank0]:[F1129 21:24:19.113 ProcessGroupGloo.cpp:2216]`` prefixes torch puts on
    C++ errors (they hold a timestamp), keep the first line."""
    text = re.sub(r"\[rank\d+\]:\[[A-Z]\d{4} [\d:.]+ [^\]]*\]\s*", "", str(text))
    text = re.sub(r"\[[^\]\s]*\.(?:cc|cpp|h|hpp):\d+\]\s*", "", text).strip()
    return text.splitlines()[0].strip() if text else ""


def _where(tb: traceback.StackSummary) -> str:
    """``file.py:line in function`` of the innermost frame that is not this launcher."""
    frames = [f for f in tb if Path(f.filename).name != _THIS_FILE] or list(tb)
    if not frames:
        return "?"
    f = frames[-1]
    return f"{Path(f.filename).name}:{f.lineno} in {f.name}"


def _bootstrap(fn: Callable, args: tuple, kwargs: dict, rank: int, world_size: int, backend: str,
               store: str, pg_timeout_s: float, env: dict, conn, folder: str) -> None:
    """Entry point of one worker process (runs in the child)."""
    os.environ.update(env)
    base = Path(folder)
    for fd, name in ((1, f"stdout.{rank}"), (2, f"stderr.{rank}")):
        sink = os.open(base / name, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        os.dup2(sink, fd)
        os.close(sink)
    sys.stdout = io.TextIOWrapper(os.fdopen(1, "wb", closefd=False), encoding="utf-8", line_buffering=True)
    sys.stderr = io.TextIOWrapper(os.fdopen(2, "wb", closefd=False), encoding="utf-8", line_buffering=True)
    if _STACK_SIGNAL is not None:
        stack_file = open(base / f"stack.{rank}", "w", encoding="utf-8")
        _KEEP_ALIVE.append(stack_file)
        faulthandler.register(_STACK_SIGNAL, file=stack_file, all_threads=True)
    warnings.simplefilter("ignore")
    started = False
    try:
        import torch  # noqa: PLC0415 - runs in the spawned worker process
        import torch.distributed as dist  # noqa: PLC0415 - runs in the spawned worker process

        torch.set_num_threads(1)
        if backend == "nccl":
            torch.cuda.set_device(rank % max(1, torch.cuda.device_count()))
        dist.init_process_group(backend, init_method=f"file://{store}", rank=rank, world_size=world_size,
                                timeout=datetime.timedelta(seconds=pg_timeout_s))
        started = True
        result = fn(*args, **kwargs)
        dist.barrier()  # nobody tears the group down while a peer still uses it
        dist.destroy_process_group()
        payload = pickle.dumps(("ok", rank, result, time.monotonic()))
    except BaseException as exc:  # noqa: BLE001 - every failure is reported to the parent
        tb = traceback.extract_tb(exc.__traceback__)
        payload = pickle.dumps(("error", rank, type(exc).__name__, clean_message(str(exc)), _where(tb),
                                "".join(traceback.format_exception(exc)), started, time.monotonic()))
        sys.stdout.flush()
        sys.stderr.flush()
        conn.send_bytes(payload)
        conn.close()
        os._exit(1)  # no teardown: a peer may still be blocked in a collective with us
    sys.stdout.flush()
    sys.stderr.flush()
    conn.send_bytes(payload)
    conn.close()


# ----------------------------------------------------------------------------- parent side

def _context():
    methods = mp.get_all_start_methods()
    if "forkserver" in methods:
        ctx = mp.get_context("forkserver")
        ctx.set_forkserver_preload(_PRELOAD)  # only takes effect when the server first starts
        return ctx
    return mp.get_context("spawn")


def _check_fn(fn: Callable) -> None:
    if not callable(fn):
        raise TypeError(f"run_workers: fn must be a function, got {type(fn).__name__}")
    module = getattr(fn, "__module__", None)
    qualname = getattr(fn, "__qualname__", getattr(fn, "__name__", repr(fn)))
    if module in (None, "__main__", "__mp_main__") or "<locals>" in qualname or "<lambda>" in qualname:
        raise ValueError(
            f"run_workers: fn {qualname!r} is defined in {module or 'no module'}; worker processes can only "
            "load functions from an importable module (a notebook cell is not one). Put the worker in a .py "
            "module, e.g. labsupport/distributed/workers.py, and pass it from there")
    try:
        pickle.dumps(fn)
    except Exception as exc:  # noqa: BLE001
        raise ValueError(f"run_workers: fn {module}.{qualname} cannot be pickled for the workers: {exc}") from exc


def _check_nccl(world_size: int, env: Mapping[str, str]) -> None:
    import torch  # noqa: PLC0415 - torch only when called (start-up time of the importing command)

    if not torch.cuda.is_available():
        raise ValueError("run_workers: backend='nccl' needs CUDA GPUs and this machine has none "
                         f"(torch {torch.__version__}); use backend='gloo' on CPU")
    gpus = torch.cuda.device_count()
    shared = env.get("NCCL_MULTI_RANK_GPU_ENABLE", os.environ.get("NCCL_MULTI_RANK_GPU_ENABLE", "0")) == "1"
    if world_size > gpus and not shared:
        raise ValueError(f"run_workers: NCCL runs one rank per GPU and this machine has {gpus} GPU(s) for "
                         f"world_size={world_size}; use world_size ≤ {gpus} (NCCL ≥ 2.30 can share a GPU with "
                         "env={'NCCL_MULTI_RANK_GPU_ENABLE': '1'}, experimental)")


def _read(path: Path, limit: int = 20_000) -> str:
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""
    return text[-limit:]


_FRAME = re.compile(r'File "([^"]+)", line (\d+) in (\S+)')


def _summarise_stack(dump: str) -> str:
    """From a faulthandler dump (all threads), the worker's main thread: the frame that called
    into torch (or the innermost frame) as ``file.py:line in fn``, plus the torch function it is in."""
    for block in re.split(r"\n(?=(?:Current thread|Thread) 0x)", dump):
        frames = _FRAME.findall(block)  # innermost first
        mine = [i for i, (f, _, n) in enumerate(frames)
                if n == "_bootstrap" and Path(f).name == _THIS_FILE]
        if not mine:
            continue
        frames = frames[: mine[0]]
        if not frames:
            return "starting up"
        outside = [(f, l, n) for f, l, n in frames if "torch" not in Path(f).parts]
        f, l, n = outside[0] if outside else frames[0]
        where = f"{Path(f).name}:{l} in {n}"
        api = [n2 for f2, _, n2 in frames[: frames.index((f, l, n))]
               if "distributed" in Path(f2).parts and not n2.startswith("_") and n2 not in ("wrapper", "wait")]
        if api:
            return where + f", waiting in torch.distributed.{api[-1]}"
        if n == "init_process_group" or any(n2 == "init_process_group" for _, _, n2 in frames):
            return where + ", joining the process group"
        return where + ", in its own code (not in a collective)"
    return "no stack available"


def _describe_exit(code: int | None) -> str:
    if code is None:
        return "is still running"
    if code < 0:
        try:
            return f"was killed by signal {signal.Signals(-code).name}"
        except ValueError:
            return f"was killed by signal {-code}"
    return f"exited with code {code}"


def run_workers(fn: Callable, world_size: int, args: Sequence[Any] = (), kwargs: Mapping[str, Any] | None = None,
                *, backend: str = "gloo", timeout: float = 60.0, env: Mapping[str, str] | None = None,
                echo: bool = True) -> list[Any]:
    """Run ``fn(*args, **kwargs)`` on ``world_size`` ranks of a fresh process group; return the results.

    fn: a module-level function (see the module docstring); inside it, ``dist.get_rank()`` and
        ``dist.get_world_size()`` work as in any distributed script.  Its return value must be
        picklable; return plain lists (``tensor.tolist()``) to print the same on CPU and CUDA.
    world_size: number of processes (≥ 1).  backend: ``"gloo"`` (CPU) or ``"nccl"`` (one process
        per GPU; on one GPU use world_size 1).  timeout: seconds for the whole run, start-up
        included; the process group's own timeout is set a little longer so that this deadline
        fires first.  env: extra environment variables for the workers (e.g. ``NCCL_DEBUG``).
    echo: print what each worker printed, prefixed ``[rank r]``, in rank order.

    Returns a list of ``world_size`` results, index = rank.  Raises :class:`WorkerError` when a
    rank raises or dies (naming it) and :class:`WorkerTimeout` when ranks are still running at the
    deadline; in every case all workers are stopped before the call returns.
    """
    env = _check_arguments(fn, world_size, backend, timeout, env)
    folder = Path(tempfile.mkdtemp(prefix="labsupport-pg-"))
    procs: list = []
    readers: dict = {}
    try:
        pg_timeout = timeout + max(5.0, 0.5 * timeout)
        _start_ranks(procs, readers, fn, tuple(args), dict(kwargs or {}), world_size, backend, folder,
                     pg_timeout, env)
        results, errors, pending = _collect(procs, readers, time.monotonic() + timeout)
        if errors:
            _raise_first_error(errors, procs, folder)
        if pending:
            _raise_timeout(sorted(pending), procs, folder, timeout)
        for p in procs:
            p.join(5.0)
        if echo:
            _echo_output(folder, world_size)
        return [results[r] for r in range(world_size)]
    finally:
        _stop(procs)
        for conn in readers.values():
            conn.close()
        shutil.rmtree(folder, ignore_errors=True)


# -- the phases of run_workers: check, start, collect, report a failure, echo

def _check_arguments(fn: Callable, world_size: int, backend: str, timeout: float,
                     env: Mapping[str, str] | None) -> dict[str, str]:
    """Refuse bad arguments before any process starts; return ``env`` as a dict of strings."""
    _check_fn(fn)
    if not isinstance(world_size, int) or isinstance(world_size, bool) or world_size < 1:
        raise ValueError(f"run_workers: world_size must be an int ≥ 1, got {world_size!r}")
    if backend not in BACKENDS:
        raise ValueError(f"run_workers: backend must be one of {BACKENDS}, got {backend!r}")
    if not timeout or timeout <= 0:
        raise ValueError(f"run_workers: timeout must be a positive number of seconds, got {timeout!r}")
    env = {str(k): str(v) for k, v in (env or {}).items()}
    if backend == "nccl":
        _check_nccl(world_size, env)
    return env


def _start_ranks(procs: list, readers: dict, fn: Callable, args: tuple, kwargs: dict, world_size: int,
                 backend: str, folder: Path, pg_timeout: float, env: dict) -> None:
    """Start one process per rank; fill ``procs`` (index = rank) and ``readers`` (rank → the pipe
    its result comes back on) as they start, so the caller can stop them whatever happens."""
    ctx = _context()
    for rank in range(world_size):
        reader, writer = ctx.Pipe(duplex=False)
        p = ctx.Process(target=_bootstrap, name=f"labsupport-rank{rank}", daemon=True,
                        args=(fn, args, kwargs, rank, world_size, backend, str(folder / "store"),
                              pg_timeout, env, writer, str(folder)))
        p.start()
        writer.close()
        procs.append(p)
        readers[rank] = reader


def _receive(rank: int, conn, proc, ready: list) -> tuple | None:
    """The message rank ``rank`` sent, ``("died", …)`` if it exited without one, or None while it
    is still running."""
    message = None
    if conn in ready or (proc.sentinel in ready and conn.poll()):
        try:
            message = pickle.loads(conn.recv_bytes())
        except EOFError:
            message = None
        except Exception as exc:  # noqa: BLE001 - an unpicklable result, say
            message = ("error", rank, type(exc).__name__,
                       f"its result could not be unpickled in the parent: {exc}",
                       "run_workers", "", True, time.monotonic())
    elif proc.sentinel not in ready:
        return None
    if message is None:  # exited without a word
        proc.join(0.1)
        return ("died", rank, proc.exitcode, time.monotonic())
    return message


def _collect(procs: list, readers: dict, deadline: float) -> tuple[dict[int, Any], list[tuple], set[int]]:
    """Wait for every rank's report until ``deadline`` (or shortly after a first error).

    Returns (results by rank, error reports, ranks still pending)."""
    results: dict[int, Any] = {}
    errors: list[tuple] = []
    pending = set(range(len(procs)))
    first_error_at = None
    while pending:
        now = time.monotonic()
        if first_error_at is not None and now - first_error_at > _ERROR_GRACE_S:
            break
        if now >= deadline:
            break
        waiting = [readers[r] for r in pending] + [procs[r].sentinel for r in pending]
        ready = _wait_any(waiting, timeout=min(deadline - now, 0.5))
        for rank in sorted(pending):
            message = _receive(rank, readers[rank], procs[rank], ready)
            if message is None:
                continue
            if message[0] == "ok":
                results[rank] = message[2]
            else:
                errors.append(message)
            pending.discard(rank)
            if errors and first_error_at is None:
                first_error_at = time.monotonic()
    return results, errors, pending


def _stderr_of(folder: Path, world_size: int) -> dict[int, str]:
    return {r: _read(folder / f"stderr.{r}") for r in range(world_size)}


def _raise_first_error(errors: list[tuple], procs: list, folder: Path) -> None:
    """Stop every rank and raise :class:`WorkerError` for the likeliest culprit."""
    world_size, pids = len(procs), [p.pid for p in procs]
    _stop(procs)
    stderr = _stderr_of(folder, world_size)
    # a rank that died without a word is the likeliest cause (its peers then fail on a closed
    # connection, possibly before its death is noticed here); otherwise the earliest report
    first = min(errors, key=lambda e: (e[0] != "died", e[-1]))
    others = world_size - 1
    stopped = {0: "it was stopped", 1: "the other rank was stopped"}.get(others,
                                                                         f"the other {others} ranks were stopped")
    if first[0] == "died":
        _, rank, code, _ = first
        started = (folder / f"stdout.{rank}").exists()
        hint = "" if started else (" (it never reached fn: the worker could not start, e.g. fn's module "
                                   "failed to import; its traceback went to this process's stderr)")
        raise WorkerError(f"rank {rank} {_describe_exit(code)} before returning a result{hint}; {stopped}",
                          rank, "", stderr, pids)
    _, rank, ename, text, where, tb, started, _ = first
    phase = "" if started else " while joining the process group"
    raise WorkerError(f"rank {rank} raised {ename}{phase}: {text} ({where}); {stopped}", rank, tb, stderr, pids)


def _raise_timeout(late: list[int], procs: list, folder: Path, timeout: float) -> None:
    """Ask the late ranks where they are, stop every rank and raise :class:`WorkerTimeout`."""
    world_size, pids = len(procs), [p.pid for p in procs]
    stacks = _dump_stacks(procs, late, folder)
    _stop(procs)
    stderr = _stderr_of(folder, world_size)
    lines = [f"  rank {r}: " + (_summarise_stack(stacks[r]) if r in stacks else
                                "no stack available" if (folder / f"stdout.{r}").exists() else
                                "had not started yet (is the machine overloaded?)") for r in late]
    raise WorkerTimeout(
        f"{len(late)} of {world_size} ranks did not finish within {timeout:g} s "
        f"(rank{'s' if len(late) > 1 else ''} {', '.join(map(str, late))}); all workers were stopped. "
        "Where each one was:\n" + "\n".join(lines), late, stacks, stderr, pids)


def _echo_output(folder: Path, world_size: int) -> None:
    """Print what each rank printed, prefixed ``[rank r]``, in rank order."""
    for rank in range(world_size):
        for line in _read(folder / f"stdout.{rank}").splitlines():
            print(f"[rank {rank}] {line}")


def _dump_stacks(procs: list, ranks: Sequence[int], folder: Path) -> dict[int, str]:
    """Ask each still-running rank for its Python stack (faulthandler on SIGUSR1)."""
    if _STACK_SIGNAL is None:
        return {}
    asked = []
    for r in ranks:
        if procs[r].is_alive():
            try:
                os.kill(procs[r].pid, _STACK_SIGNAL)
                asked.append(r)
            except OSError:
                pass
    stacks: dict[int, str] = {}
    end = time.monotonic() + 3.0  # usually answered in milliseconds; a loaded machine may need longer
    while asked and time.monotonic() < end:
        time.sleep(0.05)
        for r in list(asked):
            text = _read(folder / f"stack.{r}")
            if "_bootstrap" in text:
                stacks[r] = text
                asked.remove(r)
    return stacks


def _stop(procs: list) -> None:
    """Terminate, then kill, every worker still alive, and reap them all."""
    for p in procs:
        if p.is_alive():
            p.terminate()
    end = time.monotonic() + 2.0
    for p in procs:
        p.join(max(0.0, end - time.monotonic()))
    for p in procs:
        if p.is_alive():
            p.kill()
            p.join(2.0)
