"""labsupport.datasets.packed_run's batch rule (chapter 4) against megatron-core's own micro-batch calculator:
a global batch that does not divide by micro-batch × DP is refused by both, and the micro-batch counts agree.
(Megatron-Bridge's packing rules are read in its source, v0.6.0 — its config module imports Transformer
Engine, which needs CUDA — and cited in the module.)"""
from __future__ import annotations

import itertools

import pytest

from labsupport.datasets.packed_run import PackedRun

pytestmark = pytest.mark.crosscheck


def test_the_global_batch_rule_is_megatrons(megatron):
    from megatron.core.num_microbatches_calculator import ConstantNumMicroBatchesCalculator

    for gbs, mbs, dp in itertools.product(range(1, 33), (1, 2, 3, 4, 8), (1, 2, 3, 4, 8)):
        run = PackedRun(gbs, 1024, micro_batch_size=mbs, data_parallel_size=dp, offline_packing=mbs == 1)
        ours = not any(p.startswith("global_batch_size=") for p in run.problems())
        try:
            calc = ConstantNumMicroBatchesCalculator(gbs, mbs, dp, decrease_batch_size_if_needed=False, rank=1)
        except AssertionError:
            assert not ours, (gbs, mbs, dp)
        else:
            assert ours and calc.get() == run.num_microbatches, (gbs, mbs, dp)
