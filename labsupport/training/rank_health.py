"""Which rank stopped responding, under torchrun — chapter 6's training command (docs/training.md).

Each rank runs a heartbeat thread that writes ``labsupport/restart<N>/beat/<rank>`` =
``"<step> <time> <host> <pid>"`` to the process group's store every :data:`BEAT_S` seconds,
independent of the training steps, so a rank that is SIGSTOPped or SIGKILLed in the middle of a
step stops beating at once.  When a collective fails (the peer's socket closed) or times out
(``trainer.rank_timeout_s``), :meth:`RankHealth.collective` samples every beat, waits
:data:`SETTLE_S` seconds and samples again: the ranks whose beat did not move are the ones that
stopped, and the error names them.  A stopped rank on this machine (state ``T``) is SIGKILLed
then, so that torchrun (which sends SIGTERM, and waits 30 s before SIGKILL for a process that
cannot run its handler) ends or restarts the job at once: the job ends within
``rank_timeout_s + SETTLE_S`` plus torchrun's own monitoring (about a second).

When the torchrun agent goes away (killed: it is this process's parent, and hosts the store), the
heartbeat sees this process re-parented, or its store write fails: the thread prints one line,
``error: rank R: the torchrun agent ... is gone``, and the process leaves with status 1 (the
training would otherwise go on, with no agent to stop or restart it).

Keys carry ``TORCHELASTIC_RESTART_COUNT``: torchrun keeps its store across restarts, and a
restarted worker must never read a dead worker's beats.
"""
from __future__ import annotations

import contextlib
import datetime
import os
import signal
import socket
import threading
import time
from typing import Any, Iterator

__all__ = ["RankHealth", "BEAT_S", "SETTLE_S"]

BEAT_S = 0.5      #: seconds between two heartbeats of a rank
SETTLE_S = 2.0    #: seconds a waiting rank watches the beats before naming the ranks that stopped


def _restart_count() -> int:
    return int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0") or 0)


def _stopped_here(host: str, pid: int) -> bool:
    """Is ``pid`` a stopped (SIGSTOP, state T) labsupport process on this machine?"""
    if host != socket.gethostname() or pid == os.getpid():
        return False
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            state = fh.read().rsplit(b")", 1)[1].split()[0]
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            ours = b"labsupport" in fh.read()
    except (OSError, IndexError):
        return False
    return state in (b"T", b"t") and ours


class TrainingError(RuntimeError):
    """The run cannot go on (a non-finite loss, a rank that stopped responding): exit status 1.
    (:mod:`labsupport.training.faults` exports it; it lives here, where the first of them is raised.)"""


class RankHealth:
    """Heartbeats in the process group's store, and the names of the ranks that stopped beating."""

    def __init__(self, store: Any, rank: int, world: int, timeout: float, *, beat_s: float = BEAT_S,
                 settle_s: float = SETTLE_S) -> None:
        self.store, self.rank, self.world, self.timeout = store, rank, world, timeout
        self.beat_s, self.settle_s = beat_s, settle_s
        self.prefix = f"labsupport/restart{_restart_count()}/beat/"   # also under the group's own prefix
        self.step = 0
        self._stop = threading.Event()
        self._leaving = threading.Lock()
        self._parent = os.getppid()
        self._thread: threading.Thread | None = None

    @classmethod
    def create(cls, run: Any) -> "RankHealth | None":
        """The health of ``run``'s rank in the default group (None without one), its thread started."""
        import torch.distributed as dist  # noqa: PLC0415 - the trainer has imported it already

        try:
            store = dist.distributed_c10d._get_default_store()
        except (AttributeError, RuntimeError, ValueError):
            return None
        health = cls(store, run.rank, run.world, run.settings.config.trainer.rank_timeout_s)
        health.start()
        return health

    # ------------------------------------------------------------------ the heartbeat thread
    def _write(self) -> None:
        self.store.set(f"{self.prefix}{self.rank}",
                       f"{self.step} {time.time():.3f} {socket.gethostname()} {os.getpid()}")

    def start(self) -> None:
        """Write the first beat now (a store that is already gone raises here), then every ``beat_s``."""
        self._write()
        self._thread = threading.Thread(target=self._run, name="labsupport-heartbeat", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(self.beat_s):
            # the agent is the parent: when it dies this process is re-parented, which is seen
            # before the store write fails (torch logs that failure with ~20 lines of C++ frames)
            if self.agent_gone():
                self._leave("its process exited")
            try:
                self._write()
            except Exception as exc:  # noqa: BLE001 - DistNetworkError, DistStoreError, RuntimeError
                if not self._stop.is_set():
                    self._leave((str(exc).strip().splitlines() or [type(exc).__name__])[0][:100])

    def agent_gone(self) -> bool:
        """Has the process that started this rank (torchrun's agent) exited?"""
        return os.getppid() != self._parent

    def _leave(self, why: str) -> None:
        """One line, status 1, at once: the agent is gone (only the first caller writes)."""
        self._leaving.acquire()   # the thread and the main thread may both find it: one line
        where = f"{os.environ.get('MASTER_ADDR', '?')}:{os.environ.get('MASTER_PORT', '?')}"
        os.write(2, (f"error: rank {self.rank}: the torchrun agent (pid {self._parent}, the store at {where}) is "
                     f"gone at step {self.step} ({why}); the checkpoints already written are intact — start the "
                     "job again with --resume-if-exists\n").encode())
        os._exit(1)

    def beat(self, step: int) -> None:
        """Say "rank r is at step ``step``" (the thread writes it with its next beat)."""
        self.step = step

    def stop(self) -> None:
        """End the heartbeat thread (before the group is torn down)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=2 * self.beat_s + 5)

    # ------------------------------------------------------------------ who stopped
    def _beats(self) -> dict[int, list[str] | None]:
        out: dict[int, list[str] | None] = {}
        for r in range(self.world):
            if r == self.rank:
                continue
            try:
                out[r] = self.store.get(f"{self.prefix}{r}").decode().split()
            except Exception:  # noqa: BLE001 - no key (never started) or the store is gone
                out[r] = None
        return out

    def silent_ranks(self) -> list[str]:
        """The ranks whose beat did not move for ``settle_s`` seconds: "rank 1 (last heard at
        step 3, 12 s ago)"; a stopped one on this machine is SIGKILLed (module docstring)."""
        with contextlib.suppress(Exception):
            self.store.set_timeout(datetime.timedelta(seconds=5))
        before = self._beats()
        time.sleep(self.settle_s)
        after = self._beats()
        out = []
        for r, beat in after.items():
            if beat is None:
                out.append(f"rank {r} (never heard from)")
            elif beat == before.get(r):
                step, when, host, pid = (beat + ["", ""])[:4]
                killed = ""
                if pid.isdigit() and _stopped_here(host, int(pid)):
                    with contextlib.suppress(OSError):
                        os.kill(int(pid), signal.SIGKILL)
                        killed = f"; it was stopped (SIGSTOP): killed pid {pid} so that torchrun ends the job"
                out.append(f"rank {r} (last heard at step {step}, {time.time() - float(when):.0f} s ago{killed})")
        return out

    @contextlib.contextmanager
    def collective(self, step: int, what: str) -> Iterator[None]:
        """Run a collective; a timeout or a lost peer becomes TrainingError naming the silent ranks."""
        try:
            yield
        except RuntimeError as exc:  # DistBackendError and gloo's timeout are RuntimeErrors
            if self.agent_gone():     # the peers left because the agent did: do not ask its store
                self._leave("its process exited")
            silent = self.silent_ranks()
            first = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:120]
            who = ", ".join(silent) if silent else "another rank"
            raise TrainingError(f"step {step}: {who} stopped responding — rank {self.rank} waited in {what} "
                                f"(trainer.rank_timeout_s={self.timeout:g}; "
                                f"{first}); under torchrun --max-restarts the job restarts from the last "
                                "checkpoint") from None
