"""One run at a time on a save dir, a log, a prefix (issue #32 items 4, 5 and 12): the lock helper
:func:`labsupport.fileio.hold_lock` and the trainer's use of it.

Faults injected: a second trainer on the save dir (or the log) of a live one, a holder killed
with SIGKILL (its lock is taken over), a release racing a waiter, and the temporaries of killed
runs — a ``.write-probe.<pid>.tmp``, and a checkpoint temporary whose pid now belongs to a live
process that did not write it.
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from labsupport.fileio import atomic_write, remove_stale_temporaries, writer_gone
from labsupport.fileio import LockHeld, hold_lock, holder_of
from labsupport.paths import REPO_ROOT
from labsupport.training import checkpoint as ckpt
from labsupport.training.cli import EXIT_ENV
from tests.training import test_faults
from tests.training.test_faults import errors, run_main, tiny

tiny_prefix = test_faults.tiny_prefix   # the module's 12-document corpus (a fixture)

HOLD = ("import sys, time; from labsupport.fileio import hold_lock; "
        "hold_lock(sys.argv[1], 'test'); print('held', flush=True); time.sleep(600)")


def holder_process(lock: Path) -> subprocess.Popen:
    """A process that takes ``lock`` and sleeps (killed by the test)."""
    proc = subprocess.Popen([sys.executable, "-c", HOLD, str(lock)], stdout=subprocess.PIPE, text=True,
                            env=dict(os.environ, PYTHONPATH=str(REPO_ROOT)))
    assert proc.stdout.readline().strip() == "held"
    return proc


# ------------------------------------------------------------------------- the helper
def test_a_second_holder_is_refused_naming_the_first_and_the_file_goes_on_release(tmp_path):
    lock = tmp_path / "sub" / "x.lock"
    with hold_lock(lock, "--save-dir sub") as first:
        assert holder_of(lock)["pid"] == os.getpid() and "command" in holder_of(lock)
        with pytest.raises(LockHeld) as exc:
            hold_lock(lock, "--save-dir sub")          # another open file: refused, even in one process
        assert f"pid {os.getpid()}" in str(exc.value) and "--save-dir sub is in use" in str(exc.value)
        with pytest.raises(LockHeld):                  # a re-entrant take joins only a re-entrant holder
            hold_lock(lock, "x", reentrant=True)
    assert first.fd == -1 and not lock.exists()


def test_reentrant_takes_join_and_release_last(tmp_path):
    lock = tmp_path / "x.lock"
    outer = hold_lock(lock, "x", reentrant=True)
    inner = hold_lock(lock, "x", reentrant=True)
    assert inner is outer
    inner.close()
    assert lock.exists()
    with pytest.raises(LockHeld):
        hold_lock(lock, "x")
    outer.close()
    assert not lock.exists()


def test_a_waiter_that_wakes_on_a_removed_lock_file_takes_the_new_one(tmp_path):
    """The release unlinks the file: a waiter blocked on the old file must not think it holds the lock."""
    lock = tmp_path / "x.lock"
    first = hold_lock(lock, "x")
    got: list = []
    waiter = threading.Thread(target=lambda: got.append(hold_lock(lock, "x", wait=True)))
    waiter.start()
    time.sleep(0.3)
    assert not got                                      # blocked behind the first
    first.close()
    waiter.join(10)
    second = got[0]
    assert lock.exists() and os.stat(lock).st_ino == os.fstat(second.fd).st_ino
    with pytest.raises(LockHeld):                       # the lock is really held by the waiter now
        hold_lock(lock, "x")
    second.close()


def test_the_lock_of_a_killed_holder_is_taken_over(tmp_path):
    lock = tmp_path / "x.lock"
    proc = holder_process(lock)
    try:
        with pytest.raises(LockHeld) as exc:
            hold_lock(lock, "x")
        assert f"pid {proc.pid}" in str(exc.value)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(30)
    assert lock.exists() and holder_of(lock)["pid"] == proc.pid     # the file of a dead holder stays...
    with hold_lock(lock, "x"):                                        # ...and is taken over
        assert holder_of(lock)["pid"] == os.getpid()


def test_a_temporary_whose_pid_was_reused_is_removed(tmp_path):
    """pid 1 is alive, but it started long after 1970, when this file was last written: not its writer."""
    atomic_write(tmp_path / "keep.txt", "x")
    reused = tmp_path / ".keep.txt.1-abcdefgh.tmp"
    reused.write_bytes(b"half")
    os.utime(reused, (0, 0))
    live = tmp_path / ".keep.txt.1-zzzzzzzz.tmp"      # pid 1, written now: could be pid 1's, kept
    live.write_bytes(b"half")
    if not writer_gone(1, reused):
        pytest.skip("no /proc here: process start times are unknown")
    assert remove_stale_temporaries(tmp_path) == [reused]
    assert live.exists()
    assert remove_stale_temporaries(tmp_path, locked=True) == [live]   # under the lock: every one is stale


# ------------------------------------------------------------------------- the trainer
def test_a_second_trainer_on_one_save_dir_is_refused_in_one_line(tmp_path, capsys, tiny_prefix):
    save = tmp_path / "s"
    held = hold_lock(save / ".lock", "a first run")
    try:
        status, err = run_main(capsys, tiny(tiny_prefix), "trainer.max_steps=2", "--save-dir", str(save),
                               "--log-file", str(tmp_path / "log.jsonl"))
    finally:
        held.close()
    assert status == EXIT_ENV and len(errors(err)) == 1, err
    line = errors(err)[0]
    assert f"--save-dir {save} is in use by another run (pid {os.getpid()}" in line, line
    assert "wait for that run to finish" in line and "choose another --save-dir" in line, line
    assert ckpt.checkpoints_newest_first(save) == [] and not (tmp_path / "log.jsonl").exists()
    # once the first run is gone the same command runs, and leaves no lock file behind
    status, err = run_main(capsys, tiny(tiny_prefix), "trainer.max_steps=2", "--save-dir", str(save))
    assert status == 0, err
    assert sorted(p.name for p in save.iterdir()) == [ckpt.checkpoint_name(2, 16)]


def test_a_second_trainer_on_one_log_is_refused(tmp_path, capsys, tiny_prefix):
    log = tmp_path / "log.jsonl"
    with hold_lock(f"{log}.lock", "a first run"):
        status, err = run_main(capsys, tiny(tiny_prefix), "trainer.max_steps=1", "--log-file", str(log))
    assert status == EXIT_ENV and len(errors(err)) == 1 and "--log-file" in errors(err)[0], err
    assert not log.exists()


def test_a_save_dir_locked_by_a_killed_trainer_is_taken_over(tmp_path, capsys, tiny_prefix):
    save = tmp_path / "s"
    proc = holder_process(save / ".lock")
    status, err = run_main(capsys, tiny(tiny_prefix), "trainer.max_steps=1", "--save-dir", str(save))
    assert status == EXIT_ENV and f"pid {proc.pid}" in errors(err)[0], err
    proc.send_signal(signal.SIGKILL)
    proc.wait(30)
    status, err = run_main(capsys, tiny(tiny_prefix), "trainer.max_steps=1", "--save-dir", str(save))
    assert status == 0, err
    assert [p.name for p in save.iterdir()] == [ckpt.checkpoint_name(1, 8)]


def test_temporaries_of_killed_runs_in_the_save_dir_are_removed_whatever_their_pid(tmp_path, capsys, tiny_prefix):
    """A probe of a killed run, and a checkpoint temporary named with pid 1 (alive, not a trainer)."""
    save = tmp_path / "s"
    save.mkdir()
    probe = save / ".write-probe.4194000.tmp"
    reused = save / f".{ckpt.checkpoint_name(1, 8, 'torch')}.1-abcdefgh.tmp"
    for p in (probe, reused):
        p.write_bytes(b"0")
    status, err = run_main(capsys, tiny(tiny_prefix), "trainer.max_steps=1", "--save-dir", str(save))
    assert status == 0, err
    note = [x for x in err if "temporary file(s)" in x]
    assert len(note) == 1 and probe.name in note[0] and reused.name in note[0], err
    assert [p.name for p in save.iterdir()] == [ckpt.checkpoint_name(1, 8)]


def test_a_forked_child_does_not_keep_its_parents_lock(tmp_path):
    """A pool worker that outlives a killed parent must not hold the parent's lock."""
    lock = tmp_path / "x.lock"
    held = hold_lock(lock, "x", remove=False)           # the file stays: the child locks the same one
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:                                        # the child: wait until the parent let go, then try
        os.close(write)
        os.read(read, 1)
        try:
            hold_lock(lock, "x").close()
            os._exit(0)
        except BaseException:  # noqa: BLE001 - the forked child must never return into pytest
            os._exit(1)
    os.close(read)
    assert held.fd >= 0                                 # the parent still holds it after the fork
    with pytest.raises(LockHeld):
        hold_lock(lock, "x")
    held.close()
    os.write(write, b"x")
    assert os.waitpid(pid, 0)[1] == 0                   # the child's copy did not keep it held
