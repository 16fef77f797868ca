"""torch_dist checkpoints (issue 35 item 3): a shard per rank, verified content, fallback, atomic saves,
async saves, the older single-file format, and resuming a 2-rank run on 1 and on 4 ranks."""
from __future__ import annotations

import io
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import torch
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.metadata import TensorStorageMetadata

from labsupport.distributed.launch import run_workers
from labsupport.paths import REPO_ROOT
from labsupport.training import checkpoint as ckpt, dist_checkpoint, trainer
from labsupport.training.settings import load_settings

#: micro 2 fits DP 1, 2 and 4 with the config's global batch of 8 (4, 2 and 1 micro-batches per rank)
RESHARD = ["trainer.max_steps=4", "model.micro_batch_size=2", "model.optim.sched.warmup_steps=2"]


def loaded_weights_sha(overrides: list[str], resume: str) -> str:
    """A ``run_workers`` function: resume, run no step, return the sha256 of this rank's weights and optimizer."""
    res = trainer.train(None, overrides, resume=resume, stop_after=0, show_progress=False)
    state = {"model": res.model.state_dict(), "step": res.step}
    return ckpt.content_digest(state)


def _two_rank_save(tmp_path, steps: int = 1, extra: tuple[str, ...] = ()):
    over = [f"trainer.max_steps={steps}", "trainer.devices=2", *extra]
    return run_workers(trainer.train_worker, 2, args=(None, over), kwargs={"save_dir": str(tmp_path)},
                       timeout=180, echo=False)


def test_two_ranks_write_a_shard_each_holding_every_tensor_once(tmp_path):
    out = _two_rank_save(tmp_path)
    name = ckpt.checkpoint_name(1, 8)
    assert sorted(os.listdir(tmp_path)) == [name]
    path = tmp_path / name
    files = dist_checkpoint.shard_files(path)
    assert sorted(files) == [".metadata", "__0_0.distcp", "__1_0.distcp", "checkpoint.json"]
    assert files["__0_0.distcp"] > 0 and files["__1_0.distcp"] > 0
    meta = dcp.FileSystemReader(path).read_metadata()
    tensors = {k: m for k, m in meta.state_dict_metadata.items() if isinstance(m, TensorStorageMetadata)}
    where = {idx.fqn: info.relative_path for idx, info in meta.storage_data.items() if idx.fqn in tensors}
    assert set(where) == set(tensors)                       # every tensor is stored …
    stored = [idx.fqn for idx in meta.storage_data if idx.fqn in tensors]
    assert len(stored) == len(set(stored))                  # … exactly once …
    assert set(where.values()) == {"__0_0.distcp", "__1_0.distcp"}   # … spread over both ranks' files
    state = ckpt.load_checkpoint(tmp_path, load_settings(overrides=["trainer.max_steps=1"])).state
    for k, v in out[0]["weights"].items():                  # rank 0's final weights, bit for bit
        assert torch.equal(state["model"][k], torch.tensor(v, dtype=state["model"][k].dtype)), k


@pytest.fixture()
def two_saves(tmp_path):
    """A save dir with torch_dist checkpoints of steps 1 and 2 (one process)."""
    trainer.train(load_settings(overrides=["trainer.max_steps=2"]), save_dir=tmp_path, save_every=1,
                  show_progress=False)
    assert [p.name for p in ckpt.checkpoints_newest_first(tmp_path)] == [ckpt.checkpoint_name(2, 16),
                                                                       ckpt.checkpoint_name(1, 8)]
    return tmp_path


def _falls_back(save, damage: str) -> None:
    warn = io.StringIO()
    loaded = ckpt.load_checkpoint(save, load_settings(overrides=["trainer.max_steps=3"]), warn=warn)
    assert loaded.step == 1 and loaded.path.name == ckpt.checkpoint_name(1, 8)
    lines = warn.getvalue().splitlines()
    assert len(lines) == 2, lines
    assert lines[0].startswith(f"warning: {ckpt.checkpoint_name(2, 16)}: damaged — {damage}"), lines[0]
    assert lines[0].endswith("; trying an older checkpoint")
    assert lines[1] == (f"warning: resuming from {ckpt.checkpoint_name(1, 8)}, the newest intact checkpoint in "
                        f"{save} (skipped {ckpt.checkpoint_name(2, 16)})")


def test_a_flipped_byte_in_a_shard_is_caught_by_the_digest(two_saves):
    shard = two_saves / ckpt.checkpoint_name(2, 16) / "__0_0.distcp"
    meta = dcp.FileSystemReader(shard.parent).read_metadata()
    info = next(i for k, i in meta.storage_data.items() if k.fqn == "model.tok.weight")
    with open(shard, "r+b") as fh:                       # one bit in the middle of the embedding's bytes
        fh.seek(info.offset + info.length // 2)
        byte = fh.read(1)[0]
        fh.seek(-1, os.SEEK_CUR)
        fh.write(bytes([byte ^ 0x10]))
    _falls_back(two_saves, "its shards do not match the checksum they were saved with")


@pytest.mark.parametrize("gone,damage", [(".metadata", ".metadata is missing"),
                                         ("__0_0.distcp", "__0_0.distcp is missing"),
                                         ("checkpoint.json", "checkpoint.json cannot be read")])
def test_a_deleted_file_makes_the_checkpoint_damaged(two_saves, gone, damage):
    (two_saves / ckpt.checkpoint_name(2, 16) / gone).unlink()
    _falls_back(two_saves, damage)


KILLED_SAVE = textwrap.dedent("""
    import os, signal, sys
    from labsupport.training import checkpoint as ckpt, dist_checkpoint, trainer
    from labsupport.training.settings import load_settings
    def killed(self):           # every shard written, killed before the rename
        os.kill(os.getpid(), signal.SIGKILL)
    dist_checkpoint.PendingSave.wait = killed
    s = load_settings(overrides=["trainer.max_steps=1"])
    run = trainer._build(s, [])
    ckpt.save_checkpoint(sys.argv[1], step=1, consumed_samples=8, model=run.model, optimizer=run.optimizer,
                         settings=s)
""")


def test_a_killed_save_leaves_no_final_name_and_its_temporary_directory_is_removed(tmp_path):
    proc = subprocess.run([sys.executable, "-c", KILLED_SAVE, str(tmp_path)], cwd=REPO_ROOT, capture_output=True,
                          env={**os.environ, "PYTHONPATH": str(REPO_ROOT)}, timeout=120, text=True)
    assert proc.returncode == -9, proc.stderr[-2000:]
    left = sorted(os.listdir(tmp_path))
    assert len(left) == 1 and left[0].startswith(f".{ckpt.checkpoint_name(1, 8)}.") and left[0].endswith("-dcp.tmp")
    assert "__0_0.distcp" in os.listdir(tmp_path / left[0])
    assert ckpt.checkpoints_newest_first(tmp_path) == []
    assert ckpt.remove_stale_temporaries(tmp_path) == [tmp_path / left[0]]   # its writer is dead
    assert os.listdir(tmp_path) == []


def test_an_async_save_writes_what_a_sync_save_writes(tmp_path):
    s = load_settings(overrides=["trainer.max_steps=1"])
    res = trainer.train(s, show_progress=False)
    run = trainer._build(s, [])
    run.model.load_state_dict(res.model.state_dict())
    kw = {"step": 1, "consumed_samples": 8, "model": run.model, "optimizer": run.optimizer, "settings": s}
    torch.manual_seed(0)
    sync = ckpt.save_checkpoint(tmp_path / "sync", **kw)
    torch.manual_seed(0)
    pending = ckpt.save_checkpoint(tmp_path / "async", async_save=True, **kw)
    with torch.no_grad():                         # what training does meanwhile must not reach the file
        for p in run.model.parameters():
            p.add_(1.0)
    done = pending.wait()
    assert done == tmp_path / "async" / ckpt.checkpoint_name(1, 8) and done.is_dir()
    a, b = ckpt._read_verified(sync), ckpt._read_verified(done)
    assert a["content_sha256"] == b["content_sha256"] == ckpt.content_digest(b)
    for k, v in res.model.state_dict().items():
        assert torch.equal(b["model"][k], v), k


def test_async_saves_under_two_ranks_equal_the_sync_ones(tmp_path):
    sync = _two_rank_save(tmp_path / "sync", steps=2)
    asyn = _two_rank_save(tmp_path / "async", steps=2, extra=("exp_manager.async_save=true",))
    assert [os.path.basename(p) for p in asyn[0]["checkpoints"]] == [ckpt.checkpoint_name(2, 16)]
    assert sync[0]["weights"] == asyn[0]["weights"]
    s = load_settings(overrides=["trainer.max_steps=2"])
    a = ckpt.load_checkpoint(tmp_path / "sync", s).state
    b = ckpt.load_checkpoint(tmp_path / "async", s).state
    def seeded(state):   # the trainer seeds torch, not Python's `random` nor numpy: those differ per process
        return ckpt.content_digest({**state, "rng": {"torch": state["rng"]["torch"]}})

    assert seeded(a) == seeded(b)       # weights, optimizer, step, data plan, torch RNG: equal


def test_an_old_single_file_checkpoint_loads_with_one_warning_and_the_next_save_is_torch_dist(tmp_path):
    trainer.train(load_settings(overrides=["trainer.max_steps=1", "exp_manager.ckpt_format=torch"]),
                  save_dir=tmp_path, show_progress=False)
    old = ckpt.checkpoint_name(1, 8, "torch")
    assert os.listdir(tmp_path) == [old]
    warn = io.StringIO()
    loaded = ckpt.load_checkpoint(tmp_path, load_settings(overrides=["trainer.max_steps=2"]), warn=warn)
    assert loaded.step == 1 and loaded.path.name == old
    assert warn.getvalue() == (f"warning: {old}: a checkpoint in the older single-file format (torch); it loads "
                               "as before, and the next save writes torch_dist (a directory, a shard per rank)\n")
    trainer.train(load_settings(overrides=["trainer.max_steps=2"]), resume=tmp_path, save_dir=tmp_path,
                  show_progress=False)
    assert [p.name for p in ckpt.checkpoints_newest_first(tmp_path)] == [ckpt.checkpoint_name(2, 16), old]
    assert (tmp_path / ckpt.checkpoint_name(2, 16)).is_dir()


def _merged_samples(per_rank: list[dict]) -> list[list[int]]:
    """Per step, the sorted blend indices every rank read together."""
    return [sorted(sum((r["log"][i]["samples"] for r in per_rank), [])) for i in range(len(per_rank[0]["log"]))]


def test_a_two_rank_checkpoint_resumes_on_one_and_on_four_ranks(tmp_path):
    """Saved by 2 data-parallel ranks after step 2 of 4; resumed on 1 and on 4 ranks.

    Exactly equal: step, consumed_samples and the set of samples each step reads (all ranks
    together), and the weights right after loading (bitwise, on every rank).  Not bitwise: the
    losses, which sum the same per-sample terms in another order (micro-batches per rank, then the
    all-reduce), so they agree to float32 rounding: rtol 1e-5."""
    two = [*RESHARD, "trainer.devices=2"]
    straight = run_workers(trainer.train_worker, 2, args=(None, two), timeout=180, echo=False)
    first = run_workers(trainer.train_worker, 2, args=(None, two),
                        kwargs={"stop_after": 2, "save_dir": str(tmp_path)}, timeout=180, echo=False)
    assert sorted(os.listdir(tmp_path)) == [ckpt.checkpoint_name(2, 16)]
    saved = ckpt.load_checkpoint(tmp_path, load_settings(overrides=RESHARD)).state["model"]
    want = ckpt.content_digest({"model": saved, "step": 2})
    for k, v in first[0]["weights"].items():
        assert torch.equal(saved[k], torch.tensor(v, dtype=saved[k].dtype)), k
    one = trainer.train(load_settings(overrides=RESHARD), resume=tmp_path, show_progress=False)
    four_over = [*RESHARD, "trainer.devices=4"]
    four = run_workers(trainer.train_worker, 4, args=(None, four_over), kwargs={"resume": str(tmp_path)},
                       timeout=240, echo=False)
    assert loaded_weights_sha(RESHARD, str(tmp_path)) == want
    assert run_workers(loaded_weights_sha, 4, args=(four_over, str(tmp_path)), timeout=240, echo=False) == [want] * 4
    whole = straight[0]["log"][2:]
    for resumed in ([{"log": one.log}], four):
        log = resumed[0]["log"]
        assert [r["step"] for r in log] == [r["step"] for r in whole] == [3, 4]
        assert [r["consumed_samples"] for r in log] == [r["consumed_samples"] for r in whole] == [24, 32]
        assert _merged_samples(resumed) == _merged_samples(straight)[2:]
        np.testing.assert_allclose([r["loss"] for r in log], [r["loss"] for r in whole], rtol=1e-5)


def test_a_ctrl_c_during_a_save_waits_for_the_whole_checkpoint_then_interrupts(tmp_path, monkeypatch):
    """SIGINT delivered inside DCP's writer came out of torch's zip writer as a RuntimeError ("unexpected pos") and
    every rank reported "another rank stopped responding" (CI, torchrun-ctrl-c): now the save finishes, the
    checkpoint is whole under its name, and then the KeyboardInterrupt comes, as the command expects."""
    import signal

    s = load_settings(overrides=["trainer.max_steps=1"])
    run = trainer._build(s, [])
    real = dist_checkpoint.dcp.save

    def save_under_ctrl_c(*args, **kwargs):
        os.kill(os.getpid(), signal.SIGINT)           # the Ctrl-C lands while the shards are written
        return real(*args, **kwargs)

    monkeypatch.setattr(dist_checkpoint.dcp, "save", save_under_ctrl_c)
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        with pytest.raises(KeyboardInterrupt):
            ckpt.save_checkpoint(tmp_path, step=1, consumed_samples=8, model=run.model, optimizer=run.optimizer,
                                 settings=s)
    finally:
        signal.signal(signal.SIGINT, previous)
    assert signal.getsignal(signal.SIGINT) is previous
    assert [p.name for p in tmp_path.iterdir()] == [ckpt.checkpoint_name(1, 8)]   # no temporary left
    assert ckpt.load_checkpoint(tmp_path, s).step == 1                               # and it is intact
