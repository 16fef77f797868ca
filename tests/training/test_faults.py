"""Faults in training (issue 23): damaged checkpoints, a changed data plan, NaN, disks, Ctrl-C.

Every test asserts the exit status, the one line on stderr and what is on disk afterwards.  The
runs are a few steps of chapter 6's tiny GPT on CPU; most call the command's ``main`` in this
process (same code path as ``python -m labsupport train``), the kill and Ctrl-C tests a
subprocess.
"""
from __future__ import annotations

import json
import os
import random
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from labsupport.paths import REPO_ROOT
from labsupport.training import checkpoint as ckpt
from labsupport.training.cli import main

TINY_DOCS = 12
#: the older single-file checkpoint format: the tests of its file's damage (torch_dist's: test_dist_checkpoint.py)
TORCH = "exp_manager.ckpt_format=torch"


def run_main(capsys, *argv: str) -> tuple[int, list[str]]:
    """``python -m labsupport train ...`` in this process: (status, stderr lines without progress)."""
    status = main(["--no-progress", *argv])
    err = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    return status, err


def errors(lines: list[str]) -> list[str]:
    return [x for x in lines if x.startswith("error:")]


@pytest.fixture(scope="module")
def tiny_prefix(tmp_path_factory) -> str:
    """A 12-document corpus (~1,100 tokens, 17 samples of 64 tokens per epoch): a few steps
    cross an epoch, which is when Megatron's GPT index changes with num_samples."""
    from labsupport.datasets.preprocess import preprocess
    from labsupport.datasets.tokenizer import workbook_tokenizer

    folder = tmp_path_factory.mktemp("tiny")
    rng = random.Random(0)
    words = "alpha beta gamma delta epsilon zeta eta theta iota kappa lambda mu".split()
    src = folder / "tiny.jsonl"
    src.write_text("".join(json.dumps({"text": " ".join(rng.choice(words) for _ in range(40))}) + "\n"
                           for _ in range(TINY_DOCS)))
    preprocess([src], folder / "tiny", workbook_tokenizer(), append_eod=True, show_progress=False)
    return str(folder / "tiny_text_document")


def tiny(prefix: str) -> str:
    return f"model.data.data_prefix=[1.0,{prefix}]"


def losses(log: Path) -> dict[int, float]:
    out: dict[int, float] = {}
    for line in log.read_text().splitlines():
        rec = json.loads(line)
        assert rec["step"] not in out, f"step {rec['step']} logged twice"
        out[rec["step"]] = rec["loss"]
    return out


# ------------------------------------------------------------------------- checkpoints
def flip_bit_in_tensor(path: Path) -> None:
    """Flip one bit inside the largest tensor record of a torch zip checkpoint (not its headers)."""
    import zipfile

    with zipfile.ZipFile(path) as z:
        info = max(z.infolist(), key=lambda i: i.file_size)
    data = bytearray(path.read_bytes())
    start = info.header_offset + 30 + len(info.filename.encode()) + len(info.extra)
    pos = start + info.file_size // 2
    data[pos] ^= 0x10
    path.write_bytes(bytes(data))


def test_bit_flip_and_empty_latest_fall_back_to_newest_intact(tmp_path, capsys, tiny_prefix):
    save = tmp_path / "s"
    status, _ = run_main(capsys, tiny(tiny_prefix), TORCH, "trainer.max_steps=3", "--save-dir", str(save),
                         "--save-every", "1")
    assert status == 0
    names = [p.name for p in ckpt.checkpoints_newest_first(save)]
    assert names == [ckpt.checkpoint_name(s, 8 * s, "torch") for s in (3, 2, 1)]
    # torch.load alone accepts the flipped bit: the digest is what catches it
    flip_bit_in_tensor(save / names[0])
    assert isinstance(torch.load(save / names[0], weights_only=True), dict)
    (save / names[1]).write_bytes(b"")                      # a 0-byte file, as a host crash leaves
    status, err = run_main(capsys, tiny(tiny_prefix), TORCH, "trainer.max_steps=3", "--resume", str(save))
    assert status == 0, err
    assert any(names[0] in x and "damaged" in x and "checksum" in x for x in err), err
    assert any(names[1] in x and "empty file" in x for x in err), err
    assert any(f"resuming from {names[2]}" in x for x in err), err
    # a damaged file named directly is refused with one line naming it
    status, err = run_main(capsys, tiny(tiny_prefix), TORCH, "trainer.max_steps=3", "--resume", str(save / names[0]))
    assert status == 2 and len(errors(err)) == 1 and names[0] in errors(err)[0] and "damaged" in errors(err)[0]


def test_an_old_format_checkpoint_is_loaded_with_a_warning_that_it_is_unverified(tmp_path, capsys, tiny_prefix):
    """A checkpoint from before the content digest (format /1) still resumes, saying it was not verified;
    the checkpoints written after it are verified again."""
    save = tmp_path / "s"
    assert run_main(capsys, tiny(tiny_prefix), TORCH, "trainer.max_steps=2", "--stop-after", "1",
                    "--save-dir", str(save))[0] == 0
    only = ckpt.checkpoints_newest_first(save)[0]
    state = torch.load(only, weights_only=True)
    state.pop("content_sha256")
    state["format"] = "labsupport-train-checkpoint/1"
    torch.save(state, only)
    status, err = run_main(capsys, tiny(tiny_prefix), TORCH, "trainer.max_steps=2", "--resume", str(save),
                           "--save-dir", str(save))
    assert status == 0, err
    assert [x for x in err if "older format" in x] == [
        f"warning: {only.name}: saved in the older format labsupport-train-checkpoint/1 without a content "
        "checksum, so it is loaded unverified; the next save writes a verified one"], err
    newest = ckpt.checkpoints_newest_first(save)[0]
    assert newest != only and torch.load(newest, weights_only=True)["format"] == ckpt.FORMAT


def test_every_checkpoint_damaged_is_one_line(tmp_path, capsys, tiny_prefix):
    save = tmp_path / "s"
    assert run_main(capsys, tiny(tiny_prefix), TORCH, "trainer.max_steps=1", "--save-dir", str(save))[0] == 0
    only = ckpt.checkpoints_newest_first(save)[0]
    only.write_bytes(only.read_bytes()[: only.stat().st_size // 2])   # truncated
    status, err = run_main(capsys, tiny(tiny_prefix), TORCH, "trainer.max_steps=2", "--resume", str(save))
    assert status == 2
    assert len(errors(err)) == 1 and "every checkpoint there is damaged" in errors(err)[0]


def test_stale_temporary_of_a_killed_save_is_removed(tmp_path, capsys, tiny_prefix):
    save = tmp_path / "s"
    save.mkdir()
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    stale = save / f".{ckpt.checkpoint_name(2, 16, 'torch')}.{dead.pid}-abc123.tmp"   # a single-file save's
    stale.write_bytes(b"half a checkpoint")
    stale_dir = save / f".{ckpt.checkpoint_name(2, 16)}.{dead.pid}-dcp.tmp"           # a torch_dist save's
    stale_dir.mkdir()
    (stale_dir / "__0_0.distcp").write_bytes(b"half a shard")
    status, err = run_main(capsys, tiny(tiny_prefix), "trainer.max_steps=1", "--save-dir", str(save))
    assert status == 0 and not stale.exists() and not stale_dir.exists()
    assert any("removed 2 temporary file" in x for x in err)
    assert sorted(p.name for p in save.iterdir()) == [ckpt.checkpoint_name(1, 8)]


def test_nan_loss_stops_before_anything_nan_is_saved(tmp_path, capsys, tiny_prefix, monkeypatch):
    save = tmp_path / "s"
    monkeypatch.setenv("LABSUPPORT_FAULT", "nan:step=3")
    status, err = run_main(capsys, tiny(tiny_prefix), "trainer.max_steps=5", "--save-dir", str(save), "--save-every",
                           "1")
    assert status == 1
    assert len(errors(err)) == 1 and errors(err)[0].startswith("error: step 3: the loss is nan"), err
    assert [p.name for p in ckpt.checkpoints_newest_first(save)] == [ckpt.checkpoint_name(2, 16),
                                                                     ckpt.checkpoint_name(1, 8)]
    state = ckpt._read_verified(ckpt.checkpoints_newest_first(save)[0])
    assert all(torch.isfinite(v).all() for v in state["model"].values())


def test_kill_loop_never_leaves_a_damaged_checkpoint(tmp_path, tiny_prefix):
    """SIGKILL a --save-every 1 run at random moments; every final-named checkpoint verifies and
    the next run removes the killed save's temporary file."""
    rng = random.Random(23)
    save = tmp_path / "s"
    env = dict(os.environ, PYTHONPATH=str(REPO_ROOT))
    cmd = [sys.executable, "-m", "labsupport", "train", tiny(tiny_prefix), "trainer.max_steps=40",
           "--save-dir", str(save), "--save-every", "1", "--no-progress", "--resume-if-exists"]
    for _ in range(3):
        before = len(ckpt.checkpoints_newest_first(save))
        proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 120
        while (len(ckpt.checkpoints_newest_first(save)) < before + 1 and time.monotonic() < deadline
               and proc.poll() is None):
            time.sleep(0.05)
        time.sleep(rng.uniform(0.0, 1.5))
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        for path in ckpt.checkpoints_newest_first(save):
            ckpt._read_verified(path)  # raises when damaged
    assert len(ckpt.checkpoints_newest_first(save)) >= 3


# ------------------------------------------------------------------------- the data plan
def test_resume_is_exact_or_refused(tmp_path, capsys, tiny_prefix):
    """Growing max_steps inside an epoch resumes exactly; growing it past one (the index is rebuilt
    in another order) is refused with one line, and +allow_new_data_plan=true accepts it."""
    whole, part = tmp_path / "whole", tmp_path / "part"
    assert run_main(capsys, tiny(tiny_prefix), "trainer.max_steps=2", "--log-file", str(whole / "log.jsonl"))[0] == 0
    assert run_main(capsys, tiny(tiny_prefix), "trainer.max_steps=2", "--save-dir", str(part), "--save-every", "1",
                    "--log-file", str(part / "log.jsonl"))[0] == 0
    # steps 1..2 of a run planned for 2 steps, resumed from step 1 "to 2": exact, logged once
    shutil.rmtree(part / ckpt.checkpoint_name(2, 16))
    status, err = run_main(capsys, tiny(tiny_prefix), "trainer.max_steps=2", "--resume", str(part),
                           "--save-dir", str(part), "--log-file", str(part / "log.jsonl"))
    assert status == 0, err
    assert losses(part / "log.jsonl") == losses(whole / "log.jsonl")
    # max_steps 2 → 4 needs a second epoch of the 17-sample index: the first 16 samples move
    status, err = run_main(capsys, tiny(tiny_prefix), "trainer.max_steps=4", "--resume", str(part), "--save-dir",
                           str(part))
    assert status == 2 and len(errors(err)) == 1, err
    line = errors(err)[0]
    assert "trainer.max_steps 2 → 4" in line and "allow_new_data_plan=true" in line and "16 samples" in line
    assert [p.name for p in ckpt.checkpoints_newest_first(part)] == [ckpt.checkpoint_name(2, 16),
                                                                     ckpt.checkpoint_name(1, 8)]
    status, err = run_main(capsys, tiny(tiny_prefix), "trainer.max_steps=4", "--resume", str(part), "--save-dir",
                           str(part),
                           "+allow_new_data_plan=true")
    assert status == 0 and any("new data plan accepted" in x for x in err), err
    assert ckpt.checkpoints_newest_first(part)[0].name == ckpt.checkpoint_name(4, 32)


# ------------------------------------------------------------------------- bad input
@pytest.mark.parametrize("argv, expect", [
    (["--stop-after", "-1"], "--stop-after -1: must be ≥ 1"),
    (["--save-every", "-2"], "--save-every -2: must be ≥ 0"),
])
def test_bad_flags_are_usage_errors(capsys, argv, expect):
    status, err = run_main(capsys, *argv)
    assert status == 2 and errors(err) == [f"error: {expect}"]


def test_zero_weight_empty_dataset_and_foreign_token_ids(tmp_path, capsys, tiny_prefix):
    status, err = run_main(capsys, f"model.data.data_prefix=[0,{tiny_prefix},1,{tiny_prefix}]", "trainer.max_steps=1")
    assert status == 2 and len(errors(err)) == 1 and "is 0" in errors(err)[0], err
    from labsupport.datasets.indexed import IndexedDatasetBuilder

    empty = tmp_path / "empty_text_document"
    with IndexedDatasetBuilder(f"{empty}.bin", "uint16") as b:
        b.add_document([], lengths=[])
        b.finalize(f"{empty}.idx")
    status, err = run_main(capsys, f"model.data.data_prefix=[1.0,{empty}]", "trainer.max_steps=1")
    assert status == 2 and len(errors(err)) == 1 and "holds no tokens" in errors(err)[0], err
    big = tmp_path / "big_text_document"
    with IndexedDatasetBuilder(f"{big}.bin", "int32") as b:
        b.add_document(list(range(1, 400)) + [60000])
        b.finalize(f"{big}.idx")
    status, err = run_main(capsys, f"model.data.data_prefix=[1.0,{big}]", "trainer.max_steps=1")
    assert status == 2 and len(errors(err)) == 1
    assert "token id 60000" in errors(err)[0] and "outside the vocabulary" in errors(err)[0], err


# ------------------------------------------------------------------------- the disk
def _tmpfs(path: Path, *options: str) -> bool:
    path.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", ",".join(options), "tmpfs", str(path)],
                          capture_output=True)
    return done.returncode == 0


@pytest.fixture
def mounts():
    made: list[Path] = []
    yield made
    for m in made:
        subprocess.run(["umount", str(m)], capture_output=True)


def test_read_only_and_full_save_dirs(tmp_path, capsys, tiny_prefix, mounts):
    ro, small, mid = tmp_path / "ro", tmp_path / "small", tmp_path / "mid"
    if not (_tmpfs(ro, "size=1m", "ro") and mounts.append(ro) is None):
        pytest.skip("cannot mount a tmpfs here (needs root)")
    status, err = run_main(capsys, tiny(tiny_prefix), "trainer.max_steps=2", "--save-dir", str(ro / "run"))
    assert status == 1 and len(errors(err)) == 1 and "read-only file system" in errors(err)[0], err
    assert not any(x.startswith("step ") for x in err)                      # found before step 1
    assert _tmpfs(small, "size=2m") and mounts.append(small) is None
    status, err = run_main(capsys, tiny(tiny_prefix), "trainer.max_steps=2", "--save-dir", str(small))
    assert status == 1 and len(errors(err)) == 1 and "no space left on device" in errors(err)[0], err
    assert list(small.iterdir()) == []
    # room for one checkpoint (13.6 MB) but not two: the second save fails, the first stays intact
    assert _tmpfs(mid, "size=20m") and mounts.append(mid) is None
    status, err = run_main(capsys, tiny(tiny_prefix), "trainer.max_steps=3", "--save-dir", str(mid), "--save-every",
                           "1")
    assert status == 1 and len(errors(err)) == 1 and "no space left on device" in errors(err)[0], err
    assert [p.name for p in mid.iterdir()] == [ckpt.checkpoint_name(1, 8)]
    ckpt._read_verified(mid / ckpt.checkpoint_name(1, 8))


def test_a_log_file_on_a_read_only_file_system_is_found_before_step_1(tmp_path, capsys, tiny_prefix, mounts):
    ro = tmp_path / "ro"
    if not (_tmpfs(ro, "size=1m", "ro") and mounts.append(ro) is None):
        pytest.skip("cannot mount a tmpfs here (needs root)")
    status, err = run_main(capsys, tiny(tiny_prefix), "trainer.max_steps=2", "--log", str(ro / "log.jsonl"))
    assert status == 1 and len(errors(err)) == 1, err
    assert "read-only file system" in errors(err)[0] and "log.jsonl" in errors(err)[0], err
    assert not any(x.startswith("step ") for x in err) and list(ro.iterdir()) == []


def test_ctrl_c_is_130_and_one_line(tmp_path, tiny_prefix):
    save = tmp_path / "s"
    env = dict(os.environ, PYTHONPATH=str(REPO_ROOT))
    proc = subprocess.Popen([sys.executable, "-m", "labsupport", "train", tiny(tiny_prefix), "trainer.max_steps=200",
                             "--save-dir", str(save), "--save-every", "1", "--no-progress"],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    while not ckpt.checkpoints_newest_first(save) and time.monotonic() < deadline:
        time.sleep(0.05)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    lines = [x for x in err.splitlines() if x.strip()]
    assert proc.returncode == 130, err
    assert lines == ["error: interrupted (Ctrl-C); the checkpoints already written are intact — continue with --resume"]
    assert not [p for p in save.iterdir() if p.name.endswith(".tmp")]
    for p in ckpt.checkpoints_newest_first(save):
        ckpt._read_verified(p)
