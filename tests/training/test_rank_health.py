"""Where chapter 6's ranks are (labsupport.training.faults.RankHealth), on an in-memory store: a
rank stopped anywhere before a collective is named by the rank that waited for it, one at the same
collective is not (unless it is stopped on this machine: then it is named and killed), and a gone
torchrun agent is one line.  tests/faults/ and tests/training/test_torchrun_restart.py stop real
torchrun workers."""
from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from labsupport.training.faults import RankHealth, TrainingError


class MemoryStore:
    """The calls RankHealth makes on a c10d store."""

    def __init__(self, broken: bool = False) -> None:
        self.data: dict[str, bytes] = {}
        self.broken = broken

    def set(self, key: str, value: str) -> None:
        if self.broken:
            raise RuntimeError("Broken pipe (the store's host is gone)\nC++ frames")
        self.data[key] = value.encode()

    def get(self, key: str) -> bytes:
        if key not in self.data:
            raise RuntimeError(f"no key {key}")
        return self.data[key]

    def set_timeout(self, _timeout) -> None:
        pass


def test_a_rank_stopped_mid_step_is_named_not_one_at_the_same_collective():
    store = MemoryStore()
    ranks = [RankHealth(store, r, 4, 10.0) for r in range(3)]
    for step in (1, 2):                  # two steps: an all-reduce each
        for h in ranks:
            h.enter(step)
    ranks[0].enter(3)
    ranks[1].enter(3)                    # rank 2 stopped in step 3 before its all-reduce; rank 3 never started
    silent = ranks[0].silent_ranks()
    assert [s.split(" (")[0] for s in silent] == ["rank 2", "rank 3"], silent
    assert silent[0].startswith("rank 2 (last heard at step 2, ") and silent[1] == "rank 3 (never heard from)"


def test_a_failed_collective_becomes_one_training_error_naming_the_silent_rank():
    store = MemoryStore()
    other, me = RankHealth(store, 1, 2, 7.0), RankHealth(store, 0, 2, 7.0)
    other.enter(1)
    me.enter(1)
    with pytest.raises(TrainingError) as caught:
        with me.collective(2, "the gradient all-reduce"):
            raise RuntimeError("Connection closed by peer [127.0.0.1]:1234\nmore lines")
    text = str(caught.value)
    assert text.startswith("step 2: rank 1 (last heard at step 1, ")
    assert "rank 0 waited in the gradient all-reduce" in text
    assert "trainer.rank_timeout_s=7" in text and "Connection closed by peer" in text and "\n" not in text


def test_a_rank_stopped_inside_the_collective_on_this_machine_is_named_and_killed():
    """Both ranks entered the collective; the other is SIGSTOPped inside it: its process state names it."""
    stopped = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", "labsupport"])
    try:
        os.kill(stopped.pid, signal.SIGSTOP)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            with open(f"/proc/{stopped.pid}/stat", "rb") as fh:
                if fh.read().rsplit(b")", 1)[1].split()[0] == b"T":
                    break
            time.sleep(0.02)
        store = MemoryStore()
        me = RankHealth(store, 0, 2, 5.0)
        me.enter(4)
        store.set(f"{me.prefix}1", f"1 4 {time.time():.3f} {socket.gethostname()} {stopped.pid}")
        silent = me.silent_ranks()
        assert len(silent) == 1 and silent[0].startswith("rank 1 (last heard at step 4, "), silent
        assert f"killed pid {stopped.pid}" in silent[0]
        assert stopped.wait(timeout=10) == -signal.SIGKILL
    finally:
        if stopped.poll() is None:
            stopped.kill()
            stopped.wait()


def test_a_gone_agent_is_one_line():
    with pytest.raises(TrainingError) as caught:
        RankHealth(MemoryStore(broken=True), 1, 2, 5.0).enter(3)
    text = str(caught.value)
    assert text.startswith("rank 1: the torchrun agent (pid ") and "is gone at step 3 (Broken pipe" in text
    assert "--resume-if-exists" in text and "\n" not in text
    health = RankHealth(MemoryStore(), 0, 2, 5.0)
    health._parent = -1                  # as if this process had been re-parented: its agent exited
    with pytest.raises(TrainingError, match="the torchrun agent .* is gone at step 2 \\(its process exited\\)"):
        health.enter(2)


def test_a_store_that_is_gone_leaves_no_cpp_frames_on_stderr(tmp_path):
    """A real TCPStore whose server process was killed: torch logs a ~20-line C++ warning on fd 2
    before it raises; RankHealth's write keeps that off stderr and says its own line."""
    script = tmp_path / "gone.py"
    script.write_text(
        "import socket, subprocess, sys, time\n"
        "from datetime import timedelta\n"
        "import torch.distributed as dist\n"
        "from labsupport.training.faults import RankHealth, TrainingError\n"
        "s = socket.socket(); s.bind(('127.0.0.1', 0)); port = s.getsockname()[1]; s.close()\n"
        "srv = subprocess.Popen([sys.executable, '-c', 'import sys, time, torch.distributed as d; "
        "from datetime import timedelta; st = d.TCPStore(\"127.0.0.1\", int(sys.argv[1]), is_master=True, "
        "wait_for_workers=False, timeout=timedelta(seconds=30)); print(1, flush=True); time.sleep(60)', str(port)],"
        " stdout=subprocess.PIPE)\n"
        "srv.stdout.readline()\n"
        "store = dist.TCPStore('127.0.0.1', port, is_master=False, timeout=timedelta(seconds=5))\n"
        "health = RankHealth(store, 1, 2, 5.0)\n"
        "health.enter(1)\n"
        "srv.kill(); srv.wait(); time.sleep(0.3)\n"
        "for step in range(2, 12):  # the kernel may accept one write into the dead socket before it fails\n"
        "    try:\n"
        "        health.enter(step)\n"
        "    except TrainingError as exc:\n"
        "        print('error:', exc, file=sys.stderr)\n"
        "        break\n"
        "    time.sleep(0.2)\n")
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[2]))
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120, env=env)
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "the torchrun agent" in lines[0] and "is gone at step " in lines[0], done.stderr
