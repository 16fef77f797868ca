"""Restart under torchrun (issue 23): a rank killed on purpose, torchrun restarts every worker,
``--resume-if-exists`` picks up the newest checkpoint, and the finished run's losses equal an
uninterrupted run's — on one node (2 workers) and on two simulated nodes (two torchrun agents on
127.0.0.1, ``--nnodes 2``, c10d rendezvous).  Gloo on CPU; a few steps of chapter 6's tiny GPT.
"""
from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from labsupport.paths import REPO_ROOT

pytest.importorskip("torch.distributed")
TORCHRUN = [sys.executable, "-m", "torch.distributed.run"]
STEPS = 4


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def train_args(folder: Path, *extra: str) -> list[str]:
    return ["-m", "labsupport", "train", "trainer.devices=2" if "--nnodes=2" not in extra else "trainer.devices=1",
            *(["trainer.num_nodes=2"] if "--nnodes=2" in extra else []), f"trainer.max_steps={STEPS}",
            "--save-dir", str(folder), "--save-every", "1", "--resume-if-exists",
            "--log-file", str(folder / "log.jsonl"), "--no-progress"]


def env(**extra: str) -> dict[str, str]:
    e = {k: v for k, v in os.environ.items() if k != "LABSUPPORT_FAULT"}
    return {**e, "PYTHONPATH": str(REPO_ROOT), "OMP_NUM_THREADS": "1", **extra}


def losses(folder: Path) -> list[tuple[int, float]]:
    return [(r["step"], r["loss"]) for r in map(json.loads, (folder / "log.jsonl").read_text().splitlines())]


@pytest.fixture(scope="module")
def reference(tmp_path_factory) -> list[tuple[int, float]]:
    folder = tmp_path_factory.mktemp("ref")
    done = subprocess.run([*TORCHRUN, "--standalone", "--nproc-per-node=2", *train_args(folder)],
                          env=env(), capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    out = losses(folder)
    assert [s for s, _ in out] == list(range(1, STEPS + 1))
    return out


def test_killed_rank_restarts_and_resumes_exactly(tmp_path, reference):
    folder = tmp_path / "run"
    port = free_port()
    done = subprocess.run([*TORCHRUN, "--nnodes=1", "--nproc-per-node=2", "--max-restarts=1", "--rdzv-backend=c10d",
                           f"--rdzv-endpoint=127.0.0.1:{port}", "--rdzv-id=one", *train_args(folder)],
                          env=env(LABSUPPORT_FAULT="kill:rank=1:step=3"), capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "train: torchrun restart 1: resuming" in done.stderr   # rank 1 really died and torchrun restarted the job
    assert losses(folder) == reference               # each step once, bit-equal to the uninterrupted run


def test_two_nodes_on_one_machine_restart_together(tmp_path, reference):
    folder = tmp_path / "run"
    port = free_port()
    common = ["--nnodes=2", "--nproc-per-node=1", "--max-restarts=1", "--rdzv-backend=c10d",
              f"--rdzv-endpoint=127.0.0.1:{port}", "--rdzv-id=two"]
    nodes = [subprocess.Popen([*TORCHRUN, *common, *train_args(folder, "--nnodes=2")],
                              env=env(LABSUPPORT_FAULT="kill:rank=1:step=3"), stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for _ in range(2)]
    outs = [p.communicate(timeout=400) for p in nodes]
    assert [p.returncode for p in nodes] == [0, 0], "\n".join(o[1][-2000:] for o in outs)
    assert losses(folder) == reference
    shutil.rmtree(folder, ignore_errors=True)


def test_hung_rank_is_named(tmp_path):
    """A SIGSTOP'd rank: the rank waiting for it names it within trainer.rank_timeout_s."""
    folder = tmp_path / "run"
    proc = subprocess.Popen([*TORCHRUN, "--standalone", "--nproc-per-node=2", *train_args(folder),
                             "trainer.rank_timeout_s=10"],
                            env=env(LABSUPPORT_FAULT="hang:rank=1:step=3"), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        _, err = proc.communicate(timeout=240)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, 9)
    lines = [x for x in err.splitlines() if x.startswith("error:")]
    assert proc.returncode != 0
    assert len(lines) == 1, err[-2000:]
    assert "rank 1 (last heard at step 2" in lines[0] and "stopped responding" in lines[0], err[-2000:]
