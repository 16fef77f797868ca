"""Megatron's data-parallel sampler (labsupport.training.sampler): slices, resume, errors."""
from __future__ import annotations

import itertools

import numpy as np
import pytest

from labsupport.training.sampler import MegatronPretrainingSampler, num_microbatches, rank_slice


def _steps(total, consumed, micro, dp, accumulation, steps):
    """Per optimizer step, the samples all ranks read (rank order, micro-batch order)."""
    its = [iter(MegatronPretrainingSampler(total, consumed, micro, r, dp)) for r in range(dp)]
    out = []
    for _ in range(steps):
        taken = []
        for _ in range(accumulation):
            for it in its:
                taken += next(it)
        out.append(taken)
    return out


def test_docstring_example_and_rank_slice():
    assert list(MegatronPretrainingSampler(12, 4, 2, 1, 2)) == [[6, 7], [10, 11]]
    assert list(MegatronPretrainingSampler(12, 4, 2, 0, 2)) == [[4, 5], [8, 9]]
    assert rank_slice(8, 2, 1, 2) == [10, 11]


@pytest.mark.parametrize("micro,dp,accumulation", [(1, 1, 1), (4, 1, 2), (2, 2, 2), (3, 4, 1), (2, 3, 3)])
def test_ranks_partition_every_group(micro, dp, accumulation):
    total = 500
    steps = _steps(total, 0, micro, dp, accumulation, 10)
    flat = list(itertools.chain.from_iterable(steps))
    assert flat == sorted(flat) == list(range(len(flat)))  # each sample once, none skipped
    for r in range(dp):  # rank r's first micro-batch is its rank_slice of the first group
        assert next(iter(MegatronPretrainingSampler(total, 0, micro, r, dp))) == rank_slice(0, micro, r, dp)


@pytest.mark.parametrize("seed", range(6))
def test_resume_never_repeats_or_skips(seed):
    rng = np.random.default_rng(seed)
    micro, dp, acc = (int(x) for x in rng.integers(1, 5, size=3))
    global_batch = micro * dp * acc
    steps, stop = 12, int(rng.integers(1, 11))
    total = global_batch * steps + int(rng.integers(0, global_batch))
    straight = _steps(total, 0, micro, dp, acc, steps)
    first = _steps(total, 0, micro, dp, acc, stop)
    resumed = _steps(total, stop * global_batch, micro, dp, acc, steps - stop)
    assert first + resumed == straight
    seen = list(itertools.chain.from_iterable(first + resumed))
    assert len(seen) == len(set(seen)) == steps * global_batch
    # the classic bug: a restart without consumed_samples reads the first batches again
    restarted = _steps(total, 0, micro, dp, acc, steps - stop)
    assert restarted[0] == first[0] != resumed[0]


def test_drop_last_and_partial_group():
    assert list(MegatronPretrainingSampler(10, 0, 2, 1, 2)) == [[2, 3], [6, 7]]          # 8, 9 dropped
    assert list(MegatronPretrainingSampler(10, 0, 2, 1, 2, drop_last=False)) == [[2, 3], [6, 7], []]
    assert list(MegatronPretrainingSampler(10, 0, 2, 0, 2, drop_last=False))[-1] == [8, 9]


def test_num_microbatches():
    assert num_microbatches(16, 2, 4) == 2
    with pytest.raises(ValueError,
                       match="global_batch_size 12 is not divisible by micro_batch_size 2 × data_parallel_size 4"):
        num_microbatches(12, 2, 4)


@pytest.mark.parametrize("args,match", [
    ((0, 0, 1, 0, 1), "total_samples"), ((10, 10, 1, 0, 1), "no samples left"),
    ((10, 0, 0, 0, 1), "micro_batch_size"), ((10, 0, 1, 2, 2), "data_parallel_rank 2"),
    ((10, -1, 1, 0, 1), "consumed_samples"),
])
def test_bad_arguments_name_the_field(args, match):
    with pytest.raises(ValueError, match=match):
        MegatronPretrainingSampler(*args)


def test_batch_arithmetic_of_a_config():
    from omegaconf import OmegaConf

    from labsupport.config import ConfigError
    from labsupport.training.sampler import batch_arithmetic

    def cfg(devices, nodes, tp, pp, micro, global_bs, seq=512):
        return OmegaConf.create({"trainer": {"devices": devices, "num_nodes": nodes},
                                 "model": {"tensor_model_parallel_size": tp, "pipeline_model_parallel_size": pp,
                                           "micro_batch_size": micro, "global_batch_size": global_bs,
                                           "encoder_seq_length": seq}})

    assert batch_arithmetic(cfg(8, 2, 2, 2, 2, 64), 10) == {"data_parallel_size": 4, "accumulation_steps": 8,
                                                            "tokens_per_step": 64 * 512, "consumed_samples": 640}
    with pytest.raises(ConfigError):
        batch_arithmetic(cfg(8, 1, 3, 1, 1, 8), 1)                 # TP × PP does not divide 8 GPUs
    with pytest.raises(ValueError, match="not divisible"):
        batch_arithmetic(cfg(8, 1, 2, 1, 2, 12), 1)                # 12 samples over micro 2 × DP 4
