"""Chapter 6's trainer and its command (labsupport.training, python -m labsupport train):
exact resume in a fresh process, data parallelism equal to one rank, torchrun, exit codes."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from labsupport.distributed.launch import run_workers
from labsupport.paths import REPO_ROOT
from labsupport.training import trainer
from labsupport.training.settings import ConfigError, load_settings

SMALL = ["trainer.max_steps=8", "model.optim.sched.warmup_steps=2"]


def _cli(*args, env=None, timeout=240):
    full_env = {**os.environ, "PYTHONPATH": str(REPO_ROOT), **(env or {})}
    return subprocess.run([sys.executable, "-m", "labsupport", "train", "--no-progress", *args], cwd=REPO_ROOT,
                          env=full_env, capture_output=True, text=True, timeout=timeout)


def _log(path):
    return [json.loads(line) for line in open(path, encoding="utf-8")]


def test_resume_in_a_fresh_process_is_bit_identical(tmp_path):
    straight = _cli(*SMALL, "--log", str(tmp_path / "straight.jsonl"))
    assert straight.returncode == 0, straight.stderr
    first = _cli(*SMALL, "--stop-after", "3", "--save-dir", str(tmp_path / "ck"), "--log",
                 str(tmp_path / "first.jsonl"))
    assert first.returncode == 0, first.stderr
    assert sorted(os.listdir(tmp_path / "ck")) == ["step=000003-consumed_samples=24"]
    second = _cli(*SMALL, "--resume", str(tmp_path / "ck"), "--log", str(tmp_path / "second.jsonl"))
    assert second.returncode == 0, second.stderr
    a, b, c = _log(tmp_path / "straight.jsonl"), _log(tmp_path / "first.jsonl"), _log(tmp_path / "second.jsonl")
    assert [r["step"] for r in b + c] == [r["step"] for r in a] == list(range(1, 9))
    for key in ("loss", "consumed_samples", "samples", "batch_sha256", "domain_loss", "lr"):
        assert [r[key] for r in b + c] == [r[key] for r in a], key   # bit for bit: floats compared exactly
    assert c[0]["samples"] == a[3]["samples"]          # the next batch after the checkpoint


def test_resume_without_consumed_samples_repeats_batches(tmp_path):
    settings = load_settings(overrides=SMALL)
    res = trainer.train(settings, stop_after=3, save_dir=tmp_path, show_progress=False)
    assert res.next_batch == [24, 25, 26, 27]
    forgot = trainer.train(settings, stop_after=2, show_progress=False)  # fresh start: consumed 0 again
    assert [r["samples"] for r in forgot.log] == [r["samples"] for r in res.log[:2]]
    resumed = trainer.train(settings, resume=tmp_path, stop_after=1, show_progress=False)
    assert resumed.log[0]["samples"][:4] == res.next_batch


def _weights(model):
    return {k: v.detach().cpu().numpy() for k, v in model.state_dict().items()}


def test_two_gloo_ranks_equal_one_rank_on_the_global_batch():
    one = trainer.train(load_settings(overrides=SMALL[:1] + ["trainer.max_steps=5"]), show_progress=False)
    two = run_workers(trainer.train_worker, 2, args=(None, ["trainer.max_steps=5", "trainer.devices=2"]),
                      timeout=180, echo=False)
    log2 = two[0]["log"]
    np.testing.assert_allclose([r["loss"] for r in log2], [r["loss"] for r in one.log], rtol=1e-5, atol=1e-6)
    assert [r["consumed_samples"] for r in log2] == [r["consumed_samples"] for r in one.log]
    # rank 0 read micro-batch 0 of each step, rank 1 micro-batch 1; together: the 1-rank step
    for r1, r0, rr in zip(one.log, log2, two[1]["log"]):
        assert r0["samples"] + rr["samples"] == r1["samples"]
        assert r0["allreduce_bytes"] > 0 and r1["allreduce_bytes"] == 0
    w1 = _weights(one.model)
    d = one.model.tok.embedding_dim
    for k, v in two[0]["weights"].items():
        got, want = np.asarray(v, dtype=np.float32), w1[k]
        if k.endswith("qkv.bias"):
            # the key bias adds the same score to every key of a query, so softmax ignores it: its exact
            # gradient is 0, the computed one is rounding noise that Adam scales up to ±lr steps
            got, want = np.delete(got, np.s_[d:2 * d]), np.delete(want, np.s_[d:2 * d])
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5, err_msg=k)
    # the bytes are chapter 5's ring formula for the flat float32 gradient buffer
    n_params = sum(p.numel() for p in one.model.parameters())
    assert log2[0]["allreduce_bytes"] == int(2 * (2 - 1) / 2 * n_params * 4)


def test_resume_under_two_gloo_ranks_continues_the_uninterrupted_run(tmp_path):
    """Stop a 2-rank run after step 2, resume it on 2 ranks: the same batches per rank, the same
    consumed samples and losses as the run that never stopped, and the same final weights."""
    over = ["trainer.max_steps=5", "trainer.devices=2"]
    straight = run_workers(trainer.train_worker, 2, args=(None, over), timeout=180, echo=False)
    first = run_workers(trainer.train_worker, 2, args=(None, over),
                        kwargs={"stop_after": 2, "save_dir": str(tmp_path)}, timeout=180, echo=False)
    assert sorted(os.listdir(tmp_path)) == ["step=000002-consumed_samples=16"]
    second = run_workers(trainer.train_worker, 2, args=(None, over), kwargs={"resume": str(tmp_path)},
                         timeout=180, echo=False)
    for rank in (0, 1):
        joined = first[rank]["log"] + second[rank]["log"]
        whole = straight[rank]["log"]
        assert [r["step"] for r in joined] == [r["step"] for r in whole] == [1, 2, 3, 4, 5]
        for key in ("samples", "consumed_samples", "batch_sha256"):
            assert [r[key] for r in joined] == [r[key] for r in whole], (rank, key)
        np.testing.assert_allclose([r["loss"] for r in joined], [r["loss"] for r in whole], rtol=1e-6, atol=1e-7)
    for k, v in straight[0]["weights"].items():
        np.testing.assert_allclose(np.asarray(second[0]["weights"][k]), np.asarray(v), rtol=1e-5, atol=1e-6,
                                   err_msg=k)


def test_torchrun_two_processes_on_cpu(tmp_path):
    # the torchrun of this interpreter (a `torchrun` found on PATH may belong to another Python)
    beside = os.path.join(os.path.dirname(sys.executable), "torchrun")
    torchrun = [beside] if os.path.isfile(beside) else [sys.executable, "-m", "torch.distributed.run"]
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT), "OMP_NUM_THREADS": "1"}
    proc = subprocess.run([*torchrun, "--nproc-per-node", "2", "--standalone", "-m", "labsupport", "train",
                           "--no-progress", "trainer.max_steps=3", "trainer.devices=2", "--log-file",
                           str(tmp_path / "log.jsonl"),
                           "--save-dir", str(tmp_path / "ck")],
                          cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    log = _log(tmp_path / "log.jsonl")
    assert [r["step"] for r in log] == [1, 2, 3] and log[-1]["consumed_samples"] == 24
    assert all(r["allreduce_bytes"] > 0 for r in log)
    assert os.listdir(tmp_path / "ck") == ["step=000003-consumed_samples=24"]


@pytest.mark.parametrize("args,message", [
    (["model.hiden_size=64"], "key 'model.hiden_size' is not in megatron_gpt_tiny.yaml"),
    (["model.global_batch_size=6"],
     "model.global_batch_size=6 is not divisible by model.micro_batch_size × DP = 4 × 1"),
    (["model.data.data_prefix=[1.0,work/indexed/nowhere_text_document]"],
     "model.data.data_prefix entry 1: prefix 'work/indexed/nowhere_text_document' has no .bin or .idx"),
    (["trainer.devices=3", "model.tensor_model_parallel_size=2"],
     "is not divisible by model.tensor_model_parallel_size"),
    (["--config", "configs/nope.yaml"], "--config: config 'nope.yaml' not found"),
    (["--resume", "/nonexistent/dir"], "--resume /nonexistent/dir: no such file or directory"),
])
def test_bad_input_exits_2_with_one_line(args, message):
    proc = _cli(*args, "trainer.max_steps=1")
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), proc.stderr
    assert message in lines[0]


def test_unreadable_yaml_exits_2(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("model:\n  micro_batch_size: [1,\n", encoding="utf-8")
    proc = _cli("--config", str(bad))
    assert proc.returncode == 2
    assert proc.stderr.startswith(f"error: {bad}: not a readable YAML config")


def test_checkpoint_of_another_config_is_refused(tmp_path):
    trainer.train(load_settings(overrides=["trainer.max_steps=1"]), save_dir=tmp_path, show_progress=False)
    proc = _cli("trainer.max_steps=2", "model.hidden_size=32", "model.ffn_hidden_size=128", "--resume", str(tmp_path))
    assert proc.returncode == 2
    assert "step=000001-consumed_samples=8 was written with another model config" in proc.stderr
    assert "model.hidden_size: 64 in the checkpoint, 32 now" in proc.stderr
    done = _cli("trainer.max_steps=1", "--resume", str(tmp_path))
    assert done.returncode == 2 and "already reaches trainer.max_steps=1" in done.stderr


def test_torn_checkpoint_is_refused_and_saving_is_atomic(tmp_path):
    settings = load_settings(overrides=["trainer.max_steps=1"])
    res = trainer.train(settings, save_dir=tmp_path, show_progress=False)
    path = os.path.join(res.checkpoints[0], "__0_0.distcp")     # the torch_dist directory's one shard
    assert [p for p in os.listdir(tmp_path) if p.endswith(".tmp")] == []
    with open(path, "r+b") as fh:
        fh.truncate(100)
    with pytest.raises(trainer.ResumeError, match="every checkpoint there is damaged"):
        trainer.train(load_settings(overrides=["trainer.max_steps=2"]), resume=tmp_path, show_progress=False)


def test_config_errors_name_the_field():
    with pytest.raises(ConfigError, match="model.optim.name='sgd'"):
        load_settings(overrides=["model.optim.name=sgd"])
    with pytest.raises(ConfigError, match="world size|process"):
        load_settings(world_size=2)
    with pytest.raises(ConfigError, match="data parallelism only"):
        load_settings(overrides=["trainer.devices=2", "model.tensor_model_parallel_size=2"])


def test_checkpoint_of_another_tokenizer_is_refused(tmp_path):
    import dataclasses

    settings = load_settings(overrides=["trainer.max_steps=1"])
    trainer.train(settings, save_dir=tmp_path, show_progress=False)
    other = dataclasses.replace(load_settings(overrides=["trainer.max_steps=2"]), tokenizer_fingerprint="f" * 64)
    with pytest.raises(trainer.ResumeError, match=f"was trained with tokenizer {settings.tokenizer_fingerprint[:12]}… "
                       "but model.tokenizer.model is ffffffffffff…"):
        trainer.train(other, resume=tmp_path, show_progress=False)


def test_fresh_clone_builds_tokenizer_and_indexed_files_on_first_use(tmp_path):
    proc = _cli("trainer.max_steps=1", env={"LABSUPPORT_WORK": str(tmp_path)})
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("step 1 · loss ")
    assert sorted(p.name for p in (tmp_path / "indexed").glob("*.idx")) == [
        f"{d}_text_document.idx" for d in ("books", "code", "korean", "web")]
    assert len(list((tmp_path / "tokenizer").glob("workbook_bpe8000_*.model"))) == 1
