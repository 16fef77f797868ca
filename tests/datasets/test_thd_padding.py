"""THD packing under context and sequence parallelism: Megatron-Bridge v0.6.0's padding multiple
(docs/training/packed-sequences.md) and the static cu_seqlens CUDA graphs need (packing/gpt_sft.py)."""
from __future__ import annotations

import numpy as np
import pytest

from labsupport.datasets.sft_packing import cuda_graph_cu_seqlens, pad_seq_to_mult, padded_cu_seqlens


@pytest.mark.parametrize("cp, tp, sp, want", [
    (1, 1, False, 1), (1, 4, True, 4),            # the two examples of Bridge's packed-sequences.md
    (1, 4, False, 1), (2, 1, False, 4), (2, 4, False, 4),
    (2, 4, True, 8), (4, 2, True, 8), (3, 2, True, 6), (3, 4, True, 12)])
def test_pad_seq_to_mult_is_lcm_of_2cp_and_cp_tp_with_sp(cp, tp, sp, want):
    mult = pad_seq_to_mult(cp, tp, sp)
    assert mult == want
    chunks = 2 * cp if cp > 1 else 1
    assert mult % chunks == 0 and (not (sp and tp > 1) or mult % (cp * tp) == 0)


def test_pad_seq_to_mult_refuses_a_size_below_one():
    with pytest.raises(ValueError):
        pad_seq_to_mult(0, 1)


def test_padded_offsets_align_every_sequence_and_keep_order():
    cu = padded_cu_seqlens([5, 3, 8], pad_seq_to_mult(2, 1))       # multiple 4
    assert cu.tolist() == [0, 8, 12, 20] and cu.dtype == np.int32
    assert (np.diff(cu) % 4 == 0).all() and (np.diff(cu) >= [5, 3, 8]).all()
    assert padded_cu_seqlens([5, 3], 1).tolist() == [0, 5, 8]     # multiple 1: the logical offsets


def test_cuda_graph_cu_seqlens_give_one_shape_for_every_pack():
    packs = [[0, 5, 8, 16], [0, 16], [0, 3, 7]]
    shaped = [cuda_graph_cu_seqlens(cu, max_sequences_per_pack=4, pack_size=16) for cu in packs]
    assert {len(c) for c in shaped} == {6}
    assert shaped[0].tolist() == [0, 5, 8, 16, 16, 16]
    assert shaped[2].tolist() == [0, 3, 7, 16, 16, 16]              # trailing padding closes the pack
    assert all((np.diff(c) >= 0).all() and c[-1] == 16 for c in shaped)
    with pytest.raises(ValueError):
        cuda_graph_cu_seqlens([0, 2, 4, 6, 8, 10, 16], max_sequences_per_pack=4, pack_size=16)
