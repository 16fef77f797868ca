"""Batch-size ramp-up in chapter 6's trainer (labsupport.training.batch_ramp): Megatron's arithmetic on
hand-worked cases, the refusals, a run whose steps follow the schedule, a checkpoint at every change of
the micro-batch count, and a run resumed in the middle of the ramp that equals the uninterrupted one
bit for bit.  tests/crosscheck/test_batch_ramp.py compares the schedule with megatron-core's own."""
from __future__ import annotations

import re

import pytest
import torch

from labsupport.training import trainer
from labsupport.training.batch_ramp import BatchSchedule, parse_step_schedule, ramp_global_batch
from labsupport.training.settings import ConfigError, load_settings

# global batch 16 = 4 × micro 4; ramp 4 → 16 in steps of 4 over 24 samples: an increment every 8 samples
RAMP = ["trainer.max_steps=6", "model.optim.sched.warmup_steps=2", "model.global_batch_size=16",
        "model.rampup_batch_size=[4,4,24]"]
SIZES = [4, 4, 8, 12, 16, 16]


def test_ramp_arithmetic_by_hand():
    # (16 - 4) / 4 = 3 increments over 24 samples: one per 8.0 consumed samples, full after more than 24
    got = [ramp_global_batch(c, 4, 4, 24, 16) for c in (0, 7, 8, 15, 16, 24, 25)]
    assert got == [4, 4, 8, 8, 12, 16, 16]
    # a float per-increment (100 / 3 = 33.33…): int(consumed / 33.33…) as Megatron computes it
    assert [ramp_global_batch(c, 8, 8, 100, 32) for c in (33, 34, 66, 67, 100, 101)] == [8, 16, 16, 24, 32, 32]
    assert BatchSchedule(16, 4, (4, 4, 24)).sizes(6) == SIZES


def test_step_schedule_thresholds_are_tokens():
    # 1K tokens ÷ 64 tokens per sample = 15 samples; 2.5K → 39
    assert parse_step_schedule("0:4 1K:8, 2.5K:16", 64) == [(0, 4), (15, 8), (39, 16)]
    sched = BatchSchedule(16, 4, None, tuple(parse_step_schedule("0:4 1K:8 2.5K:16", 64)))
    assert sched.sizes(6) == [4, 4, 4, 4, 8, 8] and sched.sizes(3, consumed=40) == [16, 16, 16]
    assert sched.steps_for(24) == 5 and sched.consumed_after(5) == 24
    with pytest.raises(ValueError, match="inside step"):
        sched.steps_for(10)


def test_settings_carry_the_schedule():
    s = load_settings(overrides=RAMP)
    assert s.schedule.sizes(6) == SIZES and s.total_samples == sum(SIZES)
    assert s.num_microbatches == 4                       # validation: the full global batch
    plain = load_settings(overrides=["trainer.max_steps=6"])
    assert plain.total_samples == 6 * plain.config.model.global_batch_size


@pytest.mark.parametrize("override, message", [
    ("model.rampup_batch_size=[4,4]", "expected three integers"),
    ("model.rampup_batch_size=[16,4,24]", "must be below model.global_batch_size=16"),
    ("model.rampup_batch_size=[4,5,24]", "multiple of the increment"),
    ("model.rampup_batch_size=[4,4,0]", "must be ≥ 1"),
    ("model.rampup_batch_size=[6,2,24]", "step 1's global batch 6 is not divisible by model.micro_batch_size × DP = 4"),
    ("model.step_batch_size_schedule='0:4 1K:16'", "both set"),
])
def test_bad_ramps_are_refused_in_one_line(override, message):
    with pytest.raises(ConfigError, match=message) as info:
        load_settings(overrides=RAMP + [override])
    assert "\n" not in str(info.value)


@pytest.mark.parametrize("schedule, message", [
    ("'64:4 1K:16'", "first threshold must be 0"),
    ("'0:8 1K:4 2K:16'", "never shrink"),
    ("'0:4 1K:8'", "differs from model.global_batch_size=16"),
    ("'0:4 1K'", "not THRESHOLD:BATCH_SIZE"),
])
def test_bad_step_schedules_are_refused(schedule, message):
    base = [o for o in RAMP if "rampup" not in o]
    with pytest.raises(ConfigError, match=message):
        load_settings(overrides=base + [f"model.step_batch_size_schedule={schedule}"])


@pytest.fixture(scope="module")
def straight(tmp_path_factory):
    """The uninterrupted ramped run, saving only where Megatron would (changes and the end)."""
    folder = tmp_path_factory.mktemp("ramp")
    return trainer.train(load_settings(overrides=RAMP), save_dir=folder, show_progress=False), folder


def test_each_step_reads_its_global_batch_and_consumed_samples_adds_them(straight):
    res, _ = straight
    assert [r["global_batch_size"] for r in res.log] == SIZES
    assert [r["num_microbatches"] for r in res.log] == [b // 4 for b in SIZES]
    assert [r["tokens"] for r in res.log] == [b * 64 for b in SIZES]
    ends = [sum(SIZES[:k + 1]) for k in range(6)]
    assert [r["consumed_samples"] for r in res.log] == ends
    # the sampler reads on where the previous step stopped: step k reads [consumed before, consumed after)
    assert [r["samples"] for r in res.log] == [list(range(e - b, e)) for e, b in zip(ends, SIZES)]


def test_a_checkpoint_is_saved_before_each_change_of_the_micro_batch_count(straight):
    res, _ = straight
    # sizes 4, 4 | 8 | 12 | 16, 16: the count changes after steps 2, 3 and 4; step 6 ends the run
    assert [int(re.search(r"step=(\d+)", str(p)).group(1)) for p in res.checkpoints] == [2, 3, 4, 6]


@pytest.mark.parametrize("stop", [3, 4])
def test_a_run_resumed_mid_ramp_equals_the_uninterrupted_one_bit_for_bit(tmp_path, straight, stop):
    res, _ = straight
    first = trainer.train(load_settings(overrides=RAMP), save_dir=tmp_path, stop_after=stop, show_progress=False)
    assert first.consumed_samples == sum(SIZES[:stop])
    rest = trainer.train(load_settings(overrides=RAMP), resume=tmp_path, show_progress=False)
    log = first.log + rest.log
    for key in ("loss", "global_batch_size", "consumed_samples", "samples", "batch_sha256"):
        assert [r[key] for r in log] == [r[key] for r in res.log], key
    for (name, a), b in zip(rest.model.state_dict().items(), res.model.state_dict().values()):
        assert torch.equal(a, b), name
