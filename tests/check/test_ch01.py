"""labsupport.check.ch01: each check passes the reference, fails plausible mistakes and hard-coded
answers, and reports an untouched stub as not attempted."""
from __future__ import annotations

from collections import Counter

import pytest

from labsupport.datasets.bpe import merge, merge_step
from labsupport.check import ch01 as check
from labsupport.datasets.tokenizer import compare_tokenizers, tokens_per_character


def stub(*args):
    raise NotImplementedError("exercise")


GOOD_Q4 = {"cause": "b", "checks": ["fingerprint", "special_ids", "vocab_size", "roundtrip"],
           "fixes": ["ship_model", "guard", "reprocess"],
           "explanation": "The serving stack loaded a different tokenizer model than preprocessing used, so the "
                          "same ids mean different pieces; compare fingerprints and ship the model file."}


def test_q1_merge_step(capsys):
    assert check.q1(merge_step).passed

    def smallest_pair_on_ties(ids, new_id):
        if len(ids) < 2:
            return list(ids), None
        c = Counter(zip(ids, ids[1:]))
        top = max(c.values())
        pair = min(p for p, n in c.items() if n == top)
        return merge(ids, pair, new_id), pair

    def overlapping(ids, new_id):  # replaces overlapping occurrences: [7,7,7] -> [9,9]
        new, pair = merge_step(ids, new_id)
        if pair is None:
            return new, None
        out = [new_id if (a, b) == pair else a for a, b in zip(ids, ids[1:])]
        return out, pair

    def mutating(ids, new_id):
        new, pair = merge_step(ids, new_id)
        ids[:] = new
        return new, pair

    for wrong in (smallest_pair_on_ties, overlapping, mutating):
        assert check.q1(wrong).status == "failed", wrong.__name__
    assert check.q1(stub).status == "not attempted"
    assert "hint:" in capsys.readouterr().out


def test_q2_tokens_per_character():
    assert check.q2(tokens_per_character).passed
    per_byte = lambda tok, texts: sum(len(tok.encode(t)) for t in texts) / sum(len(t.encode()) for t in texts)
    joined = lambda tok, texts: len(tok.encode("".join(texts))) / len("".join(texts))
    hard_coded = lambda tok, texts: 0.26
    for wrong in (per_byte, joined, hard_coded):
        assert check.q2(wrong).status == "failed"
    assert check.q2(stub).status == "not attempted"


def test_q3_diagnose_tokenizer_mismatch():
    assert check.q3(compare_tokenizers).passed

    def verdict_from_ids(a, b, probes):  # misses the swapped-special-ids case
        r = compare_tokenizers(a, b, probes)
        r["verdict"] = "same" if r["id_agreement"] == 1.0 else "mismatch"
        r["same_fingerprint"] = r["verdict"] == "same"
        return r

    def path_compare(a, b, probes):  # compares paths instead of model bytes
        r = compare_tokenizers(a, b, probes)
        r["same_fingerprint"] = a.path == b.path
        r["verdict"] = "same" if r["same_fingerprint"] else "mismatch"
        return r

    for wrong in (verdict_from_ids, path_compare):
        assert check.q3(wrong).status == "failed"
    assert check.q3(stub).status == "not attempted"


def test_q4_exercise_4(capsys):
    result = check.q4(lambda: dict(GOOD_Q4))
    assert result.passed and result.manual == {"explanation": GOOD_Q4["explanation"]}
    for change in ({"cause": "a"}, {"checks": GOOD_Q4["checks"] + ["loss_curve"]},
                   {"checks": ["fingerprint"]}, {"fixes": ["temperature"]}, {"fixes": ["guard", "nope"]},
                   {"explanation": "tokenizer"}):
        assert check.q4(lambda: {**GOOD_Q4, **change}).status == "failed", change
    assert check.q4(lambda: {"cause": "b"}).status == "failed"
    assert check.q4(stub).status == "not attempted"
    capsys.readouterr()


def test_options_shown_to_learners_contain_the_answers():
    assert sum(c in check._CAUSE for c in check.EXERCISE_4_CAUSES) == len(check._CAUSE) == 1
    assert sum(c in check._CHECKS for c in check.EXERCISE_4_CHECKS) == len(check._CHECKS)
    assert sum(f in check._FIXES for f in check.EXERCISE_4_FIXES) == len(check._FIXES)


def test_q4_names_every_failing_part(capsys):
    """#13: a structured answer with two problems gets both named in one run."""
    result = check.q4(lambda: {**GOOD_Q4, "cause": "a", "fixes": ["guard"]})
    assert result.status == "failed"
    assert "cause:" in result.message and "fixes:" in result.message and "2 parts to fix" in result.message
    capsys.readouterr()


def test_answer_keys_are_not_readable_from_the_module():
    import inspect

    source = inspect.getsource(check)
    for secret in ('"ship_model", "guard", "reprocess"}', '_CAUSE = "b"'):
        assert secret not in source
    assert "b" in check._CAUSE and "a" not in check._CAUSE and repr(check._CAUSE).count("b") <= 1


@pytest.mark.parametrize("name", ["q1", "q2", "q3", "q4"])
def test_checks_carry_a_hint(name):
    assert getattr(check, name).hint


def test_q5_transfer(capsys):
    from labsupport.datasets.bpe import ByteBPE

    def reference(text, merges):
        return ByteBPE(merges=list(merges)).encode(text)

    def sequential(text, merges):                       # merges in order, each over the whole sequence
        ids = list(text.encode("utf-8"))
        for k, pair in enumerate(merges):
            out, i = [], 0
            while i < len(ids):
                if i + 1 < len(ids) and (ids[i], ids[i + 1]) == pair:
                    out.append(256 + k)
                    i += 2
                else:
                    out.append(ids[i])
                    i += 1
            ids = out
        return ids

    assert check.q5(reference).passed and check.q5(sequential).passed
    assert sequential("hi! hi", [(104, 105), (256, 33)]) == [257, 32, 256]

    def reversed_order(text, merges):                   # the latest merge first: wrong
        return sequential(text, []) if not merges else _apply_reversed(text, merges, sequential)

    result = check.q5(reversed_order)
    assert not result.passed and result.mistake == "merges_in_reverse" and "still holds merges[1]" in result.message
    assert not check.q5(lambda text, merges: list(text.encode("utf-8"))).passed     # ignores the merges
    assert check.q5(stub).status == "not attempted"


def _apply_reversed(text, merges, sequential):
    ids = list(text.encode("utf-8"))
    for k in reversed(range(len(merges))):
        ids = merge(ids, merges[k], 256 + k)
    return ids
