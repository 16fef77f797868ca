"""labsupport.training.restart: where a resumed run reads a domain's sample, and a restart with a changed blend."""
from __future__ import annotations

from labsupport.training.restart import blend_order, locate_sample, restart_with_new_blend


def test_blend_order_follows_the_weights():
    di, si = blend_order([3, 1], 8)
    assert di.tolist().count(0) == 6 and di.tolist().count(1) == 2
    assert [int(s) for d, s in zip(di, si) if d == 1] == [0, 1]


def test_locate_sample_worked_example():
    assert locate_sample([3, 1], 1, 0, 0, 1, 2, 2) == {"blend_index": 1, "step": 1, "rank": 1, "microbatch": 0}
    assert locate_sample([3, 1], 1, 0, 2, 1, 2, 2) is None                 # read before the resume
    found = locate_sample([3, 1], 0, 5, 4, 1, 2, 4)                        # 2 micro-batches a step
    di, si = blend_order([3, 1], 64)
    assert (di[found["blend_index"]], si[found["blend_index"]]) == (0, 5)
    assert found["step"] == found["blend_index"] // 4 + 1
    assert found["rank"] == found["blend_index"] % 2 and found["microbatch"] == found["blend_index"] % 4 // 2


def test_restart_with_new_blend_uses_the_real_guard():
    assert restart_with_new_blend([3, 1], [1, 1], 8, 2, 1, 2) == {
        "refused": True, "first_microbatch": [[0, 5], [1, 5]], "already_trained": 1}
    assert restart_with_new_blend([3, 1], [6, 2], 8, 2, 1, 2)["refused"] is False   # same shares: same samples
    assert restart_with_new_blend([3, 1], [1, 1], 0, 2, 0, 2)["refused"] is False   # nothing trained yet
