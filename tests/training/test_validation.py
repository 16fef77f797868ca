"""Validation in chapter 6's trainer (labsupport.training.validation): Megatron's evaluate on the
validation blend — the right steps and samples, the loss of an independent computation, the same
samples and losses after a resume, one value on every data-parallel rank, readers that skip the
validation lines, and bad settings refused."""
from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
import torch
from torch.nn import functional as F

from labsupport.datasets.splits import SPLITS, split_indices
from labsupport.distributed.launch import run_workers
from labsupport.training import checkpoint as ckpt
from labsupport.training import trainer, validation
from labsupport.training.data import build_blend, collate
from labsupport.training.run_log import read_log, reconcile_log, training_records, validation_records
from labsupport.training.settings import ConfigError, load_settings

BASE = ["trainer.max_steps=6", "model.optim.sched.warmup_steps=2"]
VAL = ["trainer.val_check_interval=2", "trainer.limit_val_batches=1"]


def _settings(*extra: str):
    return load_settings(overrides=BASE + list(extra))


def _lines(path):
    return [json.loads(line) for line in open(path, encoding="utf-8")]


@pytest.fixture(scope="module")
def straight(tmp_path_factory):
    """The uninterrupted run with validation every 2 steps on 1 global batch, and its log file."""
    log = tmp_path_factory.mktemp("straight") / "log.jsonl"
    return trainer.train(_settings(*VAL), log_file=log, show_progress=False), log


def test_validation_lines_come_at_the_interval_with_limit_val_batches_global_batches(straight):
    res, log = straight
    g = res.settings.config.model.global_batch_size
    assert [r["val_step"] for r in res.val_log] == [2, 4, 6]
    assert [r["val_samples"] for r in res.val_log] == [g, g, g]
    # the iterator continues (Megatron): validation k reads validation samples [(k-1)·G, k·G)
    assert [r["consumed_valid_samples"] for r in res.val_log] == [g, 2 * g, 3 * g]
    assert all(r["val_loss_tokens"] == g * res.settings.config.model.encoder_seq_length for r in res.val_log)
    lines = _lines(log)
    kinds = [("val", r["val_step"]) if "val_step" in r else ("step", r["step"]) for r in lines]
    assert kinds == [("step", 1), ("step", 2), ("val", 2), ("step", 3), ("step", 4), ("val", 4),
                     ("step", 5), ("step", 6), ("val", 6)]
    assert [r for r in lines if "val_step" in r] == res.val_log
    assert all("step" not in r for r in res.val_log) and all("val_step" not in r for r in res.log)


def test_validation_off_by_default_changes_nothing(tmp_path, straight):
    """The chapter's config validates never; turning it on leaves every training number as it was."""
    assert _settings().config.trainer.val_check_interval is None
    off = trainer.train(_settings(), save_dir=tmp_path, log_file=tmp_path / "log.jsonl", show_progress=False)
    assert off.val_log == [] and all("val_step" not in r for r in _lines(tmp_path / "log.jsonl"))
    assert "consumed_valid_samples" not in ckpt._read_verified(Path(off.checkpoints[-1]))
    for key in ("loss", "samples", "batch_sha256", "domain_loss"):
        assert [r[key] for r in off.log] == [r[key] for r in straight[0].log], key


def test_the_validation_blend_is_the_valid_ranges_blended_with_the_training_weights():
    s = _settings(*VAL)
    valid, train = validation.build_valid_blend(s), build_blend(s)
    size = validation.valid_num_samples(s)
    assert size == (6 // 2 + 1) * 1 * 8                                   # Megatron's (T // N + 1) × L × G
    weights = np.array(s.config.model.data.blend()[1]) / sum(s.config.model.data.blend()[1])
    assert np.allclose(valid.weights, weights)
    counts = np.bincount(np.asarray(valid.dataset_index), minlength=len(weights))
    assert counts.tolist() == [math.ceil(size * w) for w in weights]      # Megatron's per-dataset target
    for d, ds in enumerate(valid.datasets):
        n_docs = len(ds.dataset)
        want = split_indices(s.config.model.data.splits_string, n_docs)[SPLITS.index("valid")]
        assert np.array_equal(ds.indices, want), s.names[d]
        assert not set(ds.indices.tolist()) & set(train.datasets[d].indices.tolist())


def _independent_loss(model, blend, indices, dense):
    """Mean loss per loss token of ``indices``, in one batch, without the trainer's helpers."""
    batch = collate([blend[i] for i in indices], indices, dense)
    model.eval()
    with torch.no_grad():
        logits = model(batch.tokens, batch.position_ids, batch.masked).double()
    logp = F.log_softmax(logits, dim=-1).gather(-1, batch.labels.unsqueeze(-1)).squeeze(-1)
    mask = batch.loss_mask.double()
    return float(-(logp * mask).sum() / mask.sum())


def test_the_loss_equals_an_independent_computation_on_the_same_samples():
    s = _settings("trainer.max_steps=4", "trainer.val_check_interval=4", "trainer.limit_val_batches=2")
    res = trainer.train(s, show_progress=False)
    (rec,) = res.val_log
    assert (rec["val_step"], rec["val_samples"], rec["consumed_valid_samples"]) == (4, 16, 16)
    assert res.model.training                           # back in training mode after validating
    valid = validation.build_valid_blend(s)
    want = _independent_loss(res.model, valid, list(range(16)), s.config.model.data.reset_attention_mask)
    assert rec["val_loss"] == pytest.approx(want, rel=1e-6)
    other = _independent_loss(res.model, valid, list(range(16, 32)), s.config.model.data.reset_attention_mask)
    assert abs(rec["val_loss"] - other) > 1e-4          # other samples give another loss: the samples matter


@pytest.mark.parametrize("stop", [3, 4])
def test_a_resumed_run_validates_on_the_same_samples_bit_for_bit(tmp_path, straight, stop):
    """Stop after step 3 (between validations) or 4 (just after one), resume in the same log:
    every validation line equals the uninterrupted run's, floats compared exactly."""
    s, log = _settings(*VAL), tmp_path / "log.jsonl"
    first = trainer.train(s, stop_after=stop, save_dir=tmp_path / "ck", log_file=log, show_progress=False)
    saved = ckpt._read_verified(Path(first.checkpoints[-1]))
    assert saved["consumed_valid_samples"] == (stop // 2) * 8
    trainer.train(s, resume=tmp_path / "ck", log_file=log, show_progress=False)
    train_lines, val_lines = read_log(log)
    assert val_lines == straight[0].val_log
    assert [r["loss"] for r in train_lines] == [r["loss"] for r in straight[0].log]


def test_a_checkpoint_without_consumed_valid_samples_resumes_at_megatrons_fallback(tmp_path, straight):
    """A checkpoint of a run that did not validate: (step // N) × L × G validation samples are taken
    as read (Megatron's training.py:3351-3355), so the validations after it are the straight run's."""
    first = trainer.train(_settings(), stop_after=3, save_dir=tmp_path, show_progress=False)
    assert "consumed_valid_samples" not in ckpt._read_verified(Path(first.checkpoints[-1]))
    second = trainer.train(_settings(*VAL), resume=tmp_path, show_progress=False)
    assert second.val_log == straight[0].val_log[1:]


def test_two_gloo_ranks_log_the_same_validation_loss_as_one_rank(straight):
    two = run_workers(trainer.train_worker, 2, args=(None, BASE + VAL + ["trainer.devices=2"]), timeout=180,
                      echo=False)
    assert two[0]["val_log"] == two[1]["val_log"]                         # all-reduced: one value on every rank
    one = straight[0].val_log
    assert [r["consumed_valid_samples"] for r in two[0]["val_log"]] == [r["consumed_valid_samples"] for r in one]
    assert [r["val_loss_tokens"] for r in two[0]["val_log"]] == [r["val_loss_tokens"] for r in one]
    np.testing.assert_allclose([r["val_loss"] for r in two[0]["val_log"]], [r["val_loss"] for r in one],
                               rtol=1e-5, atol=1e-6)


def test_readers_skip_validation_lines(tmp_path, straight):
    res, log = straight
    train_lines, val_lines = read_log(log)
    assert [r["step"] for r in train_lines] == [1, 2, 3, 4, 5, 6] and len(val_lines) == 3
    assert training_records(_lines(log)) == train_lines and validation_records(_lines(log)) == val_lines
    copy = tmp_path / "log.jsonl"
    copy.write_bytes(log.read_bytes())
    done = reconcile_log(copy, 4)       # a resume from step 4: later steps and later validations dropped
    assert done == {"dropped": 3, "bad": 0, "aside": None}
    kept = _lines(copy)
    assert [r.get("step", r.get("val_step")) for r in kept] == [1, 2, 2, 3, 4, 4]
    assert validation_records(kept) == res.val_log[:2]


@pytest.mark.parametrize("override, message", [
    ("trainer.val_check_interval=0", "trainer.val_check_interval=0: expected an integer ≥ 1 (optimizer steps) or null"),
    ("trainer.val_check_interval=-3", "trainer.val_check_interval=-3: expected an integer ≥ 1"),
    ("trainer.val_check_interval=0.5", "trainer.val_check_interval=0.5: expected an integer ≥ 1"),
    ("trainer.val_check_interval=often", "trainer.val_check_interval='often': expected an integer ≥ 1"),
    ("trainer.limit_val_batches=0", "trainer.limit_val_batches=0: expected an integer ≥ 1 (global batches) or null"),
])
def test_bad_validation_values_are_refused_naming_the_key(override, message):
    with pytest.raises(ConfigError) as info:
        load_settings(overrides=[override])
    assert str(info.value).startswith(message), str(info.value)
    assert "\n" not in str(info.value)


def test_an_interval_without_batches_is_refused():
    with pytest.raises(ConfigError, match=r"^trainer.limit_val_batches=None with trainer.val_check_interval=5: "):
        load_settings(overrides=["trainer.val_check_interval=5", "trainer.limit_val_batches=null"])
    assert load_settings(overrides=["trainer.limit_val_batches=null"]).config.trainer.limit_val_batches is None


def test_a_checkpoint_that_read_past_the_validation_blend_is_refused(tmp_path):
    trainer.train(_settings("trainer.val_check_interval=1", "trainer.limit_val_batches=3"), stop_after=3,
                  save_dir=tmp_path, show_progress=False)
    with pytest.raises(ConfigError, match=r"^trainer.val_check_interval=2: the validation at step 4 needs"):
        trainer.train(_settings(*VAL), resume=tmp_path, show_progress=False)


def test_the_checkpoint_keeps_consumed_valid_samples_only_when_validating(tmp_path):
    s = _settings(*VAL)
    res = trainer.train(s, stop_after=2, save_dir=tmp_path, show_progress=False)
    assert ckpt.load_checkpoint(tmp_path, s).state["consumed_valid_samples"] == 8 == res.val_log[-1][
        "consumed_valid_samples"]


def test_the_key_table_maps_the_validation_keys_and_renders_them_only_when_on():
    from labsupport.config import load_config
    from labsupport.training import generations as G
    from labsupport.training.settings import DEFAULT_CONFIG

    rows = {r.key: r for r in G.ROWS if r.key in G.VALIDATION_KEYS}
    assert rows["trainer.val_check_interval"].bridge == ("validation", "ValidationConfig", "eval_interval")
    assert rows["trainer.limit_val_batches"].bridge == ("validation", "ValidationConfig", "eval_iters")
    assert {"eval_interval", "eval_iters"} <= set(G.upstream()["bridge:ValidationConfig"]["names"])
    assert {"trainer.val_check_interval", "trainer.limit_val_batches"} <= set(
        G.upstream()["nemo1:megatron_gpt_config.yaml"]["names"])
    off = load_config(DEFAULT_CONFIG)
    on = load_config(DEFAULT_CONFIG, ["trainer.val_check_interval=10"])
    assert all("val_check_interval" not in f(off) and "eval_interval" not in f(off)
               for f in (G.render_nemo1, G.render_nemo2, G.render_bridge))
    nemo1 = G.render_nemo1(on)
    assert "trainer.val_check_interval=10 \\" in nemo1 and "trainer.limit_val_batches=2" in nemo1
    assert "val_check_interval=10, limit_val_batches=2," in G.render_nemo2(on)
    assert "validation=ValidationConfig(eval_interval=10, eval_iters=2)," in G.render_bridge(on)


def test_the_command_resumed_in_a_fresh_process_logs_the_same_validation_lines(tmp_path):
    from tests.training.test_trainer import _cli

    over = BASE + VAL
    assert _cli(*over, "--log", str(tmp_path / "straight.jsonl")).returncode == 0
    first = _cli(*over, "--stop-after", "3", "--save-dir", str(tmp_path / "ck"), "--log", str(tmp_path / "r.jsonl"))
    assert first.returncode == 0, first.stderr
    second = _cli(*over, "--resume", str(tmp_path / "ck"), "--log", str(tmp_path / "r.jsonl"))
    assert second.returncode == 0, second.stderr
    assert "val_loss" in second.stdout                      # the closing line names the last validation
    want, got = read_log(tmp_path / "straight.jsonl"), read_log(tmp_path / "r.jsonl")
    assert got[1] == want[1] and [r["val_step"] for r in got[1]] == [2, 4, 6]
    assert [r["loss"] for r in got[0]] == [r["loss"] for r in want[0]]
