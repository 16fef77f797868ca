"""labsupport.datasets.sft_packing / bin_packing (chapter 4): packing algorithms against literal
transcriptions of NeMo's and Graphcore's code, SFT reading/tokenizing/packing, the too-long
policies, NeMo's packed layout and collate, and pickle-free storage."""
from __future__ import annotations

from collections import Counter, defaultdict

import numpy as np
import pytest

from labsupport.datasets import sft_packing as packing
from labsupport.datasets.bin_packing import (ALGORITHMS, Bins, best_fit_decreasing, first_fit, first_fit_decreasing,
                                             lower_bound, pack, packing_efficiency, padding_share, spfhp)
from labsupport.datasets.sft_packing import PackedSFT, SFTFormatError, pack_sft, read_sft_jsonl, tokenize_sft


# ------------------------------------------------------------ oracles (re-typed from sources)
def nemo_first_fit(seqlens, pack_size):
    """NeMo sequence_packing_utils.first_fit: bins hold lengths; sum() rescanned per bin."""
    res = []
    for s in seqlens:
        for abin in res:
            if sum(abin) + s <= pack_size:
                abin.append(s)
                break
        else:
            res.append([s])
    return res


def nemo_first_fit_decreasing(seqlens, pack_size):
    return nemo_first_fit(sorted(seqlens, reverse=True), pack_size)


def item_by_item(lengths, pack_size, best, decreasing=True, key=None):
    """First (or best) fit, item by item, in decreasing length order, input order, or by ``key``."""
    if key is not None:
        order = sorted(range(len(lengths)), key=key)
    else:
        order = sorted(range(len(lengths)), key=lambda i: -lengths[i]) if decreasing else range(len(lengths))
    bins, room = [], []
    for i in order:
        fits = [b for b in range(len(bins)) if room[b] >= lengths[i]]
        if fits:
            b = min(fits, key=lambda b: (room[b], b)) if best else fits[0]
            bins[b].append(i)
            room[b] -= lengths[i]
        else:
            bins.append([i])
            room.append(pack_size - lengths[i])
    return bins


def graphcore_spfhp(histogram, max_len, limit):
    """Graphcore's pack_using_spfhp loop (histogram[k] = count of length k+1) → strategies."""
    rev = np.flip(histogram)
    tmp, final = defaultdict(list), defaultdict(list)

    def add(p, count, offset):
        (final if len(p) == limit or offset == 0 else tmp)[offset].append((count, p))

    for i in range(max_len):
        n, length, offset = int(rev[i]), max_len - i, i + 1
        while n > 0:
            if (length + offset) in tmp:
                count, p = tmp[length + offset].pop()
                new = p + [length]
                used = min(count, n)
                if count > n:
                    tmp[length + offset].append((count - n, p))
                    n = 0
                else:
                    n -= count
                add(new, used, offset)
                if not tmp[length + offset]:
                    tmp.pop(length + offset)
            else:
                offset -= 1
            if offset < 0:
                add([length], n, i)
                n = 0
    for k in tmp:
        final[k].extend(tmp[k])
    return final


def strategies(final_or_bins, lengths=None):
    """Multiset of packs as sorted length tuples."""
    c = Counter()
    if lengths is None:
        for v in final_or_bins.values():
            for count, p in v:
                c[tuple(sorted(p))] += count
    else:
        for b in final_or_bins:
            c[tuple(sorted(int(lengths[i]) for i in b))] += 1
    return c


def _valid(bins, lengths, pack_size):
    items = np.sort(bins.items)
    assert np.array_equal(items, np.arange(len(lengths))), "every item exactly once"
    assert (bins.loads(lengths) <= pack_size).all()


# ------------------------------------------------------------------------------ algorithms
def test_first_fit_decreasing_equals_nemo_pack_for_pack():
    rng = np.random.default_rng(0)
    for _ in range(200):
        pack_size = int(rng.integers(1, 120))
        lengths = rng.integers(1, pack_size + 1, int(rng.integers(0, 150))).tolist()
        mine = first_fit_decreasing(lengths, pack_size)
        assert [[lengths[i] for i in b] for b in mine.tolist()] == nemo_first_fit_decreasing(lengths, pack_size)
        mine_ff = first_fit(lengths, pack_size)
        assert [[lengths[i] for i in b] for b in mine_ff.tolist()] == nemo_first_fit(lengths, pack_size)


@pytest.mark.parametrize("best", [False, True])
def test_decreasing_fits_equal_item_by_item(best):
    rng = np.random.default_rng(int(best))
    fn = best_fit_decreasing if best else first_fit_decreasing
    for _ in range(200):
        pack_size = int(rng.integers(1, 200))
        lengths = rng.integers(1, pack_size + 1, int(rng.integers(0, 120))).tolist()
        assert fn(lengths, pack_size).tolist() == item_by_item(lengths, pack_size, best)
    # a realistic size with skewed lengths, also exercising the "alive packs" pruning
    lengths = np.clip(rng.lognormal(5.5, 0.6, 3000).astype(int), 1, 4096).tolist()
    assert fn(lengths, 4096).tolist() == item_by_item(lengths, 4096, best)


def test_first_fit_keeps_arrival_order():
    assert first_fit([3, 3, 2, 2], 5).tolist() == [[0, 2], [1, 3]]
    assert first_fit_decreasing([2, 3, 2, 3], 5).tolist() == [[1, 0], [3, 2]]
    rng = np.random.default_rng(4)
    for _ in range(100):
        pack_size = int(rng.integers(1, 80))
        lengths = rng.integers(1, pack_size + 1, int(rng.integers(1, 300))).tolist()
        assert first_fit(lengths, pack_size).tolist() == item_by_item(lengths, pack_size, False, decreasing=False)


@pytest.mark.parametrize("limit", [None, 2, 3])
def test_spfhp_strategies_equal_graphcore(limit):
    rng = np.random.default_rng(7 if limit is None else limit)
    for _ in range(60):
        pack_size = int(rng.integers(1, 300))
        lengths = rng.integers(1, pack_size + 1, int(rng.integers(1, 400)))
        hist = np.bincount(lengths, minlength=pack_size + 1)[1:]
        final = graphcore_spfhp(hist, pack_size, limit if limit is not None else 10 ** 9)
        mine = spfhp(lengths, pack_size, max_sequences_per_pack=limit)
        _valid(mine, lengths, pack_size)
        assert strategies(mine, lengths) == strategies(final)
        if limit is not None:
            assert mine.sizes().max() <= limit


@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_every_algorithm_is_a_valid_packing(algorithm):
    rng = np.random.default_rng(11)
    for _ in range(30):
        pack_size = int(rng.integers(1, 5000))
        lengths = rng.integers(1, pack_size + 1, int(rng.integers(0, 2000)))
        bins = pack(lengths, pack_size, algorithm)
        _valid(bins, lengths, pack_size)
        assert len(bins) >= lower_bound(lengths, pack_size)
        if len(bins):
            eff = packing_efficiency(lengths, bins, pack_size)
            assert eff == pytest.approx(lengths.sum() / (len(bins) * pack_size))
            assert 0 < eff <= 1


def test_decreasing_algorithms_reach_the_bound_on_sft_like_lengths():
    rng = np.random.default_rng(3)
    lengths = np.clip(rng.normal(300, 80, 20000).round(), 16, 1024).astype(np.int64)
    bound = lower_bound(lengths, 4096)
    for alg in ("first_fit_decreasing", "best_fit_decreasing"):
        assert len(pack(lengths, 4096, alg)) <= int(np.ceil(bound * 1.01))   # within 1% of the bound
    assert len(pack(lengths, 4096, "first_fit")) >= len(pack(lengths, 4096, "first_fit_decreasing"))


def test_bins_helpers():
    b = Bins.from_lists([[2, 0], [1], [3, 4, 5]])
    assert len(b) == 3 and b.tolist() == [[2, 0], [1], [3, 4, 5]]
    assert b[-1].tolist() == [3, 4, 5] and [x.tolist() for x in b] == b.tolist()
    assert b.bin_of().tolist() == [0, 1, 0, 2, 2, 2]
    assert b.loads([1, 2, 3, 4, 5, 6]).tolist() == [4, 2, 15]
    assert packing_efficiency([1, 2, 3, 4, 5, 6], [[2, 0], [1], [3, 4, 5]], 16) == pytest.approx(21 / 48)
    with pytest.raises(IndexError):
        b[3]


def test_bounds_and_padding_share():
    assert lower_bound([300] * 100, 4096) == 8          # 30000 / 4096 = 7.3 → 8
    assert padding_share([300] * 10, 4096) == pytest.approx(1 - 300 / 4096)
    with pytest.raises(ValueError, match="lengths\\[1\\] = 5000"):
        padding_share([10, 5000], 4096)


@pytest.mark.parametrize("lengths, match", [
    ([3, 0, 2], "lengths\\[1\\] = 0"),
    ([3, 11, 2], "lengths\\[1\\] = 11 exceeds pack_size 10"),
    ([[1, 2]], "1-D"),
    ([1.5], "integers"),
])
def test_pack_refuses_bad_lengths(lengths, match):
    with pytest.raises((ValueError, TypeError), match=match):
        pack(lengths, 10)


def test_unknown_algorithm():
    with pytest.raises(ValueError, match="unknown packing algorithm 'next_fit'"):
        pack([1, 2], 4, "next_fit")


# --------------------------------------------------------------------------------- SFT I/O
class CharTokenizer:
    """One id per character (ord % 997 + 4); specials pad 0, bos 2, eos 3."""

    bos, eos, pad = 2, 3, 0

    def encode(self, text):
        return [ord(c) % 997 + 4 for c in text]


def _write(path, lines):
    path.write_text("".join(l + "\n" for l in lines), encoding="utf-8")
    return path


@pytest.mark.parametrize("line, match", [
    ('{"input": "q"}', "line 2: field 'output' is missing"),
    ('{"input": "q", "output": "   "}', "line 2: field 'output' is empty"),
    ('{"input": "", "output": "a"}', "line 2: field 'input' is empty"),
    ('{"input": "q", "output": 5}', "line 2: field 'output' must be a string"),
    ('["q", "a"]', "line 2: expected a JSON object"),
    ('{"input": "q", "output": "a"', "line 2: not valid JSON"),
    ('', "line 2: blank line"),
])
def test_read_sft_rejects_bad_lines_with_their_number(tmp_path, line, match):
    path = _write(tmp_path / "sft.jsonl", ['{"input": "q1", "output": "a1"}', line, '{"input": "q3", "output": "a3"}'])
    with pytest.raises(SFTFormatError, match=match) as info:
        read_sft_jsonl(path)
    assert "sft.jsonl, line 2" in str(info.value)


def test_tokenize_puts_the_loss_on_the_answer_only(tmp_path):
    path = _write(tmp_path / "sft.jsonl", ['{"input": "abc", "output": "de"}', '{"input": "x", "output": "yz!"}'])
    data = tokenize_sft(path, CharTokenizer())
    assert data.lengths.tolist() == [3 + 1 + 2 + 1, 1 + 1 + 3 + 1]     # prompt + "\n" + answer + eos
    ids, mask = data.example(0)
    assert ids.tolist() == CharTokenizer().encode("abc\nde") + [3]
    assert mask.tolist() == [0, 0, 0, 0, 1, 1, 1]
    assert data.line.tolist() == [1, 2]
    np.testing.assert_array_equal(data.loss_mask()[7:], data.example(1)[1])
    with_bos = tokenize_sft([{"input": "a", "output": "b"}], CharTokenizer(), add_bos=True, separator="")
    assert with_bos.example(0)[0].tolist() == [2, CharTokenizer().encode("a")[0], CharTokenizer().encode("b")[0], 3]
    assert with_bos.answer_start.tolist() == [2]


def test_tokenize_refuses_an_answer_without_tokens():
    class Lossy(CharTokenizer):
        def encode(self, text):
            return [] if text == "~" else super().encode(text)
    with pytest.raises(SFTFormatError, match="line 2: field 'output' tokenizes to no tokens"):
        tokenize_sft([{"input": "a", "output": "b"}, {"input": "a", "output": "~"}], Lossy())


def _random_examples(rng, n, max_prompt=40, max_answer=60):
    letters = "abcdefghij가나다"
    return [{"input": "".join(rng.choice(list(letters), int(rng.integers(1, max_prompt)))),
             "output": "".join(rng.choice(list(letters), int(rng.integers(1, max_answer))))}
            for _ in range(n)]


# ------------------------------------------------------------------------------ SFT packing
@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_pack_sft_keeps_every_example_and_its_mask(algorithm):
    rng = np.random.default_rng(21)
    data = tokenize_sft(_random_examples(rng, 300), CharTokenizer())
    packed = pack_sft(data, 128, algorithm)
    assert packed.seq_example.size == len(data)
    assert sorted(packed.seq_example.tolist()) == list(range(len(data)))
    assert (packed.train_tokens() <= 128).all() and len(packed) >= lower_bound(data.train_lengths, 128)
    for k in range(len(packed)):
        item = packed[k]
        lens = packed.seq_lengths(k)
        assert item["seq_start_id"].tolist() == np.concatenate([[0], np.cumsum(lens)[:-1]]).tolist()
        assert item["cu_seqlens"].tolist() == np.concatenate([[0], np.cumsum(lens - 1)]).tolist()
        for j, (start, ex) in enumerate(zip(item["seq_start_id"], packed.seq_example[packed.seq_offsets[k]:])):
            ids, mask = data.example(int(ex))
            np.testing.assert_array_equal(item["input_ids"][start:start + lens[j]], ids)
            np.testing.assert_array_equal(item["loss_mask"][start:start + lens[j]], mask)
    assert packed.stats["packs"] == len(packed) and packed.stats["too_long"] == 0


def test_training_view_shifts_each_sequence_and_restarts_positions():
    rng = np.random.default_rng(5)
    data = tokenize_sft(_random_examples(rng, 60), CharTokenizer())
    packed = pack_sft(data, 200)
    for k in range(len(packed)):
        view = packed.training_view(k)
        starts = packed.seq_offsets[k]
        tokens, labels, loss, pos = [], [], [], []
        for j in range(int(packed.seq_offsets[k + 1] - starts)):
            ids, mask = data.example(int(packed.seq_example[starts + j]))
            tokens += ids[:-1].tolist()
            labels += ids[1:].tolist()
            loss += mask[1:].tolist()
            pos += list(range(ids.size - 1))
        assert view["tokens"].tolist() == tokens and view["labels"].tolist() == labels
        assert view["loss_mask"].tolist() == loss and view["position_ids"].tolist() == pos
        assert view["cu_seqlens"].tolist() == packed.cu_seqlens(k).tolist()
    padded = packed.training_view(0, pad_to=200, pad_id=0)
    n = int(packed.train_tokens()[0])
    assert padded["tokens"].shape == (200,) and padded["loss_mask"][n:].sum() == 0
    assert padded["cu_seqlens"].tolist()[-2:] == [n, 200] or n == 200
    with pytest.raises(ValueError, match="shorter than pack 0"):
        packed.training_view(0, pad_to=1)


def nemo_collate_row(item):
    """GPTSFTPackedDataset: __getitem__ + collate_fn for one pack (no padding), transcribed."""
    ids = np.asarray(item["input_ids"])
    bounds = list(item["seq_start_id"]) + [len(ids)]
    tokens = np.concatenate([ids[bounds[i]:bounds[i + 1] - 1] for i in range(len(bounds) - 1)])
    labels = np.concatenate([ids[bounds[i] + 1:bounds[i + 1]] for i in range(len(bounds) - 1)])
    mask = np.asarray(item["loss_mask"])
    loss = np.concatenate([mask[bounds[i] + 1:bounds[i + 1]] for i in range(len(bounds) - 1)])
    pos, cu = [], [0]
    for length in np.diff(bounds):
        pos.extend(range(length - 1))
        cu.append(cu[-1] + length - 1)
    return tokens, labels, loss, pos, cu


def test_nemo_layout_and_nemo_collate_agree_with_training_view(tmp_path):
    rng = np.random.default_rng(9)
    packed = pack_sft(tokenize_sft(_random_examples(rng, 80), CharTokenizer()), 160, "first_fit_decreasing")
    records = packed.to_nemo()
    assert set(records[0]) == {"input_ids", "loss_mask", "seq_start_id"}
    for k, rec in enumerate(records):
        tokens, labels, loss, pos, cu = nemo_collate_row(rec)
        view = packed.training_view(k)
        assert view["tokens"].tolist() == tokens.tolist() and view["labels"].tolist() == labels.tolist()
        assert view["loss_mask"].tolist() == loss.astype(float).tolist()
        assert view["position_ids"].tolist() == pos and view["cu_seqlens"].tolist() == cu
    npy = packed.save_nemo_npy(tmp_path / "packed.npy")
    with pytest.raises(ValueError):                       # NeMo's file needs pickle …
        np.load(npy, allow_pickle=False)
    loaded = np.load(npy, allow_pickle=True)
    assert [dict(x) for x in loaded] == records


def test_save_and_load_without_pickle(tmp_path):
    rng = np.random.default_rng(13)
    packed = pack_sft(tokenize_sft(_random_examples(rng, 50), CharTokenizer()), 100, "best_fit_decreasing",
                      too_long="split")
    path = packed.save(tmp_path / "out" / "packed.npz")
    assert not list((tmp_path / "out").glob(".*tmp"))   # no temp file left behind
    with np.load(path, allow_pickle=False) as z:         # … ours does not
        assert "input_ids" in z.files
    back = PackedSFT.load(path)
    for name in ("input_ids", "loss_mask", "pack_offsets", "seq_start_id", "seq_offsets", "seq_example",
                 "seq_chunk", "seq_line"):
        np.testing.assert_array_equal(getattr(back, name), getattr(packed, name))
    assert back.stats == packed.stats and back.pack_size == 100 and back.algorithm == "best_fit_decreasing"
    np.savez(tmp_path / "other.npz", x=np.arange(3))
    with pytest.raises(ValueError, match="other.npz: not a labsupport packed SFT file"):
        PackedSFT.load(tmp_path / "other.npz")


def test_load_refuses_a_damaged_file(tmp_path):
    rng = np.random.default_rng(1)
    packed = pack_sft(tokenize_sft(_random_examples(rng, 20), CharTokenizer()), 100)
    path = packed.save(tmp_path / "p.npz")
    with np.load(path, allow_pickle=False) as z:
        arrays = {k: z[k] for k in z.files}
    arrays["pack_size"] = np.array(10)
    np.savez(tmp_path / "bad.npz", **arrays)
    with pytest.raises(ValueError, match="bad.npz: pack 0 holds .* > pack_size 10"):
        PackedSFT.load(tmp_path / "bad.npz")
    arrays["pack_size"] = np.array(100)
    arrays["input_ids"] = arrays["input_ids"][:-1]
    np.savez(tmp_path / "bad2.npz", **arrays)
    with pytest.raises(ValueError, match="offsets do not match"):
        PackedSFT.load(tmp_path / "bad2.npz")


# ------------------------------------------------------------------------- too-long policy
def _long_data():
    examples = [{"input": "p" * 5, "output": "a" * 4},            # 5+1+4+1 = 11 tokens
                {"input": "q" * 3, "output": "b" * 30},           # 3+1+30+1 = 35 tokens
                {"input": "r" * 25, "output": "c" * 10}]          # 25+1+10+1 = 37 tokens
    return tokenize_sft(examples, CharTokenizer())


def test_too_long_error_names_the_lines():
    with pytest.raises(ValueError, match=r"2 example\(s\) do not fit .*line 2 \(34 training tokens\), "
                                         r"line 3 \(36 training tokens\).*too_long='truncate'"):
        pack_sft(_long_data(), 16)
    with pytest.raises(ValueError, match="too_long must be one of"):
        pack_sft(_long_data(), 16, too_long="drop")


def test_too_long_truncate_keeps_the_head_and_counts_the_cut():
    data = _long_data()
    packed = pack_sft(data, 16, too_long="truncate")
    assert sorted(packed.seq_example.tolist()) == [0, 1, 2]
    assert packed.stats["truncated"] == 2 and packed.stats["tokens_cut"] == (35 - 17) + (37 - 17)
    assert packed.stats["truncated_without_answer"] == 1          # line 3: its prompt fills the kept part
    for k in range(len(packed)):
        for j, ex in enumerate(packed.seq_example[packed.seq_offsets[k]:packed.seq_offsets[k + 1]]):
            n = int(packed.seq_lengths(k)[j])
            assert n == min(int(data.lengths[ex]), 17)
            start = int(packed[k]["seq_start_id"][j])
            np.testing.assert_array_equal(packed[k]["input_ids"][start:start + n], data.example(int(ex))[0][:n])


def test_too_long_split_keeps_every_training_pair_exactly_once():
    data = _long_data()
    packed = pack_sft(data, 16, "first_fit_decreasing", too_long="split")
    assert packed.stats["split_examples"] == 2 and packed.stats["chunks_from_splits"] == 3 + 3
    pairs = Counter()
    for k in range(len(packed)):
        view = packed.training_view(k)
        assert view["tokens"].numel() <= 16
        for t, l, m in zip(view["tokens"].tolist(), view["labels"].tolist(), view["loss_mask"].tolist()):
            pairs[(t, l, m)] += 1
    want = Counter()
    for i in range(len(data)):
        ids, mask = data.example(i)
        for t in range(ids.size - 1):
            want[(int(ids[t]), int(ids[t + 1]), float(mask[t + 1]))] += 1
    assert pairs == want
    chunks = sorted(zip(packed.seq_example.tolist(), packed.seq_chunk.tolist()))
    assert chunks == [(0, 0), (1, 0), (1, 1), (1, 2), (2, 0), (2, 1), (2, 2)]
    assert set(packed.seq_line.tolist()) == {1, 2, 3}


def test_each_chapter4_module_exports_its_own_names_only():
    """sft_packing holds SFT packing; samples and bin packing live in their own modules (no re-exports)."""
    from labsupport.datasets import bin_packing, gpt_samples
    for module in (packing, bin_packing, gpt_samples):
        for name in module.__all__:
            obj = getattr(module, name)
            if callable(obj):
                assert obj.__module__ == module.__name__, name
    assert not set(packing.__all__) & (set(bin_packing.__all__) | set(gpt_samples.__all__))
