"""labsupport.datasets.blending against megatron-core 0.16.1 (chapter 3): the compiled blending helpers
(identical output for many random weight vectors and sizes, exact ties included), the
data_prefix parser, weight normalisation, the builder's per-dataset sample counts, and
Megatron's own BlendedDataset (same index, same samples, same over-draw condition)."""
from __future__ import annotations

import warnings

import numpy as np
import pytest

from labsupport.datasets import blending as bl

pytestmark = [pytest.mark.crosscheck, pytest.mark.filterwarnings("ignore::UserWarning")]


def mega_indices(megatron, weights, size):
    di = np.zeros(size, dtype=np.int16)
    si = np.zeros(size, dtype=np.int64)
    w = np.asarray(weights, dtype=np.float64)
    megatron.helpers.build_blending_indices(di, si, w, len(w), size, False)
    return di, si


def mega_exhaustive(megatron, sizes):
    sizes = np.asarray(sizes, dtype=np.int64)
    total = int(sizes.sum())
    di = np.zeros(total, dtype=np.int16)
    si = np.zeros(total, dtype=np.int64)
    megatron.helpers.build_exhaustive_blending_indices(di, si, sizes, len(sizes))
    return di, si


def assert_same(ours, theirs, what):
    assert ours[0].dtype == np.int16 and ours[1].dtype == np.int64, what
    assert ours[0].shape == theirs[0].shape, what
    if not np.array_equal(ours[0], theirs[0]):
        k = int(np.flatnonzero(ours[0] != theirs[0])[0])
        pytest.fail(f"{what}: dataset_index differs first at sample {k}: {ours[0][k]} vs {theirs[0][k]}")
    assert np.array_equal(ours[1], theirs[1]), what


# weight vectors full of exact float ties (equal weights, thirds, binary fractions, integer ratios)
TIES = [
    [0.5, 0.25, 0.25], [1 / 3, 1 / 3, 1 / 3], [0.25] * 4, [0.1] * 10, [0.2] * 5, [0.5, 0.5],
    [0.6, 0.25, 0.15], [1 / 7] * 7, [0.125] * 8, [0.375, 0.375, 0.25], [1.0, 1.0, 1.0], [2.0, 1.0, 1.0],
    bl.normalize_weights([1, 2, 3, 4]), bl.normalize_weights([1] * 50), [1.0], [0.0, 0.5, 0.5],
    [0.5, 0.0, 0.5], [0.3, 0.3, 0.4], [1e-6, 1 - 1e-6], [0.999, 0.001],
]


@pytest.mark.parametrize("weights", TIES, ids=lambda w: f"{len(w)}:{w[0]:.3g}")
@pytest.mark.parametrize("size", [0, 1, 2, 3, 10, 999, 20_011, 150_000])
@pytest.mark.parametrize("engine", ["auto", "numpy"])
def test_blending_indices_with_ties(megatron, weights, size, engine):
    assert_same(bl.build_blending_indices(weights, size, engine=engine), mega_indices(megatron, weights, size),
                f"weights {weights[:4]}… size {size} engine {engine}")


#: every engine the workbook has for large inputs ("auto" is numba where it imports)
ENGINES = ["numba", "numpy"]


@pytest.mark.parametrize("seed", range(12))
@pytest.mark.parametrize("engine", ENGINES)
def test_blending_indices_random(megatron, seed, engine):
    rng = np.random.default_rng(1000 + seed)
    for trial in range(12):
        n = int(rng.choice([2, 3, 4, 5, 8, 16, 50, 300]))
        kind = trial % 6
        if kind == 0:
            w = rng.random(n)
        elif kind == 1:
            w = rng.dirichlet(np.ones(n) * 0.2)             # a few datasets with tiny weights
        elif kind == 2:
            w = rng.integers(1, 6, n).astype(np.float64)    # small integer ratios: exact ties
        elif kind == 3:
            w = np.round(rng.random(n), 2) + 0.01
        elif kind == 4:
            w = rng.random(n) * rng.uniform(0.1, 5)         # left unnormalised
        else:
            w = np.full(n, 1.0 / n)
        if kind != 4:
            w = w / w.sum()
        size = int(rng.choice([int(rng.integers(1, 5_000)), int(rng.integers(5_000, 400_000))]))
        assert_same(bl.build_blending_indices(w, size, engine=engine), mega_indices(megatron, w, size),
                    f"seed {seed} trial {trial}: n={n} kind={kind} size={size} engine {engine}")


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("engine", ENGINES)
def test_blending_indices_on_any_weights(megatron, seed, engine):
    """Skewed weights (Dirichlet α=0.1 over 50 and 200 datasets: weights below 1e-15), log-uniform
    weights down to 1e-5, repeated (tied) weights: identical to megatron-core's helper."""
    rng = np.random.default_rng(3000 + seed)
    cases = {
        "dirichlet0.1x50": rng.dirichlet(np.full(50, 0.1)),
        "dirichlet0.1x200": rng.dirichlet(np.full(200, 0.1)),
        "loguniform": np.exp(rng.uniform(np.log(1e-5), 0.0, int(rng.choice([20, 100])))),
        "ties": np.repeat(rng.dirichlet(np.ones(5)), 4),
    }
    for name, w in cases.items():
        w = np.asarray(bl.normalize_weights(w))
        if name.startswith("dirichlet"):
            assert w.min() < 1e-6
        size = int(rng.integers(100_000, 300_000))
        assert_same(bl.build_blending_indices(w, size, engine=engine), mega_indices(megatron, w, size),
                    f"seed {seed} {name} size {size} engine {engine}")


@pytest.mark.parametrize("engine", ENGINES)
def test_blending_indices_large(megatron, engine):
    rng = np.random.default_rng(7)
    for n in (3, 50):
        w = rng.random(n)
        w /= w.sum()
        assert_same(bl.build_blending_indices(w, 2_000_000, engine=engine), mega_indices(megatron, w, 2_000_000),
                    f"n={n} engine {engine}")


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("engine", ["auto", "numpy", "python"])
def test_exhaustive_indices(megatron, seed, engine):
    rng = np.random.default_rng(2000 + seed)
    for trial in range(10):
        n = int(rng.integers(1, 12))
        sizes = rng.integers(1, int(rng.choice([3, 30, 3000, 30000])), n)
        if trial % 3 == 0:
            sizes[int(rng.integers(0, n))] = 1
        assert_same(bl.build_exhaustive_blending_indices(sizes.tolist(), engine=engine),
                    mega_exhaustive(megatron, sizes), f"sizes {sizes.tolist()[:6]} engine {engine}")
    assert_same(bl.build_exhaustive_blending_indices([5, 5, 5]), mega_exhaustive(megatron, [5, 5, 5]), "equal")


@pytest.mark.parametrize("items", [
    ["0.6", "web", "0.25", "code", "0.15", "books"],
    [0.6, "/data/web", 0.25, "/data/code", 0.15, "/data/books"],
    ["30", " a ", "70", "b"],
    ["a"], ["a", "b"], ["a", "b", "c"], ["1e-3", "x", "2", "y"], ["0", "x", "1", "y"],
])
def test_get_blend_from_list_agrees(megatron, items):
    from megatron.core.datasets.utils import get_blend_from_list

    assert bl.get_blend_from_list(items, check_files=False) == get_blend_from_list(items)


@pytest.mark.parametrize("items", [["web", "0.6", "code", "0.4"], ["0.6", "web", "code", "0.4"]])
def test_megatron_silently_misreads_what_we_refuse(megatron, items):
    from megatron.core.datasets.utils import get_blend_from_list

    prefixes, weights = get_blend_from_list(items)
    assert weights is None and prefixes == items        # Megatron: four "prefixes", no weights
    with pytest.raises(bl.BlendError):
        bl.get_blend_from_list(items, check_files=False)


def test_normalize_and_sample_counts_agree(megatron):
    from megatron.core.datasets.blended_megatron_dataset_builder import _get_size_per_split_per_dataset
    from megatron.core.datasets.utils import normalize

    rng = np.random.default_rng(3)
    for trial in range(50):
        raw = (rng.random(int(rng.integers(1, 9))) * rng.choice([1, 100])).tolist()
        w = bl.normalize_weights(raw)
        assert w == normalize(raw)
        size = int(rng.integers(0, 10**7))
        want = [row[0] for row in _get_size_per_split_per_dataset(w, [size], surplus=0.005)]
        assert bl.samples_per_dataset(raw, size) == want
        target = [row[0] for row in _get_size_per_split_per_dataset(w, [size])]
        assert bl.megatron_blend_size(raw, size) == sum(target)


class _Stub:
    """A mid-level dataset for Megatron's BlendedDataset: index_split, unique_identifiers, len, [i]."""

    def __init__(self, n: int, name: str) -> None:
        from megatron.core.datasets.utils import Split

        self.n, self.index_split = n, Split.train
        self.unique_identifiers = {"name": name, "n": n}

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> dict:
        return {"text": np.array([i, self.n])}


def _mega_blend(megatron, lengths, weights, size):
    from megatron.core.datasets.blended_dataset import BlendedDataset
    from megatron.core.datasets.blended_megatron_dataset_config import BlendedMegatronDatasetConfig

    cfg = BlendedMegatronDatasetConfig(random_seed=0, sequence_length=8, blend=(["x"], None), split="100,0,0")
    stubs = [_Stub(n, f"d{k}") for k, n in enumerate(lengths)]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return BlendedDataset(stubs, weights, size, cfg), stubs


def test_blended_dataset_matches_megatrons(megatron):
    import logging

    logging.getLogger("megatron").setLevel(logging.ERROR)
    rng = np.random.default_rng(4)
    cases = 0
    overdraws = 0
    while cases < 30:
        n = int(rng.integers(1, 6))
        lengths = rng.integers(1, 400, n).tolist()
        weights = (rng.random(n) + 0.01).tolist()
        size = int(rng.integers(1, 600))
        try:
            theirs, stubs = _mega_blend(megatron, lengths, weights, size)
        except IndexError:
            theirs = None
        if theirs is None:
            with pytest.raises(bl.OverdrawError):
                bl.BlendedDataset([_Stub(m, f"d{k}") for k, m in enumerate(lengths)], weights, size)
            overdraws += 1
            continue
        ours = bl.BlendedDataset(stubs, weights, size)
        assert len(ours) == len(theirs)
        assert ours.weights == theirs.weights
        assert np.array_equal(ours.dataset_index, theirs.dataset_index)
        assert np.array_equal(ours.dataset_sample_index, theirs.dataset_sample_index)
        for i in rng.integers(0, size, 5).tolist():
            a, b = ours[i], theirs[i]
            assert a["dataset_id"] == b["dataset_id"] and np.array_equal(a["text"], b["text"])
        cases += 1
    assert overdraws > 0
    theirs, stubs = _mega_blend(megatron, [4, 2, 1], [4, 2, 1], None)      # exhaustive
    ours = bl.BlendedDataset(stubs, [4, 2, 1], None)
    assert np.array_equal(ours.dataset_index, theirs.dataset_index) and len(ours) == len(theirs) == 7
