"""labsupport.datasets.packed_run (chapter 4): Megatron-Bridge v0.6.0's rules for a packed SFT run, on every
combination of the sizes and switches they read, against the rules written out independently here."""
from __future__ import annotations

import itertools
import math
import re

import numpy as np
import pytest

from labsupport.datasets.bin_packing import first_fit_decreasing
from labsupport.datasets.packed_run import PackedRun

GRID = list(itertools.product((1, 2, 4), (1, 6, 8, 16), (1, 2, 4), (1, 2, 3, 4), (1, 2, 8), (False, True),
                              (True, False), (1000, 1024, 1026)))


def _expected(mbs, gbs, dp, cp, offline, pss, per_token, average) -> set[str]:
    """The rules broken, straight from Bridge's ConfigContainer.validate and megatron-core's calculator."""
    broken = set()
    if offline and mbs != 1:
        broken.add("offline_mbs")
    if not offline and mbs < 2:
        broken.add("in_batch_mbs")
    if gbs % (mbs * dp) != 0 or gbs // (mbs * dp) < 1:
        broken.add("gbs")
    if cp > 1 and pss % (2 * cp) != 0:
        broken.add("cp_length")
    if cp > 1 and not per_token:
        broken.add("per_token")
    if cp > 1 and average:
        broken.add("average")
    return broken


def _rule(problem: str) -> str:
    """Which rule a problem line states, by the field it starts with."""
    if problem.startswith("micro_batch_size=1: in-batch"):
        return "in_batch_mbs"
    return {"micro_batch_size": "offline_mbs", "global_batch_size": "gbs", "packed_sequence_size": "cp_length",
            "calculate_per_token_loss": "per_token", "average_in_collective": "average"}[problem.split("=")[0]]


@pytest.mark.parametrize("per_token, average", [(False, True), (True, False)])
def test_every_combination_breaks_exactly_the_rules_it_should(per_token, average):
    for mbs, gbs, dp, cp, tp, sp, offline, pss in GRID:
        run = PackedRun(global_batch_size=gbs, packed_sequence_size=pss, micro_batch_size=mbs, data_parallel_size=dp,
                        tensor_parallel_size=tp, context_parallel_size=cp, sequence_parallel=sp,
                        offline_packing=offline, calculate_per_token_loss=per_token, average_in_collective=average)
        problems = run.problems()
        want = _expected(mbs, gbs, dp, cp, offline, pss, per_token, average)
        rules = [_rule(p) for p in problems]
        assert len(rules) == len(set(rules)) and set(rules) == want, (run, problems)
        if want:
            with pytest.raises(ValueError, match="^" + re.escape(problems[0].split(":")[0]) + ":"):
                run.check()
        else:
            assert run.check() is run
        mult = run.pad_seq_to_mult
        assert mult == math.lcm(2 * cp if cp > 1 else 1, cp * tp if sp and tp > 1 else 1)


def test_bridge_suggests_micro_batch_1_with_the_same_token_slots():
    run = PackedRun(global_batch_size=32, packed_sequence_size=2048, micro_batch_size=4, data_parallel_size=2)
    assert run.problems() == ["micro_batch_size=4: offline packed sequences need 1; the same token slots per step: "
                              "micro_batch_size=1, global_batch_size=8, packed_sequence_size=8192"]
    fixed = run.equivalent_mbs1()
    assert fixed.check() is fixed and fixed.token_slots_per_step == 8 * 8192
    assert fixed.num_microbatches == 4 and run.num_microbatches == 4
    for pss, gbs in ((2048, 32), (4096, 16), (8192, 8)):       # the docs' 2K/GBS32, 4K/GBS16, 8K/GBS8
        assert PackedRun(gbs, pss).token_slots_per_step == 65_536


@pytest.mark.parametrize("field", ["global_batch_size", "packed_sequence_size", "micro_batch_size",
                                   "data_parallel_size", "tensor_parallel_size", "context_parallel_size"])
@pytest.mark.parametrize("value", [0, -1, 2.0, True, "8"])
def test_a_size_that_is_not_a_whole_number_is_refused_by_name(field, value):
    args = {"global_batch_size": 8, "packed_sequence_size": 1024, field: value}
    with pytest.raises(ValueError, match=f"^{field}="):
        PackedRun(**args)


def test_aligned_sequences_fit_the_pack_or_are_refused():
    run = PackedRun(8, 96, tensor_parallel_size=4, context_parallel_size=2, sequence_parallel=True,
                    calculate_per_token_loss=True, average_in_collective=False).check()
    assert run.pad_seq_to_mult == 8
    cu = run.padded_cu_seqlens([20, 19, 19, 21])
    assert cu.tolist() == [0, 24, 48, 72, 96] and cu.dtype == np.int32
    with pytest.raises(ValueError, match="pack the padded lengths"):
        run.padded_cu_seqlens([20, 19, 19, 21, 1])                 # 79 + 1 real tokens, 104 aligned


def test_the_alignment_changes_pack_membership():
    """Bridge: 'rebuild the packed output after changing topology because the alignment changes pack membership'."""
    rng = np.random.default_rng(0)
    lengths = rng.integers(20, 400, size=300)
    aligned = -(-lengths // 8) * 8
    plain, padded = first_fit_decreasing(lengths, 1024), first_fit_decreasing(aligned, 1024)
    assert len(padded) > len(plain)
    run = PackedRun(8, 1024, tensor_parallel_size=4, context_parallel_size=2, sequence_parallel=True,
                    calculate_per_token_loss=True, average_in_collective=False)
    for pack in padded.tolist():
        run.padded_cu_seqlens(lengths[pack])                       # every pack of aligned lengths fits


def test_no_equivalent_when_the_global_batch_does_not_divide_by_the_micro_batch():
    run = PackedRun(global_batch_size=6, packed_sequence_size=1024, micro_batch_size=4)
    assert [_rule(p) for p in run.problems()] == ["offline_mbs", "gbs"]
    with pytest.raises(ValueError, match="^global_batch_size=6: not a multiple of micro_batch_size=4"):
        run.equivalent_mbs1()
