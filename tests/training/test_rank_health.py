"""The heartbeat of chapter 6's ranks (labsupport.training.rank_health), on an in-memory store: a
rank whose beat stops moving is named, one that keeps beating is not, whatever step it is at —
the case of issue #32, a rank stopped in the middle of a step.  No process is started here;
tests/faults/ and tests/training/test_torchrun_restart.py stop real torchrun workers."""
from __future__ import annotations

import threading
import time

import pytest

from labsupport.training.faults import TrainingError
from labsupport.training.rank_health import RankHealth


class MemoryStore:
    """The three calls RankHealth makes on a c10d store."""

    def __init__(self) -> None:
        self.data: dict[str, bytes] = {}
        self.lock = threading.Lock()

    def set(self, key: str, value: str) -> None:
        with self.lock:
            self.data[key] = value.encode()

    def get(self, key: str) -> bytes:
        with self.lock:
            if key not in self.data:
                raise RuntimeError(f"no key {key}")
            return self.data[key]

    def set_timeout(self, _timeout) -> None:
        pass


def test_the_rank_whose_beat_stopped_is_named_not_the_one_still_beating():
    store = MemoryStore()
    ranks = [RankHealth(store, r, 4, 10.0, beat_s=0.05, settle_s=0.4) for r in range(3)]
    for h in ranks:
        h.beat(5)
        h.start()
    ranks[2].beat(4)
    time.sleep(0.2)
    ranks[2].stop()          # rank 2 stops beating (as a SIGSTOP'd process does), at step 4
    ranks[1].beat(5)         # rank 1 is at the same step as rank 0, and alive
    try:
        silent = ranks[0].silent_ranks()
    finally:
        for h in ranks:
            h.stop()
    assert [s.split(" (")[0] for s in silent] == ["rank 2", "rank 3"], silent
    assert silent[0].startswith("rank 2 (last heard at step 4, ") and silent[1] == "rank 3 (never heard from)"


def test_a_failed_collective_becomes_one_training_error_naming_the_silent_rank():
    store = MemoryStore()
    alive, me = (RankHealth(store, r, 2, 7.0, beat_s=0.05, settle_s=0.3) for r in (1, 0))
    alive.start()
    alive.stop()             # rank 1's beat is frozen from here on
    with pytest.raises(TrainingError) as caught:
        with me.collective(3, "the gradient all-reduce"):
            raise RuntimeError("Connection closed by peer [127.0.0.1]:1234\nmore lines")
    text = str(caught.value)
    assert text.startswith("step 3: rank 1 (last heard at step 0, ")
    assert "rank 0 waited in the gradient all-reduce" in text
    assert "trainer.rank_timeout_s=7" in text and "Connection closed by peer" in text and "\n" not in text
