"""Every check of chapters 0–6 gives tiered hints (a nudge, then the idea, then the formula or recipe:
the n-th failure shows tier n), and each mistake-specific sentence a check adds to its failure
message appears for exactly that wrong answer and never for a correct one."""
from __future__ import annotations

import numpy as np
import pytest

from labsupport.check import _core, ch00, ch01, ch02, ch03, ch04, ch05, ch06
from labsupport.datasets.bin_packing import first_fit_decreasing as _ffd
from labsupport.datasets.blending import cap_weights, expected_epochs, greedy_step
from labsupport.datasets.bpe import merge, merge_step
from labsupport.datasets.tokenizer import compare_tokenizers, tokens_per_character
from labsupport.distributed import collectives as C
from labsupport.distributed.training_memory import training_memory_gb

from tests.check.test_ch02 import document_byte_offset, document_tokens, padded_vocab_size, parse_idx
from tests.check.test_ch04 import GOOD_Q4, pad_multiple
from tests.check.test_ch05 import GOOD_Q3
from tests.check.test_ch06 import batch_arithmetic, diagnose, dp_slice, locate_sample, restart_with_new_blend

MODULES = (ch00, ch01, ch02, ch03, ch04, ch05, ch06)
CHECKS = [(m, name) for m in MODULES for name, fn in vars(m).items() if getattr(fn, "is_check", False)]
#: Multiple-choice / free-text questions: their hints need no formula tier (they still have three).
CHOICE = {("ch00", "q4"), ("ch01", "q4"), ("ch02", "q3"), ("ch03", "q4"), ("ch04", "q4"), ("ch05", "q3")}


def test_every_question_of_every_chapter_is_listed():
    assert len(CHECKS) == 36
    assert {m.CHAPTER for m, _ in CHECKS} == {f"ch0{i}" for i in range(7)}


def _nothing(*args, **kwargs):
    """A wrong answer for every check: whatever it is asked, it returns None."""
    return None


@pytest.mark.parametrize("module, name", CHECKS, ids=[f"{m.CHAPTER}-{n}" for m, n in CHECKS])
def test_hints_are_tiered_and_escalate_with_each_failure(module, name, capsys):
    check = getattr(module, name)
    tiers = check.hint
    assert isinstance(tiers, tuple) and all(isinstance(t, str) and t.strip() for t in tiers)
    assert len(tiers) >= (2 if (module.CHAPTER, name) in CHOICE else 3)
    assert len(set(tiers)) == len(tiers)                       # each tier says something new
    assert tiers[-1] not in tiers[0]                           # the nudge does not give the formula
    key = (module.CHAPTER, check.question)
    for n in range(1, len(tiers) + 2):                         # one failure past the last tier
        result = check(_nothing)
        assert result.status == "failed", result.message
        assert _core._FAILURES[key] == n
        assert result.hint == tiers[min(n, len(tiers)) - 1]
        assert f"hint: {result.hint}" in capsys.readouterr().out
    _core.reset()
    assert check(_nothing).hint == tiers[0]                    # reset: the nudge again
    capsys.readouterr()


# ------------------------------------------------------------------------------------------
# correct answers and the wrong ones whose mistake a check names
from tests.check.test_ch00 import correct as _dp  # noqa: E402  (chapter 0's correct q1, one copy)


def _dp_group(rank, tp, pp, dp):
    return [rank % tp + tp * (d + dp * (rank // (tp * dp))) for d in range(dp)]


def _merge_step_last_tie(ids, new_id):
    if len(ids) < 2:
        return list(ids), None
    counts = {}
    for pair in zip(ids, ids[1:]):
        counts[pair] = counts.get(pair, 0) + 1
    best = max(reversed(list(counts)), key=counts.get)      # the LAST of equal counts
    out, i = [], 0
    while i < len(ids):
        if i + 1 < len(ids) and (ids[i], ids[i + 1]) == best:
            out.append(new_id)
            i += 2
        else:
            out.append(ids[i])
            i += 1
    return out, best


def _diagnose_with(**change):
    def diagnose_mismatch(train, serve, probes):
        out = compare_tokenizers(train, serve, probes)
        for key, fn in change.items():
            out[key] = fn(out, train, serve, probes)
        return out
    return diagnose_mismatch


def _garbled_swapped(out, train, serve, probes):
    for text in probes:
        try:
            shown = train.decode(serve.encode(text))
        except Exception:  # noqa: BLE001 - an id the training tokenizer cannot decode
            return out["garbled"]
        if shown != text:
            return shown
    return None


def _bpe_encode(text, merges):
    ids = list(text.encode("utf-8"))
    for k, pair in enumerate(merges):
        ids = merge(ids, tuple(pair), 256 + k)
    return ids


def _parse_idx_offsets(pointers_at=None, documents_at=None):
    def parse(raw):
        out = parse_idx(raw)
        n, d = out["num_sequences"], out["num_document_indices"]
        if pointers_at is not None:
            out["sequence_pointers"] = np.frombuffer(raw, "<i8", n, pointers_at(n))
        if documents_at is not None:
            out["document_indices"] = np.frombuffer(raw, "<i8", d, documents_at(n))
        return out
    return parse


def _document_tokens_with(pick):
    def tokens(raw_idx, raw_bin, k):
        idx = parse_idx(raw_idx)
        codes = {1: np.uint8, 4: np.int32, 5: np.int64, 8: np.uint16}
        dtype = np.dtype(codes[int(idx["dtype_code"])]).newbyteorder("<")
        seqs = pick(idx, k)
        parts = [np.frombuffer(raw_bin, dtype, int(idx["sequence_lengths"][s]), int(idx["sequence_pointers"][s]))
                 for s in seqs]
        return np.concatenate(parts) if parts else np.zeros(0, dtype)
    return tokens


def _epochs_raw(weights, sizes, total):
    return [w * total / n for w, n in zip(weights, sizes)]


def _exercise_2_with(epochs):
    from tests.check.test_ch03_wrong_answers_and_hints import exercise_2

    def answer(total, code, weight):
        return {**exercise_2(total, code, weight), "b_code_epochs": epochs(total, code, weight)}
    return answer


def _resume(update=True, from_zero=False):
    def resume_blend(weights, counts, n):
        counts, out = list(counts), []
        start = 0 if from_zero else sum(counts)
        for step in range(start, start + n):
            d = greedy_step(weights, counts, step)
            out.append(d)
            counts[d] += update
        return out
    return resume_blend


def _fit(order_key, best=False):
    """A packing function: tests/datasets/test_packing.py's item-by-item fit in the order ``order_key(lengths)``."""
    from tests.datasets.test_packing import item_by_item

    return lambda lengths, pack_size: item_by_item(lengths, pack_size, best, key=order_key(lengths))


def _positions_and_mask(eod_starts=False, mask="right"):
    def positions_and_mask(tokens, eod):
        tokens = np.asarray(tokens)
        s = tokens.size
        is_eod = (tokens == eod).astype(int)
        doc = np.cumsum(is_eod) if eod_starts else np.concatenate([[0], np.cumsum(is_eod[:-1])])
        first = {d: int(np.flatnonzero(doc == d)[0]) for d in set(doc.tolist())}
        pos = np.arange(s) - np.array([first[d] for d in doc.tolist()])
        if mask is None:
            return pos, None
        future = np.triu(np.ones((s, s), dtype=bool), 1)
        if mask == "causal":
            return pos, future
        return pos, future | (doc[:, None] != doc[None, :])
    return positions_and_mask


def _sample_documents(stride_extra=0):
    def sample_documents(sizes, doc_idx, seq_length, k):
        first = k * (seq_length + stride_extra)
        last = first + seq_length + 1
        pieces, pos = [], 0
        for d in doc_idx:
            a, b = max(first - pos, 0), min(last - pos, sizes[d])
            if a < b:
                pieces.append((d, a, b))
            pos += sizes[d]
            if pos >= last:
                break
        return pieces
    return sample_documents


def _global_mean_std(stats):
    n, s, ss = np.asarray(stats, dtype=float).sum(axis=0)
    mean = s / n
    return mean, np.sqrt((ss - n * mean ** 2) / (n - 1))


def _spread_of_stds(stats):
    stats = np.asarray(stats, dtype=float)
    means = stats[:, 1] / stats[:, 0]
    stds = np.sqrt((stats[:, 2] - stats[:, 0] * means ** 2) / (stats[:, 0] - 1))
    return _global_mean_std(stats)[0], float(stds.std(ddof=1)) if len(stds) > 1 else float(stds[0])


def _comm(collective, nbytes, ops, group, busbw):
    return ops * nbytes * C.bus_factor(collective, group) / (busbw * 1e9)


def _batch_with(key, value):
    def arithmetic(cfg, steps):
        out = batch_arithmetic(cfg, steps)
        m = cfg.model
        out[key] = value(m, out, steps)
        return out
    return arithmetic


def _diagnose_healthy(log):
    right = diagnose(log)
    return {**right, "suspect": "padding" if right["suspect"] != "padding" else "load_everything"}


MISTAKES = [
    # chapter 0
    (ch00.q1, _dp, lambda d, n, t, p: (_dp(d, n, t, p), d // (t * p))[1], "but the job has 2"),
    (ch00.q1, _dp, lambda d, n, t, p: (_dp(d, n, t, p), d * n // t)[1], "4 GPUs, but the job has 2"),
    (ch00.q2, training_memory_gb, lambda n, m, dp=1: training_memory_gb(n, m, dp) * 1e9, "returned 2e9"),
    (ch00.q2, training_memory_gb, lambda n, m, dp=1: training_memory_gb(n, m, dp) * 1e9 / 2 ** 30,
     "times the expected"),
    (ch00.q2, training_memory_gb, lambda n, m, dp=1: n * (2 if m == "bf16_weights" else 12) / 1e9,
     "12 bytes per parameter"),
    (ch00.q2, training_memory_gb, lambda n, m, dp=1: n * (2 if m == "bf16_weights" else 16) / 1e9,
     "the ZeRO paper's count"),
    (ch00.q3, _dp_group, lambda r, tp, pp, dp: [r // tp * tp + t for t in range(tp)], "GPU 1 = (tp 1, dp 0, pp 0)"),
    (ch00.q3, _dp_group, lambda r, tp, pp, dp: [r % (tp * dp) + tp * dp * p for p in range(pp)],
     "GPU 4 = (tp 0, dp 0, pp 1)"),
    (ch00.q3, _dp_group,
     lambda r, tp, pp, dp: [d + dp * (r // dp % tp) + dp * tp * (r // (dp * tp)) for d in range(dp)],
     "returned [0, 1, 2]"),
    # chapter 1
    (ch01.q1, merge_step, _merge_step_last_tie, "both occur once"),
    (ch01.q2, tokens_per_character,
     lambda tok, texts: sum(len(tok.encode(t)) for t in texts) / sum(len(t.encode()) for t in texts), "9 UTF-8 bytes"),
    (ch01.q2, tokens_per_character,
     lambda tok, texts: float(np.mean([len(tok.encode(t)) / len(t) for t in texts])), "'a': 1 token"),
    (ch01.q2, tokens_per_character, lambda tok, texts: 1 / tokens_per_character(tok, texts), "returned 3.6"),
    (ch01.q3, compare_tokenizers, _diagnose_with(id_agreement=lambda o, a, b, p: o["id_agreement"] * len(p)),
     "probe texts"),
    (ch01.q3, compare_tokenizers, _diagnose_with(special_ids_differ=lambda o, a, b, p: o["special_ids_differ"][::-1]),
     "special_ids_differ = ["),
    (ch01.q3, compare_tokenizers, _diagnose_with(garbled=_garbled_swapped), "garbled = "),
    (ch01.q5, _bpe_encode, lambda text, merges: list(text.encode("utf-8")), "the UTF-8 bytes of the text"),
    # chapter 2
    (ch02.q1, parse_idx, _parse_idx_offsets(pointers_at=lambda n: 34 + 8 * n), "sequence_pointers = ["),
    (ch02.q1, parse_idx, _parse_idx_offsets(documents_at=lambda n: 34 + 8 * n), "document_indices = ["),
    (ch02.q2, document_byte_offset, lambda lengths, d, itemsize, k: int(np.sum(lengths[:d[k]])),
     "stored as 2-byte tokens"),
    (ch02.q2, document_byte_offset, lambda lengths, d, itemsize, k: int(np.sum(lengths[:k])) * itemsize,
     "returned 6; document 1 holds sequence 2"),
    (ch02.q2, document_byte_offset, lambda lengths, d, itemsize, k: int(np.sum(lengths[:d[k] + 1])) * itemsize,
     "returned 14"),
    (ch02.q4, document_tokens, _document_tokens_with(lambda idx, k: range(int(idx["document_indices"][k]),
                                                                          int(idx["document_indices"][k + 1]))[:1]),
     "returned [1, 2, 3], expected [1, 2, 3, 4, 5]"),
    (ch02.q5, padded_vocab_size, lambda v, d, t: -(-v // d) * d, "3 rows per rank, not a multiple of 2"),
    (ch02.q5, padded_vocab_size, lambda v, d, t: v // (d * t) * d * t, "id 4 would have no embedding row"),
    # chapter 3
    (ch03.q2, expected_epochs, _epochs_raw, "tokens read from the datasets, in a run of"),
    (ch03.q2, expected_epochs, lambda w, n, t: [1 / e for e in expected_epochs(w, n, t)], "the run takes [4.0, 4.0]"),
    (ch03.q3, cap_weights, lambda w, n, t, e: [min(x / sum(w), e * s / t) for x, s in zip(w, n)],
     "the weights add up to 0.75, not 1"),
    (ch03.q4, _exercise_2_with(lambda t, c, w: w * t / c), _exercise_2_with(lambda t, c, w: c / (w * t)),
     "less than one pass"),
    (ch03.q4, _exercise_2_with(lambda t, c, w: w * t / c), _exercise_2_with(lambda t, c, w: t / c),
     "code has only the share"),
    (ch03.q5, _resume(), _resume(from_zero=True), "those of a blend at sample 0"),
    (ch03.q5, _resume(), _resume(update=False), "if the counts stayed at"),
    # chapter 4
    (ch04.q1, lambda lengths, s: 1 - sum(lengths) / (len(lengths) * s),
     lambda lengths, s: sum(lengths) / (len(lengths) * s), "yours is the share of the real tokens"),
    (ch04.q1, lambda lengths, s: 1 - sum(lengths) / (len(lengths) * s),
     lambda lengths, s: 100 * (1 - sum(lengths) / (len(lengths) * s)), "your share is above 1"),
    (ch04.q1, lambda lengths, s: 1 - sum(lengths) / (len(lengths) * s),
     lambda lengths, s: 1 - sum(lengths) / (len(lengths) * max(lengths)), "rows 3 slots long, the longest"),
    (ch04.q2, lambda lengths, size: _ffd(lengths, size).tolist(), _fit(lambda lengths: lambda i: i),
     "the first in the list"),
    (ch04.q2, lambda lengths, size: _ffd(lengths, size).tolist(), _fit(lambda lengths: lambda i: (lengths[i], i)),
     "the SHORTEST"),
    (ch04.q2, lambda lengths, size: _ffd(lengths, size).tolist(),
     _fit(lambda lengths: lambda i: (-lengths[i], i), True),
     "though pack 0, before it, still had"),
    (ch04.q3, _positions_and_mask(), _positions_and_mask(eod_starts=True, mask=None),
     "count the EOD as the first token of the next"),
    (ch04.q3, _positions_and_mask(), _positions_and_mask(mask="causal"), "is in an earlier document"),
    (ch04.q3, _positions_and_mask(),
     lambda tokens, eod: (_positions_and_mask()(tokens, eod)[0], _positions_and_mask(eod_starts=True)(tokens, eod)[1]),
     "the EOD is cut off from its own document"),
    (ch04.q4, lambda: dict(GOOD_Q4), lambda: {**GOOD_Q4, "a_padding_share": 300 / 4096}, "that is 300 / 4096"),
    (ch04.q4, lambda: dict(GOOD_Q4), lambda: {**GOOD_Q4, "a_padding_share": 100 * (1 - 300 / 4096)},
     "a share above 1"),
    (ch04.q5, _sample_documents(), _sample_documents(stride_extra=1), "share no token"),
    (ch04.q6, pad_multiple, lambda cp, tp, sp: 2 * cp if cp > 1 else 1, "split over CP·TP = 2 ranks"),
    (ch04.q6, pad_multiple, lambda cp, tp, sp: pad_multiple(cp, tp, sp) * (1 + (cp == 1 and tp == 1)),
     "no context parallelism and no chunks"),
    # chapter 5
    (ch05.q3, lambda: dict(GOOD_Q3), lambda: {**GOOD_Q3, "zero_bytes_ratio": 0.5}, "ONE of ZeRO's two collectives"),
    (ch05.q4, _global_mean_std, _spread_of_stds, "how much they differ from each other"),
    (ch05.q5, _comm, lambda c, s, o, n, b: o * s / C.bus_factor(c, n) / (b * 1e9), "fewer than the 2 × S"),
    # chapter 6
    (ch06.q1, dp_slice, lambda c, m, r, dp: [c + r + j * dp for j in range(m)], "the ranks' indices interleave"),
    (ch06.q1, dp_slice, lambda c, m, r, dp: [r * m + j for j in range(m)], "read before this micro-batch"),
    (ch06.q2, batch_arithmetic,
     _batch_with("accumulation_steps", lambda m, o, s: m.global_batch_size // m.micro_batch_size),
     "samples per optimizer step, but global_batch_size"),
    (ch06.q2, batch_arithmetic,
     _batch_with("tokens_per_step", lambda m, o, s: m.micro_batch_size * m.encoder_seq_length),
     "= 1 × 16 tokens, but one optimizer step"),
    (ch06.q2, batch_arithmetic,
     _batch_with("tokens_per_step",
                 lambda m, o, s: m.global_batch_size // o["data_parallel_size"] * m.encoder_seq_length),
     "= 3 × 16 tokens, but one optimizer step"),
    (ch06.q2, batch_arithmetic, _batch_with("consumed_samples", lambda m, o, s: s), "after 2 steps, 1 per step"),
    (ch06.q2, batch_arithmetic,
     _batch_with("consumed_samples", lambda m, o, s: s * m.micro_batch_size * o["data_parallel_size"]),
     "; one step reads global_batch_size"),
    (ch06.q3, diagnose, _diagnose_healthy, "is in its healthy range"),
    (ch06.q4, locate_sample, lambda *a: locate_sample(*a, step_base=0), "are read by step 1"),
    (ch06.q4, locate_sample, lambda *a: locate_sample(*a, rank_rule="no_wrap"), "the ranks are 0…"),
    (ch06.q4, locate_sample, lambda *a: locate_sample(*a, sample_shift=1), "holds sample"),
    (ch06.q5, restart_with_new_blend, lambda *a: restart_with_new_blend(*a, refuse=lambda o, n: False),
     "you said not refused"),
    (ch06.q5, restart_with_new_blend, lambda *a: restart_with_new_blend(*a, read_from="old"), "the OLD weights"),
]


@pytest.mark.parametrize("check, right, wrong, phrase", MISTAKES,
                         ids=[f"{c.chapter}-{c.question}-{p[:24]}" for c, _, _, p in MISTAKES])
def test_a_named_mistake_appears_for_that_mistake_only(check, right, wrong, phrase, capsys):
    failed = check(wrong)
    assert failed.status == "failed" and phrase in failed.message, failed.message
    passed = check(right)
    assert passed.passed and phrase not in passed.message, passed.message
    capsys.readouterr()


def test_ch01_q5_names_code_points(capsys):
    result = ch01.q5(lambda text, merges: [ord(c) for c in text])
    assert result.status == "failed" and result.mistake == "code_points", result.message
    assert 'the UTF-8 bytes of' in result.message, result.message
    capsys.readouterr()


def test_ch02_q4_names_sequence_k_for_document_k(capsys):
    wrong = _document_tokens_with(lambda idx, k: [k] if k < idx["num_sequences"] else [])
    result = ch02.q4(wrong)
    assert result.status == "failed"
    # where sequence k is also document k's first sequence both names are true; either one is given
    assert result.mistake in ("sequence_k", "first_sequence_only"), result.message
    capsys.readouterr()


def test_named_mistakes_keep_what_a_check_accepts(capsys):
    """The correct answers still pass and print no named mistake, whatever the tier."""
    assert ch03.q3(lambda *a: cap_weights(*a)).passed
    assert ch05.q5(_comm).passed and ch06.q3(diagnose).passed and ch04.q5(_sample_documents()).passed
    assert ch00.q1(_dp).passed and ch00.q3(_dp_group).passed
    capsys.readouterr()


def _headings(chapter: str) -> list[str]:
    """The markdown headings and bold run-in titles of notebooks/<chapter>_*.ipynb."""
    import json
    import re
    from pathlib import Path

    path = next(Path(__file__).resolve().parents[2].joinpath("notebooks").glob(f"{chapter}_*.ipynb"))
    found = []
    for cell in json.loads(path.read_text(encoding="utf-8"))["cells"]:
        if cell["cell_type"] == "markdown":
            for line in "".join(cell["source"]).splitlines():
                if line.startswith("#"):
                    found.append(line.lstrip("#").strip())
                found += re.findall(r"\*\*(.+?)\*\*", line)
    return found


@pytest.mark.parametrize("module", [ch00, ch01, ch02, ch03, ch04, ch05, ch06], ids=lambda m: m.__name__[-4:])
def test_hints_name_sections_the_chapter_has(module):
    """A hint that sends the learner to "chapter N's 'Section'" names a heading chapter N has."""
    import re

    cited = 0
    for name in dir(module):
        hint = getattr(getattr(module, name), "hint", None)
        if not name.startswith("q") or hint is None:
            continue
        for tier in (hint,) if isinstance(hint, str) else hint:
            for chapter, title in re.findall(r"chapter (\d)'s '([^']+)'", tier):
                heads = _headings(f"0{chapter}")
                assert any(h.startswith(title) for h in heads), (name, title)
                cited += 1
    assert cited > 0
