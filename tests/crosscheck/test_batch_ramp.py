"""Chapter 6's batch-size ramp-up against megatron-core's ``num_microbatches_calculator`` (0.16.1 on
3.11: ``RampupBatchsizeNumMicroBatchesCalculator``; 0.19.2 on 3.12: ``StepBatchsizeNumMicroBatchesCalculator``,
which replaced it in 0.18.0): the global batch and the micro-batch count of every step, on a seeded sweep of
schedules nobody chose by hand, and on the trainer's own log; on 0.18+ the old ramp-up argument is ignored."""
from __future__ import annotations

import importlib
import logging
import random
import warnings

import pytest

from labsupport.training import trainer
from labsupport.training.batch_ramp import BatchSchedule, parse_step_schedule
from labsupport.training.settings import load_settings

pytestmark = pytest.mark.crosscheck
STEPS = 60


@pytest.fixture(scope="module")
def nmc(megatron):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        module = importlib.import_module("megatron.core.num_microbatches_calculator")
    logging.getLogger("megatron").setLevel(logging.ERROR)
    return module


def _megatron_steps(calc, steps: int) -> list[tuple[int, int]]:
    """(global batch, micro-batches) per step, driven as Megatron's train loop drives it."""
    consumed, out = 0, []
    for _ in range(steps):
        calc.update(consumed, consistency_check=True)
        out.append((calc.get_current_global_batch_size(), calc.get()))
        consumed += calc.get_current_running_global_batch_size()
    return out


def _ours(schedule: BatchSchedule, steps: int) -> list[tuple[int, int]]:
    sizes = schedule.sizes(steps)
    return [(b, schedule.num_microbatches(sum(sizes[:k]))) for k, b in enumerate(sizes)]


def _rampups(n: int):
    rng = random.Random(35)
    for _ in range(n):
        micro, dp = rng.randint(1, 4), rng.randint(1, 4)
        group = micro * dp
        start, increment = group * rng.randint(1, 4), group * rng.randint(1, 3)
        yield micro, dp, start, increment, rng.randint(1, 600), start + increment * rng.randint(1, 6)


def _step_schedules(n: int):
    rng = random.Random(36)
    for _ in range(n):
        micro, dp, seq = rng.randint(1, 4), rng.randint(1, 4), rng.choice([16, 64, 100, 128])
        group, tokens, sizes = micro * dp, [0], sorted(rng.sample(range(1, 9), rng.randint(1, 4)))
        for _ in sizes[1:]:
            tokens.append(tokens[-1] + rng.randint(1, 40) * seq + rng.randint(0, seq - 1))
        text = " ".join(f"{t}:{s * group}" for t, s in zip(tokens, sizes))
        yield micro, dp, seq, text, sizes[-1] * group


def test_rampup_equals_megatron_core_every_step(nmc):
    if not hasattr(nmc, "RampupBatchsizeNumMicroBatchesCalculator"):
        pytest.skip("this megatron-core has no ramp-up calculator (removed in 0.18.0): the step schedule test "
                    "covers it")
    for micro, dp, start, increment, samples, final in _rampups(200):
        calc = nmc.RampupBatchsizeNumMicroBatchesCalculator(final, micro, dp, False, 1, start, increment, samples)
        ours = BatchSchedule(final, micro * dp, (start, increment, samples))
        assert _ours(ours, STEPS) == _megatron_steps(calc, STEPS), (micro, dp, start, increment, samples, final)


def test_step_schedule_equals_megatron_core_every_step(nmc):
    if not hasattr(nmc, "StepBatchsizeNumMicroBatchesCalculator"):
        pytest.skip("this megatron-core has no step batch-size schedule (added in 0.18.0)")
    for micro, dp, seq, text, final in _step_schedules(200):
        calc = nmc.StepBatchsizeNumMicroBatchesCalculator(micro, dp, False, 1, text, seq)
        ours = BatchSchedule(final, micro * dp, None, tuple(parse_step_schedule(text, seq)))
        assert _ours(ours, STEPS) == _megatron_steps(calc, STEPS), (micro, dp, seq, text)


def test_megatron_core_0_18_ignores_the_old_rampup_argument(nmc):
    if hasattr(nmc, "RampupBatchsizeNumMicroBatchesCalculator"):
        pytest.skip("this megatron-core still ramps up (≤ 0.17)")
    nmc.destroy_num_microbatches_calculator()
    try:
        nmc.init_num_microbatches_calculator(1, [4, 4, 24], 16, 4, 1)
        nmc.update_num_microbatches(0, consistency_check=True)
        assert nmc.get_current_global_batch_size() == 16       # constant: the ramp-up is not applied
    finally:
        nmc.destroy_num_microbatches_calculator()


def test_the_trainers_log_equals_megatron_core(nmc):
    """The trainer's own steps (a 6-step run) against the calculator this megatron-core has."""
    base = ["trainer.max_steps=6", "model.optim.sched.warmup_steps=2", "model.global_batch_size=16"]
    if hasattr(nmc, "RampupBatchsizeNumMicroBatchesCalculator"):
        settings = load_settings(overrides=base + ["model.rampup_batch_size=[4,4,24]"])
        calc = nmc.RampupBatchsizeNumMicroBatchesCalculator(16, 4, 1, False, 1, 4, 4, 24)
    else:
        settings = load_settings(overrides=base + ["model.step_batch_size_schedule='0:4 512:8 1024:16'"])
        calc = nmc.StepBatchsizeNumMicroBatchesCalculator(4, 1, False, 1, "0:4 512:8 1024:16", 64)
    log = trainer.train(settings, show_progress=False).log
    expected = _megatron_steps(calc, 6)
    assert [(r["global_batch_size"], r["num_microbatches"]) for r in log] == expected
    assert len({b for b, _ in expected}) > 1                   # the schedule really changes within the run
