"""``python -m labsupport train --nproc-per-node N`` (issue #32 item 9): torchrun's launch with the one-line
promise kept — each worker's ``error: rank R: …`` line and the documented status, no ChildFailedError report,
no SignalException traceback, no torchrun log lines."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from labsupport.paths import REPO_ROOT
from labsupport.training.cli import _without_nproc
from labsupport.training.launch import worker_argv


def test_the_workers_get_the_arguments_without_the_launchers_own():
    assert _without_nproc(["--nproc-per-node", "2", "a=1", "--nproc-per-node=3", "--save-dir", "s"]) == \
        ["a=1", "--save-dir", "s"]
    assert worker_argv(2, ["x=1"])[-3:] == ["train", "x=1", "trainer.devices=2"]
    assert worker_argv(2, ["trainer.devices=4"])[-1] == "trainer.devices=4"        # the user's own stays
    assert worker_argv(3, [])[:2] == ["--standalone", "--nproc-per-node=3"]


def _launch(tmp_path, *argv: str, **popen) -> subprocess.Popen:
    env = dict(os.environ, PYTHONPATH=str(REPO_ROOT), LABSUPPORT_WORK=str(tmp_path / "work"))
    return subprocess.Popen([sys.executable, "-m", "labsupport", "train", "--nproc-per-node", "2", "--no-progress",
                             *argv], cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, **popen)


def _only_error_lines(err: str) -> list[str]:
    lines = [line for line in err.splitlines() if line.strip()]
    assert lines and all(line.startswith("error: rank ") for line in lines), err   # no report, no log line
    return lines


@pytest.mark.slow
@pytest.mark.parametrize("override, status, says", [
    ("model.optim.lr=inf", 2, "model.optim.lr=inf: expected a finite number > 0"),       # before the group
    ("model.data.data_prefix=[1.0,nothing/here]", 2, "has no .bin or .idx file"),        # after it
])
def test_a_failing_run_ends_with_the_workers_lines_and_their_status(tmp_path, override, status, says):
    proc = _launch(tmp_path, override)
    _, err = proc.communicate(timeout=300)
    assert proc.returncode == status, err
    if "rank" in err:
        assert all(says in line for line in _only_error_lines(err)), err
    else:                                   # a data error is rank 0's line alone, without the rank prefix
        lines = [line for line in err.splitlines() if line.strip()]
        assert len(lines) == 1 and lines[0].startswith("error: ") and says in lines[0], err


@pytest.mark.slow
def test_a_run_and_a_ctrl_c_under_the_launcher(tmp_path):
    proc = _launch(tmp_path, "trainer.max_steps=2", "--save-dir", str(tmp_path / "s"))
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 0 and "step 2 · loss" in out and not err.strip(), err
    log = tmp_path / "log.jsonl"
    proc = _launch(tmp_path, "trainer.max_steps=100000", "--log-file", str(log), start_new_session=True)
    deadline = time.monotonic() + 240
    while not (log.exists() and log.read_text().strip()) and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.2)                     # a step logged: the workers are in the loop
    assert proc.poll() is None, proc.communicate()[1]
    os.killpg(proc.pid, signal.SIGINT)      # a terminal's Ctrl-C reaches the whole process group
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err
    assert all("interrupted (Ctrl-C)" in line for line in _only_error_lines(err)), err
