"""Where a blended, data-parallel run reads its samples after a resume — chapter 6 (end to end,
book §6.2.3's exact resume, and a restart with a changed blend).

Both functions are the arithmetic the chapter's exercises q4 and q5 ask for (the check of
``labsupport.check.ch06`` compares the learner's answers with them): chapter 3's blend
(:func:`labsupport.datasets.blending.build_blending_indices`) puts the domains' samples in order,
the :class:`~labsupport.training.sampler.MegatronPretrainingSampler` hands each rank its slice of
that order from ``consumed_samples`` on, and the data-plan guard
(:func:`labsupport.training.data_plan.check_plan`) refuses a resume that would change the samples
already trained on.

Example (weights 3 : 1, micro-batch 1, DP 2, global batch 2)::

    >>> locate_sample([3, 1], 1, 0, 0, 1, 2, 2)
    {'blend_index': 1, 'step': 1, 'rank': 1, 'microbatch': 0}
"""
from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import numpy as np

from labsupport.datasets.blending import build_blending_indices, normalize_weights
from labsupport.training.data_plan import DataPlanError, check_plan, consumed_digest, plan_of
from labsupport.training.sampler import MegatronPretrainingSampler, num_microbatches

__all__ = ["blend_order", "locate_sample", "restart_with_new_blend"]


def blend_order(weights: list[float], size: int) -> tuple[np.ndarray, np.ndarray]:
    """Chapter 3's blend of ``size`` samples under the data_prefix ``weights`` (any positive
    numbers; normalised): ``(dataset_index, dataset_sample_index)``, two int arrays of length
    ``size`` — blend position ``i`` reads sample ``dataset_sample_index[i]`` of domain
    ``dataset_index[i]``."""
    return build_blending_indices(normalize_weights(weights), size)


def locate_sample(weights: list[float], domain: int, k: int, consumed: int, micro: int, dp: int,
                  global_bs: int) -> dict[str, int] | None:
    """Where a run resumed at ``consumed`` samples reads ``domain``'s ``k``-th sample (counted from 0):
    ``{"blend_index", "step", "rank", "microbatch"}`` — its position in the blend, the optimizer
    step reading it (counted from 1 since the start of training, ``global_bs`` samples a step), the
    data-parallel rank (of ``dp``) and the micro-batch of that step (of ``global_bs / (micro × dp)``,
    from 0).  None when that sample was read before the resume.  Each rank's sampler is walked from
    ``consumed`` until it hands out that blend index.  Chapter 6's exercise q4 (the notebook's
    worked example of §6.2.3) asks for it."""
    di, si = blend_order(weights, size := max(consumed, 1) * 2 + 64)
    while not ((di == domain) & (si == k)).any():          # a blend long enough to hold that sample
        di, si = blend_order(weights, size := size * 2)
    index = int(np.flatnonzero((di == domain) & (si == k))[0])
    if index < consumed:
        return None
    group, acc = micro * dp, num_microbatches(global_bs, micro, dp)
    for rank in range(dp):
        for j, batch in enumerate(MegatronPretrainingSampler((index // group + 1) * group, consumed, micro, rank, dp)):
            if index in batch:
                return {"blend_index": index, "step": consumed // global_bs + j // acc + 1, "rank": rank,
                        "microbatch": j % acc}
    raise AssertionError(f"blend index {index} was handed to no rank")  # the sampler covers every index


class _Blend:
    """Chapter 3's blend of one-epoch, unshuffled domains (sample s is document s, so a sample's identity is
    (domain, s)), as the data-plan guard (:func:`check_plan`) sees it."""

    def __init__(self, weights: list[float], size: int) -> None:
        self.dataset_index, self.dataset_sample_index = blend_order(weights, size)
        self.weights, self.names, self.size = normalize_weights(weights), [f"d{d}" for d in range(len(weights))], size
        n = size + 1
        self.datasets = [SimpleNamespace(num_samples=n, num_epochs=1, shuffle_index=np.arange(n),
                                         sample_index=np.stack([np.arange(n + 1), np.zeros(n + 1, dtype=np.int64)], 1),
                                         document_index=np.arange(n + 2)) for _ in weights]

    def __len__(self) -> int:
        return self.size


def restart_with_new_blend(old: list[float], new: list[float], consumed: int, micro: int, rank: int,
                           dp: int) -> dict[str, Any]:
    """A restart at ``consumed`` samples with the blend weights changed from ``old`` to ``new``:
    ``{"refused": bool, "first_microbatch": [[domain, sample], …], "already_trained": int}`` — whether
    the real guard (:func:`check_plan`, ``allow=False``) refuses the checkpoint's plan, the ``micro``
    (domain, sample) pairs the sampler hands ``rank`` (of ``dp``) first from the new blend if it were
    accepted, and how many of them the run already trained on under ``old``.  The domains are
    one-epoch and unshuffled (a stand-in blend).  Chapter 6's exercise q5 asks for it."""
    size = consumed + micro * dp
    before, after = _Blend(old, size), _Blend(new, size)
    model = SimpleNamespace(seed=1234, encoder_seq_length=128, global_batch_size=micro * dp,
                            data=SimpleNamespace(flags={}, blend=lambda: (before.names, before.weights)))
    settings = SimpleNamespace(names=before.names, config=SimpleNamespace(model=model,
                                                                          trainer=SimpleNamespace(max_steps=1)))
    saved = plan_of(settings, before, consumed, consumed_digest(before, consumed).hexdigest())
    try:
        refused = check_plan(saved, settings, after, consumed, "checkpoint", allow=False) is None
    except DataPlanError:
        refused = True
    batch = next(iter(MegatronPretrainingSampler(size, consumed, micro, rank, dp)))
    first = [[int(after.dataset_index[i]), int(after.dataset_sample_index[i])] for i in batch]
    trained = set(zip(before.dataset_index[:consumed].tolist(), before.dataset_sample_index[:consumed].tolist()))
    return {"refused": refused, "first_microbatch": first, "already_trained": sum((d, s) in trained for d, s in first)}
