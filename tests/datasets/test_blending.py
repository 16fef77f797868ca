"""labsupport.datasets.blending (chapter 3) on its own: the data_prefix parser and its errors, the greedy
blending rule against a plain Python loop (megatron-core itself: tests/crosscheck/test_blending.py),
BlendedDataset, blend_report, the exercise arithmetic and the chapter's checks."""
from __future__ import annotations

import math
import os
import random
from pathlib import Path

import numpy as np
import pytest

from labsupport.datasets import blending as bl
from labsupport.datasets.blending import BlendError, OverdrawError, TokenizerMismatchError
from labsupport.check import ch03
from labsupport.datasets.indexed import IndexedDataset, IndexedDatasetBuilder


# ----------------------------------------------------------------------------------- helpers
def make_prefix(tmp: Path, name: str, docs: list[list[int]], fingerprint: str | None = "f" * 64,
                eod: int = 3) -> str:
    """A small .bin/.idx/.json with the given documents and tokenizer fingerprint."""
    prefix = str(tmp / f"{name}_text_document")
    meta = {} if fingerprint is None else {"tokenizer": {"fingerprint": fingerprint}, "eod": eod}
    b = IndexedDatasetBuilder(prefix + ".bin", np.uint16, metadata=meta)
    for d in docs:
        b.add_document(np.asarray(d, dtype=np.int64))
    b.finalize(prefix + ".idx")
    if fingerprint is None:
        os.unlink(prefix + ".json")
    return prefix


def docs(rng: np.random.Generator, n: int, lo: int = 5, hi: int = 60, eod: int = 3) -> list[list[int]]:
    return [list(rng.integers(4, 500, int(rng.integers(lo, hi)))) + [eod] for _ in range(n)]


def exhaustive_loop(sizes):
    """megatron-core's build_exhaustive_blending_indices, written out (std::set order = ascending)."""
    total = sum(sizes)
    w = [s / float(total) for s in sizes]
    counts = [0] * len(sizes)
    unspent = list(range(len(sizes)))
    di, si = [], []
    for i in range(total):
        x = float(max(i, 1))
        best, best_err = -1, -math.inf
        for d in unspent:
            err = w[d] * x - counts[d]
            if err > best_err:
                best, best_err = d, err
        di.append(best)
        si.append(counts[best])
        counts[best] += 1
        if counts[best] == sizes[best]:
            unspent.remove(best)
    return np.array(di, np.int16), np.array(si, np.int64)


TIE_WEIGHTS = [
    [0.5, 0.25, 0.25], [1 / 3, 1 / 3, 1 / 3], [0.25] * 4, [0.1] * 10, [0.6, 0.25, 0.15],
    [0.5, 0.5], [0.2, 0.2, 0.2, 0.2, 0.2], [1.0, 1.0, 1.0], [3.0, 1.0], [0.0, 0.5, 0.5], [1, 2, 3, 4],
]


# ----------------------------------------------------------------------------------- data_prefix
def test_get_blend_from_list_pairs_and_prefixes(tmp_path):
    rng = np.random.default_rng(0)
    a = make_prefix(tmp_path, "a", docs(rng, 3))
    b = make_prefix(tmp_path, "b", docs(rng, 3))
    assert bl.get_blend_from_list([0.6, a, "0.4", f"  {b} "]) == ([a, b], [0.6, 0.4])
    assert bl.get_blend_from_list(["30", a, 70, b]) == ([a, b], [30.0, 70.0])
    assert bl.get_blend_from_list([a]) == ([a], None)
    assert bl.get_blend_from_list([a, b]) == ([a, b], None)            # even length, no weights
    assert bl.get_blend_from_list([a, b, a]) == ([a, b, a], None)
    assert bl.get_blend_from_list(None) is None
    assert bl.get_blend_from_list([0, a, 1, b]) == ([a, b], [0.0, 1.0])  # one zero weight is allowed
    assert bl.get_blend_from_list((0.6, Path(a), 0.4, b)) == ([a, b], [0.6, 0.4])


@pytest.mark.parametrize("items, match", [
    ([], r"data_prefix is empty"),
    ([0.6, "web", "code"], r"3 entries and contains weights \(entry 0: 0.6\)"),
    (["web", 0.6, "code", 0.4], r"entry 1 \(0.6\) is a number, but the list starts with a prefix"),
    ([0.6, "web", "code", 0.4], r"entry 2 \('code'\): expected a weight here"),
    ([0.6, 0.4, "web", "code"], r"entry 1 \(0.4\): expected a dataset prefix after weight entry 0"),
    (["web", "2024"], r"entry 1 \('2024'\) is a number.*write it as './2024'"),
    ([0.5, "web", 0.5, "2024"], r"entry 3 \('2024'\): expected a dataset prefix .* write it as './2024'"),
    ([0.6, "web", -0.4, "code"], r"entry 2 \(-0.4\): weight -0.4 is negative"),
    ([float("nan"), "web"], r"entry 0 \(nan\): weight is NaN"),
    (["nan", "web", "0.5", "code"], r"entry 0 \('nan'\): weight is NaN"),
    ([0.5, "web", "inf", "code"], r"entry 2 \('inf'\): weight is infinite"),
    ([0, "web", 0.0, "code"], r"weights \[0.0, 0.0\] are all zero"),
    ([0.5, "web", 0.5, None], r"entry 3 \(None\): a prefix must be a string path"),
    ([0.5, "web", 0.5, "   "], r"entry 3: the prefix is empty"),
    ([True, "web"], r"entry 0 \(True\): a prefix must be a string path"),
    ("0.5 web", r"must be a list"),
])
def test_get_blend_from_list_refuses(items, match):
    with pytest.raises(BlendError, match=match):
        bl.get_blend_from_list(items, check_files=False)


def test_get_blend_from_list_missing_files(tmp_path):
    rng = np.random.default_rng(1)
    a = make_prefix(tmp_path, "a", docs(rng, 2))
    with pytest.raises(FileNotFoundError, match=r"entry 3 \('.*nope'\): .*nope.bin and .*nope.idx not found"):
        bl.get_blend_from_list([0.5, a, 0.5, str(tmp_path / "nope")])
    with pytest.raises(FileNotFoundError, match=r"entry 1 .*a prefix has no extension: write"):
        bl.get_blend_from_list([0.5, a + ".bin", 0.5, a])
    with pytest.raises(FileNotFoundError, match=r"entry 0 .*did you mean '.*a_text_document'"):
        bl.get_blend_from_list([str(tmp_path / "a")])
    os.unlink(a + ".idx")
    with pytest.raises(FileNotFoundError, match=r"entry 1 .*a_text_document.idx not found"):
        bl.get_blend_from_list([1.0, a])
    assert bl.get_blend_from_list([1.0, a], check_files=False) == ([a], [1.0])


def test_normalize_weights():
    w = [0.6, 0.25, 0.15]
    assert bl.normalize_weights(w) == (np.array(w) / np.sum(w)).tolist()
    assert bl.normalize_weights([3, 1]) == [0.75, 0.25]
    with pytest.raises(BlendError, match=r"weights\[1\]: weight -1 is negative"):
        bl.normalize_weights([1, -1])
    with pytest.raises(BlendError, match=r"weights\[0\]: weight is NaN"):
        bl.normalize_weights([float("nan"), 1])
    with pytest.raises(BlendError, match=r"all zero"):
        bl.normalize_weights([0, 0])
    with pytest.raises(BlendError, match=r"non-empty 1-D"):
        bl.normalize_weights([])


# ----------------------------------------------------------------------------------- the rule
def test_book_example_and_golden_vectors():
    di, si = bl.build_blending_indices([0.5, 0.25, 0.25], 10)
    assert di.tolist() == [0, 1, 2, 0, 0, 1, 2, 0, 0, 1]
    assert si.tolist() == [0, 0, 0, 1, 2, 1, 1, 3, 4, 2]
    assert di.dtype == np.int16 and si.dtype == np.int64
    di, si = bl.build_exhaustive_blending_indices([4, 2, 1])
    assert di.tolist() == [0, 1, 2, 0, 0, 1, 0]
    assert si.tolist() == [0, 0, 0, 1, 2, 1, 3]


def test_greedy_step_is_the_rule():
    rng = random.Random(0)
    for w in TIE_WEIGHTS + [[rng.random() for _ in range(5)] for _ in range(5)]:
        di, _ = bl.reference_blending_indices(w, 50)
        counts = [0] * len(w)
        for i, d in enumerate(di.tolist()):
            assert bl.greedy_step(w, counts, i) == d
            counts[d] += 1
    assert bl.greedy_step([0.5, 0.5], [1, 1], 2) == 0          # exact tie: lowest index
    assert bl.greedy_step([0.25, 0.5, 0.25], [0, 1, 0], 2) == 0  # tie between 0 and 2
    assert bl.greedy_step([0.2, 0.8], [0, 0], 0) == 1            # step 0 uses x = 1


@pytest.mark.parametrize("weights", TIE_WEIGHTS)
@pytest.mark.parametrize("size", [0, 1, 2, 7, 100, 12_345])
def test_indices_equal_the_loop_with_ties(weights, size):
    want = bl.reference_blending_indices(weights, size)
    got = bl.build_blending_indices(weights, size)
    assert np.array_equal(got[0], want[0]) and np.array_equal(got[1], want[1])


def test_indices_equal_the_loop_random():
    rng = np.random.default_rng(2)
    for trial in range(40):
        n = int(rng.choice([2, 3, 4, 5, 7, 12, 40]))
        w = rng.dirichlet(np.ones(n) * rng.choice([0.3, 1.0, 5.0]))
        if trial % 5 == 0:
            w = w * rng.uniform(0.2, 4.0)                 # unnormalised weights work too
        size = int(rng.integers(20_000 // n, 60_000))
        want = bl.reference_blending_indices(w, size)
        got = bl.build_blending_indices(w, size)
        assert np.array_equal(got[0], want[0]) and np.array_equal(got[1], want[1]), (w, size)


def test_chunk_repairs_are_exact():
    """Tiny warm-ups make the guessed chunk starts wrong: the proof must repair them."""
    rng = np.random.default_rng(3)
    wrong = reruns = 0
    for trial in range(30):
        n = int(rng.choice([2, 3, 6, 20]))
        w = rng.dirichlet(np.ones(n) * rng.choice([0.2, 1.0]))
        size = int(rng.integers(2_000, 20_000))
        stats: dict = {}
        got = bl._chunked(np.asarray(w), size, chunks=int(rng.integers(2, 40)), warmup=int(rng.integers(0, 3)),
                          stats=stats)
        want = bl.reference_blending_indices(w, size)
        assert np.array_equal(got[0], want[0]) and np.array_equal(got[1], want[1])
        wrong += stats["chunks_guessed_wrong"]
        reruns += stats["reruns"]
    assert wrong > 0 and reruns > 0                        # both repair paths really ran


@pytest.mark.parametrize("seed", range(4))
def test_indices_equal_the_loop_on_skewed_and_tied_weights(seed):
    """No weight vector is special: Dirichlet(0.1) (weights far below 1e-15), log-uniform weights
    down to 1e-5, exact ties and zeros — the fast engine equals the plain loop."""
    rng = np.random.default_rng(100 + seed)
    cases = [rng.dirichlet(np.full(int(rng.choice([50, 200])), 0.1)),
             np.exp(rng.uniform(np.log(1e-5), 0.0, int(rng.choice([20, 100])))),
             np.repeat(rng.dirichlet(np.ones(4)), 5),                   # every weight five times
             np.concatenate([rng.dirichlet(np.full(30, 0.1)), np.zeros(3)])]
    run_again = 0
    for w in cases:
        w = np.asarray(bl.normalize_weights(w))
        size = 30_000
        stats: dict = {}
        got = bl._chunked(w, size, stats=stats)
        want = bl.reference_blending_indices(w, size)
        assert np.array_equal(got[0], want[0]) and np.array_equal(got[1], want[1]), (seed, w.size)
        run_again += stats["chunks_run_again"]
    assert run_again > 0  # the predicted second run really ran


@pytest.mark.parametrize("engine", ["numba", "numpy", "python"])
def test_every_engine_equals_the_loop(engine):
    """Forced engines on skewed, log-uniform, tied, zero and unnormalised weights, odd sizes."""
    rng = np.random.default_rng(41)
    cases = [rng.dirichlet(np.full(60, 0.1)), np.exp(rng.uniform(np.log(1e-5), 0.0, 37)),
             np.repeat(rng.dirichlet(np.ones(3)), 4), [0.0, 0.5, 0.5], [1 / 3] * 3,
             rng.random(7) * 3.7, [0.6, 0.25, 0.15]]
    for w in cases:
        size = int(rng.integers(1, 25_000))
        want = bl.reference_blending_indices(w, size)
        got = bl.build_blending_indices(w, size, engine=engine)
        assert got[0].dtype == np.int16 and got[1].dtype == np.int64
        assert np.array_equal(got[0], want[0]) and np.array_equal(got[1], want[1]), (engine, len(w), size)


def test_compiled_loop_has_no_fused_multiply_add():
    """``w * x - count`` must round twice, as in the C++; an FMA rounds once and can flip a
    near-tie.  Read from the machine code numba produced here."""
    from labsupport.datasets import blending_numba

    if blending_numba.numba_problem():
        pytest.skip(blending_numba.numba_problem())
    assert blending_numba.fused_multiply_add_in_machine_code() == []
    assert blending_numba._FMA_RE.search("vfmadd231sd %xmm2, %xmm1, %xmm0")   # the check can fail


def test_fma_check_refuses_assembly_it_could_not_read(monkeypatch):
    """numba returns placeholder text for cached code: the check must not call that FMA-free."""
    from labsupport.datasets import blending_numba

    if blending_numba.numba_problem():
        pytest.skip(blending_numba.numba_problem())

    class Unreadable:
        def __init__(self, fn):
            pass

        def __call__(self, *args):
            pass

        def inspect_asm(self):
            return {"sig": "Inspection disabled for cached code."}

    monkeypatch.setattr(blending_numba.numba, "njit", lambda **kw: Unreadable)
    with pytest.raises(RuntimeError, match="could not be read"):
        blending_numba.fused_multiply_add_in_machine_code()


def test_compiled_loop_compiles_without_a_writable_cache(monkeypatch):
    """numba raises at decoration when cache=True finds no writable folder: compile uncached."""
    from labsupport.datasets import blending_numba

    if blending_numba.numba_problem():
        pytest.skip(blending_numba.numba_problem())
    real = blending_numba.numba.njit

    def njit(*args, **kwargs):
        if kwargs.get("cache"):
            raise RuntimeError("cannot cache function '_blending_loop': no locator available")
        return real(*args, **kwargs)

    monkeypatch.setattr(blending_numba.numba, "njit", njit)
    kernel = blending_numba._compile(blending_numba._blending_loop)
    di, si = np.empty(7, np.int16), np.empty(7, np.int64)
    kernel(np.array([0.6, 0.25, 0.15]), 0, np.zeros(3, np.int64), di, si)
    want = bl.reference_blending_indices([0.6, 0.25, 0.15], 7)
    assert np.array_equal(di, want[0]) and np.array_equal(si, want[1])


def test_compiled_loop_resumes_exactly():
    from labsupport.datasets.blending_numba import numba_blending_indices

    w = np.random.default_rng(5).dirichlet(np.full(9, 0.5))
    whole = numba_blending_indices(w, 5_000)
    counts = np.bincount(whole[0][:1_234], minlength=9)
    tail = numba_blending_indices(w, 5_000 - 1_234, start=1_234, counts=counts)
    assert np.array_equal(tail[0], whole[0][1_234:]) and np.array_equal(tail[1], whole[1][1_234:])
    with pytest.raises(ValueError, match="counts has shape"):
        numba_blending_indices(w, 10, counts=[0, 0])


def test_auto_engine_is_numba_and_falls_back_to_numpy(monkeypatch):
    from labsupport.datasets import blending_numba

    assert bl.blending_engine() == "numba"                     # numba is a dependency
    assert bl.blending_engine("auto", work=100) == "python"    # small inputs: nothing to compile
    monkeypatch.setattr(blending_numba, "_IMPORT_ERROR", "numba could not be imported (test)")
    assert bl.blending_engine() == "numpy"
    w = [0.5, 0.3, 0.2]
    got = bl.build_blending_indices(w, 50_000)
    want = bl.reference_blending_indices(w, 50_000)
    assert np.array_equal(got[0], want[0]) and np.array_equal(got[1], want[1])
    monkeypatch.setattr(blending_numba, "_kernel", None)
    with pytest.raises(RuntimeError, match="numba could not be imported"):
        blending_numba.numba_blending_indices(np.array(w), 10)
    with pytest.raises(BlendError, match="engine must be one of"):
        bl.build_blending_indices(w, 10, engine="c++")


def test_pruned_rerun_equals_the_loop():
    from labsupport.datasets.blending_numpy import _sequential_pruned

    rng = np.random.default_rng(8)
    for trial in range(20):
        w = rng.dirichlet(np.full(int(rng.integers(2, 60)), rng.choice([0.1, 1.0])))
        if trial % 4 == 0:
            w = w * rng.uniform(0.3, 3.0)                                # unnormalised
        wl = w.tolist()
        start = int(rng.integers(0, 5_000))
        _, _, counts = bl.sequential_steps(wl, start, [0] * w.size, 0)
        want = bl.sequential_steps(wl, 3_000, list(counts), start)
        got = _sequential_pruned(wl, 3_000, list(counts), start, window=int(rng.integers(1, 200)))
        assert got == want, trial


@pytest.mark.parametrize("weights", [[0.0, 0.0, 0.749, 0.251], [0.818, 0.0, 0.0, 0.175, 0.007], [0.0, 0.5, 0.5]])
def test_zero_weights_picked_once_on_a_tie(weights):
    """A zero weight can win an exact tie early and then never again: that count must reach
    every chunk (the guesses are seeded from exact counts)."""
    want = bl.reference_blending_indices(weights, 150_000)
    got = bl.build_blending_indices(weights, 150_000)
    assert np.array_equal(got[0], want[0]) and np.array_equal(got[1], want[1])


def test_indices_invariants_and_special_cases():
    di, si = bl.build_blending_indices([0.7, 0.3], 50_000)
    for d in (0, 1):
        assert np.array_equal(si[di == d], np.arange((di == d).sum()))
    assert bl.build_blending_indices([1.0], 5)[1].tolist() == [0, 1, 2, 3, 4]
    assert bl.build_blending_indices([0.5, 0.5], 0)[0].shape == (0,)
    w = np.full(300, 1 / 300)                              # > 255 datasets (uint16 argmax path)
    got, want = bl.build_blending_indices(w, 30_000), bl.reference_blending_indices(w, 30_000)
    assert np.array_equal(got[0], want[0])


@pytest.mark.parametrize("weights, size, match", [
    ([0.5, 0.5], -1, r"size must be ≥ 0"),
    ([0.5, 0.5], 2.5, r"size must be an integer"),
    ([0.5, float("inf")], 3, r"weights\[1\]: weight is infinite"),
    ([[0.5, 0.5]], 3, r"1-D"),
    ([0.0, 0.0], 3, r"all zero"),
    ([1.0] * 32768, 3, r"at most 32767"),
    (["a", "b"], 3, r"must be numbers"),
])
def test_build_blending_indices_refuses(weights, size, match):
    with pytest.raises(BlendError, match=match):
        bl.build_blending_indices(weights, size)


def test_exhaustive_equals_the_loop():
    rng = np.random.default_rng(4)
    for trial in range(25):
        n = int(rng.integers(1, 8))
        sizes = rng.integers(1, int(rng.choice([4, 40, 4000])), n).tolist()
        if trial % 4 == 0:
            sizes[0] = 1                                    # a dataset that is used up at once
        want = exhaustive_loop(sizes)
        got = bl.build_exhaustive_blending_indices(sizes)
        assert np.array_equal(got[0], want[0]) and np.array_equal(got[1], want[1]), sizes
        assert np.array_equal(np.bincount(got[0], minlength=n), sizes)
    with pytest.raises(BlendError, match=r"sizes\[1\] = 0: every dataset needs at least one sample"):
        bl.build_exhaustive_blending_indices([3, 0])
    with pytest.raises(BlendError, match=r"must be integers"):
        bl.build_exhaustive_blending_indices([3, 1.5])


def test_resume_from_counts_continues_the_sequence():
    w = [0.6, 0.25, 0.15]
    full = bl.build_blending_indices(w, 5_000)
    n = 1_234
    counts = np.bincount(full[0][:n], minlength=3).tolist()
    tail = bl.reference_blending_indices(w, 5_000 - n, start=n, counts=counts)
    assert np.array_equal(tail[0], full[0][n:]) and np.array_equal(tail[1], full[1][n:])


def test_realised_share_stays_within_one_sample_for_the_book_blend():
    rep = bl.blend_report([0.6, 0.25, 0.15], [10**6] * 3, 100_000)
    assert rep.max_deviation < 1.0
    assert [r.drawn for r in rep.rows] == [60_000, 25_000, 15_000]


# ----------------------------------------------------------------------------------- sizes
def test_samples_per_dataset_surplus_rule():
    w = [0.6, 0.25, 0.15]
    assert bl.samples_per_dataset(w, 1000) == [math.ceil(math.ceil(1000 * x) * 1.005) for x in w] == [603, 252, 151]
    assert bl.samples_per_dataset(w, 1000, surplus=0) == [600, 250, 150]
    assert bl.samples_per_dataset([3, 1], 10) == [9, 4]          # weights normalised first
    assert bl.megatron_blend_size([1, 1, 1], 10) == 12           # ceil(10/3) * 3
    with pytest.raises(BlendError, match="surplus"):
        bl.samples_per_dataset(w, 10, surplus=-1)


# ----------------------------------------------------------------------------------- datasets
@pytest.fixture()
def three(tmp_path):
    rng = np.random.default_rng(5)
    return [make_prefix(tmp_path, name, docs(rng, k)) for name, k in (("web", 60), ("code", 20), ("books", 40))]


def test_blended_dataset_over_indexed_datasets(three):
    ds = bl.BlendedDataset(three, [0.5, 0.2, 0.3], 50, seed=0)
    assert len(ds) == 50 and ds.names == ["web", "code", "books"]
    assert ds.weights == bl.normalize_weights([0.5, 0.2, 0.3])
    want_di, want_si = bl.build_blending_indices(ds.weights, 50)
    assert np.array_equal(ds.dataset_index, want_di) and np.array_equal(ds.dataset_sample_index, want_si)
    opened = [IndexedDataset(p) for p in three]
    for i in (0, 1, 17, 49, -1):
        item = ds[i]
        d, s = int(want_di[i]), int(want_si[i])
        assert item["dataset_id"] == d and item["dataset_sample_id"] == s
        assert np.array_equal(item["tokens"], opened[d][s])
    with pytest.raises(IndexError, match="sample 50 out of range: this blend has 50 samples"):
        ds[50]
    assert ds.requested == bl.samples_per_dataset([0.5, 0.2, 0.3], 50)
    assert ds.fingerprint == "f" * 64
    again = bl.BlendedDataset(three, [0.5, 0.2, 0.3], 50, seed=7)
    assert np.array_equal(again.dataset_index, ds.dataset_index)   # the blend itself is not random


def test_overdraw_is_refused_early_with_the_numbers(three):
    with pytest.raises(OverdrawError) as info:
        bl.BlendedDataset(three, [0.2, 0.6, 0.2], 100)
    msg = str(info.value)
    assert isinstance(info.value, IndexError)
    assert "dataset 1 ('code')" in msg and "take 60 samples" in msg and "holds 20" in msg
    assert "#705" in msg and "seq_length" in msg
    with pytest.raises(OverdrawError, match=r"dataset 0 \('web'\) holds 60 samples but the exhaustive blend takes 61"):
        bl.BlendedDataset(three, [61, 1, 1], None)


def test_blended_dataset_bad_arguments(three):
    with pytest.raises(BlendError, match=r"weights\[1\] \('code'\) is 0"):
        bl.BlendedDataset(three, [0.5, 0, 0.5], 10)
    with pytest.raises(BlendError, match="3 datasets but 2 weights"):
        bl.BlendedDataset(three, [0.5, 0.5], 10)
    with pytest.raises(BlendError, match="no datasets"):
        bl.BlendedDataset([], [], 10)
    with pytest.raises(FileNotFoundError, match=r"dataset 'x'.*x_text_document.bin"):
        bl.BlendedDataset([three[0], three[0].replace("web", "x")], [1, 1], 10, names=["web", "x"])
    with pytest.raises(BlendError, match="sample counts per dataset and must be integers"):
        bl.BlendedDataset(three, [0.5, 0.2, 0.3], None)
    with pytest.raises(BlendError, match="len\\(\\) and \\[i\\]"):
        bl.BlendedDataset([three[0], 42], [1, 1], 10)


def test_tokenizer_fingerprints_must_agree(tmp_path, three):
    rng = np.random.default_rng(6)
    other = make_prefix(tmp_path, "other", docs(rng, 30), fingerprint="0" * 64)
    with pytest.raises(TokenizerMismatchError, match=r"cannot blend 'web' and 'other'.*ffffffff.*00000000"):
        bl.BlendedDataset([three[0], other], [0.5, 0.5], 10)
    assert bl.BlendedDataset([three[0], other], [0.5, 0.5], 10, check_tokenizer=False).fingerprint is None
    bare = make_prefix(tmp_path, "bare", docs(rng, 30), fingerprint=None)
    assert bl.tokenizer_fingerprint(bare) is None
    assert bl.BlendedDataset([three[0], bare], [0.5, 0.5], 10).fingerprint == "f" * 64
    assert bl.tokenizer_fingerprint(IndexedDataset(three[1])) == "f" * 64
    assert bl.check_same_tokenizer([bare]) is None
    Path(bare + ".json").write_text("{not json")
    with pytest.raises(BlendError, match="unreadable sidecar"):
        bl.tokenizer_fingerprint(bare)


def test_gpt_mid_level_datasets(three):
    from labsupport.datasets.gpt_samples import GPTDataset

    ds = bl.BlendedDataset(three, [0.5, 0.2, 0.3], 300, seed=3, seq_length=16)
    assert all(isinstance(d, GPTDataset) for d in ds.datasets)
    assert [d.num_samples for d in ds.datasets] == bl.samples_per_dataset([0.5, 0.2, 0.3], 300)
    assert all(len(d) >= r for d, r in zip(ds.datasets, ds.requested))
    item = ds[5]
    d, s = int(ds.dataset_index[5]), int(ds.dataset_sample_index[5])
    assert item["dataset_id"] == d
    assert np.array_equal(item["tokens"].numpy(), ds.datasets[d][s]["tokens"].numpy())
    assert ds.datasets[0].eod_token == 3                          # from the sidecar
    same = bl.BlendedDataset(three, [0.5, 0.2, 0.3], 300, seed=3, seq_length=16)
    for i in (0, 7, 150, 299):                                     # deterministic for a seed
        assert np.array_equal(same[i]["tokens"].numpy(), ds[i]["tokens"].numpy())
    other = bl.BlendedDataset(three, [0.5, 0.2, 0.3], 300, seed=4, seq_length=16)
    assert np.array_equal(other.dataset_index, ds.dataset_index)
    assert not all(np.array_equal(a.shuffle_index, b.shuffle_index) for a, b in zip(ds.datasets, other.datasets))
    rep = ds.report(warn_epochs=1.0)
    per_epoch = [(d.tokens_per_epoch - 1) // 16 for d in ds.datasets]
    assert [r.available for r in rep.rows] == per_epoch
    ready = bl.BlendedDataset(ds.datasets, [0.5, 0.2, 0.3], 300)  # ready GPT datasets are used as given
    assert ready.datasets[1] is ds.datasets[1] and ready.fingerprint == "f" * 64


def test_index_cache_is_reused(tmp_path, three):
    cache = tmp_path / "cache"
    first = bl.BlendedDataset(three, [0.5, 0.2, 0.3], 80, cache_dir=cache)
    files = sorted(p.name for p in cache.iterdir())
    assert not first.cache_hit and len(files) == 4 and all(f.startswith(first.description_hash) for f in files)
    assert not any(".tmp-" in f for f in files)
    second = bl.BlendedDataset(three, [0.5, 0.2, 0.3], 80, cache_dir=cache)
    assert second.cache_hit
    assert np.array_equal(first.dataset_index, second.dataset_index)
    assert np.array_equal(first.dataset_sample_index, second.dataset_sample_index)
    third = bl.BlendedDataset(three, [0.5, 0.2, 0.3], 81, cache_dir=cache)
    assert not third.cache_hit and third.description_hash != first.description_hash


def test_exhaustive_blended_dataset(three):
    ds = bl.BlendedDataset(three, [5, 2, 3], None)
    assert len(ds) == 10
    assert np.bincount(ds.dataset_index).tolist() == [5, 2, 3]


# ----------------------------------------------------------------------------------- report
def test_blend_report_fields_and_warnings():
    rep = bl.blend_report([0.5, 0.5], [100, 1000], 1000, names=["code", "web"], warn_epochs=4.0)
    code, web = rep.rows
    assert (code.drawn, web.drawn) == (500, 500)
    assert code.epochs == 5.0 and code.repeated == pytest.approx(0.8) and code.warning
    assert web.epochs == 0.5 and web.repeated == 0.0 and not web.warning
    assert code.realised == 0.5 and code.target == 0.5
    assert len(rep.warnings) == 1 and "code: 5.0 epochs > 4" in rep.warnings[0]
    text = str(rep)
    assert "blend of 1,000 samples" in text and "⚠" in text
    assert rep.to_dict()["rows"][0]["name"] == "code"
    quiet = bl.blend_report([0.5, 0.5], [100, 1000], 1000, warn_epochs=10)
    assert not quiet.warnings and not any(r.warning for r in quiet.rows)
    with pytest.raises(BlendError, match=r"samples_per_epoch\[1\] = 0"):
        bl.blend_report([0.5, 0.5], [1, 0], 10)
    with pytest.raises(BlendError, match="2 weights but 3 dataset sizes"):
        bl.blend_report([0.5, 0.5], [1, 1, 1], 10)
    with pytest.raises(BlendError, match="warn_epochs"):
        bl.blend_report([0.5, 0.5], [1, 1], 10, warn_epochs=0)


def test_report_plot_runs():
    import matplotlib

    matplotlib.use("Agg")
    from labsupport.pages.blending_plots import plot_epochs

    ax = plot_epochs(bl.blend_report([0.2, 0.8], [10, 100], 500, names=["a", "b"]))
    assert len(ax.patches) == 2


# ----------------------------------------------------------------------------------- exercises
def test_expected_epochs():
    assert bl.expected_epochs([0.5, 0.5], [2e9, 98e9], 100e9) == [25.0, 0.5 * 100e9 / 98e9]
    assert bl.expected_epochs([1, 1], [10, 10], 10) == [0.5, 0.5]
    with pytest.raises(BlendError, match=r"dataset_sizes\[1\]"):
        bl.expected_epochs([1, 1], [10, 0], 10)


def test_cap_weights():
    w = bl.cap_weights([0.5, 0.3, 0.2], [1e9, 50e9, 50e9], 10e9, 4.0)
    assert abs(sum(w) - 1) < 1e-12
    assert w[0] == pytest.approx(0.4)                            # capped: 4 × 1e9 / 10e9
    assert w[1] / w[2] == pytest.approx(0.3 / 0.2)               # the rest keeps its proportions
    assert max(bl.expected_epochs(w, [1e9, 50e9, 50e9], 10e9)) <= 4.0 + 1e-9
    assert bl.cap_weights([0.5, 0.5], [1e12, 1e12], 1e9, 1.0) == [0.5, 0.5]   # nothing to do
    with pytest.raises(BlendError, match="no blend keeps every dataset under 1 epochs"):
        bl.cap_weights([0.5, 0.5], [1e9, 1e9], 10e9, 1.0)
    # a cascade: capping one pushes another over its cap
    w = bl.cap_weights([0.4, 0.4, 0.2], [1e9, 2.2e9, 100e9], 10e9, 2.0)
    assert w[:2] == pytest.approx([0.2, 0.44]) and sum(w) == pytest.approx(1.0)


def test_exact_duplicates():
    assert bl.exact_duplicates(["a", "b", "a", "c", "b", "a"]) == [[0, 2, 5], [1, 4]]
    assert bl.exact_duplicates(["x", "y"]) == []


# ----------------------------------------------------------------------------------- checks
def _status(result) -> str:
    return result.status


def test_checks_pass_reference_solutions(capsys):
    assert _status(ch03.q1(lambda w, c, s: bl.greedy_step(w, c, s))) == "passed"
    assert _status(ch03.q2(bl.expected_epochs)) == "passed"
    assert _status(ch03.q3(bl.cap_weights)) == "passed"

    def exercise_2(total, code, weight):
        return {"a": ["more_code_skill", "less_other", "batch_mix"], "b_code_epochs": weight * total / code,
                "b": ["memorise", "overfit", "little_new"],
                "c": ["dedup_filter", "epoch_budget", "per_domain_eval", "ablations", "realised_blend"],
                "a_why": "ten words " * 5, "b_why": "ten words " * 5, "c_why": "ten words " * 5}

    res = ch03.q4(exercise_2)
    assert res.status == "passed" and set(res.manual) == {"a_why", "b_why", "c_why"}


def test_checks_fail_wrong_answers(capsys):
    def last_index_on_ties(w, c, s):
        x = max(s, 1)
        errs = [wd * x - cd for wd, cd in zip(w, c)]
        return max(range(len(w)), key=lambda d: (errs[d], d))

    assert _status(ch03.q1(last_index_on_ties)) == "failed"
    assert _status(ch03.q1(lambda w, c, s: 0)) == "failed"
    assert _status(ch03.q2(lambda w, sizes, total: [wd * total / s for wd, s in zip(w, sizes)])) == "failed"

    def clip_only(w, sizes, total, cap):
        return [min(wd / sum(w), cap * s / total) for wd, s in zip(w, sizes)]

    assert _status(ch03.q3(clip_only)) == "failed"

    def stub(*args):
        raise NotImplementedError("write me")

    for q in (ch03.q1, ch03.q2, ch03.q3, ch03.q4):
        assert _status(q(stub)) == "not attempted"
    wrong = lambda total, code, weight: {"a": ["no_effect"], "b_code_epochs": 1.0, "b": [], "c": [],  # noqa: E731
                                         "a_why": "", "b_why": "", "c_why": ""}
    assert _status(ch03.q4(wrong)) == "failed"


def test_a_weight_0_dataset_is_drawn_at_most_once_and_the_report_says_why():
    rep = bl.blend_report([0, 0.5, 0.5], [1000] * 3, 5000, names=["web", "code", "books"])
    assert [r.drawn for r in rep.rows] == [1, 2500, 2499]
    assert len(rep.warnings) == 1 and rep.warnings[0].startswith("note: web has weight 0 yet is drawn 1 time: ")
    assert "lowest index wins" in str(rep)
    last = bl.blend_report([0.5, 0.5, 0], [1000] * 3, 5000)          # listed last it never wins the tie
    assert last.rows[2].drawn == 0 and not last.warnings
    rng = np.random.default_rng(0)
    for _ in range(200):                                           # the rule's bound, on blends we did not choose
        w = rng.random(int(rng.integers(2, 6)))
        w[int(rng.integers(0, w.size))] = 0
        w = np.round(w * 4) / 4 if rng.random() < 0.5 else w
        if w.sum() == 0:
            continue
        rep = bl.blend_report(w, [10_000] * w.size, 3000)
        for r in rep.rows:
            assert r.target > 0 or r.drawn <= 1
        assert sum(r.target == 0 and r.drawn == 1 for r in rep.rows) == sum(x.startswith("note:") for x in rep.warnings)
