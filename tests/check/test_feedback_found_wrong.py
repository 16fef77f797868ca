"""Issue #29 item 4, "feedback found wrong, fixed": each wrong answer from the learner's report, planted as it
was written, with the first message and the repeat asserted (the named mistakes that became rules are planted
in the rule tables of test_feedback_*.py too: ch06 q4 raw_weights, ch04 q2 ties_reversed, ch01 q5 ids_from_257,
ch02 q1 bad_magic_not_valueerror, ch02 q3 solutions_swapped).  Chapters 1–6."""
from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest

from labsupport.check import _core, ch01, ch02, ch03, ch05, ch06

from tests.check.test_ch01 import GOOD_Q4 as GOOD_Q4_CH01
from tests.check.test_ch02 import GOOD as GOOD_Q3_CH02
from tests.check.test_ch02 import parse_idx
from tests.check.test_ch03_wrong_answers_and_hints import exercise_2
from tests.check.test_ch05 import ring_reduce_scatter

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(autouse=True)
def _fixed_inputs(monkeypatch):
    monkeypatch.setenv("LABSUPPORT_CHECK_SEED", "issue-29")
    _core.reset()


def _twice(check, answer):
    first, second = check(answer), check(answer)
    assert first.status == second.status == "failed", first.message
    return first, second


def test_ch01_q4_names_the_extra_options_and_counts_the_missing_ones_of_each_part(capsys):
    wrong = {**GOOD_Q4_CH01, "checks": ["fingerprint", "loss_curve"], "fixes": ["ship_model", "guard", "temperature"]}
    first, second = _twice(ch01.q4, lambda: dict(wrong))
    assert "checks: 'loss_curve' would not reveal a tokenizer problem; and 3 useful check(s) missing" \
        in first.message, first.message
    assert "fixes: 'temperature' neither remove the cause" in first.message and "1 fix(es) missing" \
        in first.message
    assert "special_ids" not in first.message and "reprocess" not in first.message     # no key given away
    assert second.message == first.message and second.hint != first.hint                # the question's next tier
    capsys.readouterr()


def test_ch03_q4_names_the_extra_options_and_counts_the_missing_ones(capsys):
    def answer(t, c, w):                    # one right option of (a) swapped for a wrong one
        right = exercise_2(t, c, w)
        return {**right, "a": list(right["a"])[1:] + ["no_effect"]}
    first, second = _twice(ch03.q4, answer)
    assert "(a): you chose 'no_effect', which this part's question does not ask for; and 1 right option of this " \
           "part missing" in first.message, first.message
    assert second.message == first.message
    capsys.readouterr()


def test_ch01_q3_says_each_wrong_field_once(capsys):
    from tests.check.test_feedback_orientation_tokenizer_indexed import PLANTED
    wrong = PLANTED[("ch01", "q3", "verdict_not_from_fingerprint")][0]
    first, second = _twice(ch01.q3, wrong)
    assert first.message.count("verdict =") == 1 and "(also: verdict" not in first.message, first.message
    capsys.readouterr()


def test_ch02_q1_header_says_in_one_sentence_that_an_array_read_crashed(capsys):
    def header_then_bad_array(raw):
        got = parse_idx(raw)
        got["sequence_lengths"] = np.frombuffer(raw[:7], "<i8")            # an array read that crashes
        return got
    for _ in range(2):
        ch02.q1_header(header_then_bad_array)
        out = capsys.readouterr().out
        assert out.startswith("❌ step 1 of q1: parse_idx crashed in one of its three array reads after the"), out
        assert "ValueError" in out and out.count("\n") == 1


def test_ch02_q3_a_swapped_mapping_gets_no_padding_hint(capsys):
    swapped = {**GOOD_Q3_CH02, "problems": {"cpu": "idx_pointers", "random_access": "tokenize_once", "memory": "mmap"}}
    first, second = _twice(ch02.q3, lambda: dict(swapped))
    assert first.mistake == "solutions_swapped" and "padding" not in first.hint + second.hint
    assert first.hint.endswith("?") and "mmap reads only the pages" in second.hint
    capsys.readouterr()


def _headings_with_text(notebook: str) -> dict[str, str]:
    """Each '## ' section of a notebook: its heading → the text of its markdown cells."""
    sections, current = {}, ""
    for cell in json.loads((ROOT / "notebooks" / notebook).read_text(encoding="utf-8"))["cells"]:
        text = "".join(cell["source"])
        if cell["cell_type"] == "markdown" and text.startswith("## "):
            current = text.splitlines()[0][3:].strip()
        if cell["cell_type"] == "markdown":
            sections[current] = sections.get(current, "") + text
    return sections


def test_ch06_q2_sends_the_learner_to_the_section_that_teaches_the_global_batch():
    cited = re.findall(r"chapter 6's '([^']+)'", ch06.q2.hint[0])
    sections = _headings_with_text("06_end_to_end.ipynb")
    teaching = [h for h, text in sections.items() if "**global batch**" in text]
    assert cited and teaching and all(any(h.startswith(c) for h in teaching) for c in cited), (cited, teaching)


def test_ch06_q3_a_wrong_fix_says_the_fix_is_wrong_and_shows_the_log_on_one_line(capsys):
    from tests.check.test_feedback_training import PLANTED
    first, second = _twice(ch06.q3, PLANTED[("q3", "wrong_fix_padding")][0])
    assert first.message.startswith("diagnose(log): the suspect 'padding' is right (real_token_share = ")
    assert "the fix 'mmap' is what is wrong" in first.message and "— log = {data_share: " in first.message
    assert "{'" not in first.message and "\n" not in first.message                     # no dict repr
    assert second.hint != first.hint
    capsys.readouterr()


def test_ch03_q1_float_rounding_leads_with_rounding_and_shows_short_numbers(capsys):
    from tests.check.test_feedback_blending_packing_collectives import PLANTED
    first, second = _twice(ch03.q1, PLANTED[ch03][("q1", "float_order")][0])
    head = first.message.split("Computed")[0]
    assert "a difference of rounding" in head, first.message
    assert not re.search(r"\d\.\d{8,}", first.message), first.message                  # no 17-digit floats
    assert second.hint != first.hint
    capsys.readouterr()


def _ffd_argsort_reversed(lengths, pack_size):
    """The learner's first-fit decreasing as reported: np.argsort(lengths)[::-1] (ties reversed, and numpy's
    default sort is not stable), every pack lengths-right."""
    bins, room = [], []
    for i in (int(i) for i in np.argsort(lengths)[::-1]):
        fits = [b for b in range(len(bins)) if room[b] >= lengths[i]]
        if fits:
            bins[fits[0]].append(i)
            room[fits[0]] -= lengths[i]
        else:
            bins.append([i])
            room.append(pack_size - lengths[i])
    return bins


def test_ch04_q2_argsort_reversed_names_the_tie_order_then_the_stable_sort():
    from labsupport.check import ch04

    first, second = _twice(ch04.q2, _ffd_argsort_reversed)
    assert "same packs" not in first.message
    assert re.search(r"examples (\d+) and (\d+) are equally long \(\d+ tokens?\), and your packs take \2 before \1",
                     first.message), first.message
    assert "which one does NeMo's sort take first" in first.hint and "stable" not in first.hint
    assert "index order" in second.hint and 'kind="stable"' in second.hint and "[::-1]" in second.hint


def test_ch04_q3_a_right_step_1_is_not_a_failure(capsys):
    from tests.check.test_hint_tiers import _positions_and_mask
    from labsupport.check import ch04
    half = ch04.q3(lambda t, e: (_positions_and_mask()(t, e)[0], None))
    assert half.status == "not attempted" and half.hint == ""
    assert capsys.readouterr().out.startswith("🟡 q3 not attempted — step 1 done")


def test_ch05_q1_states_the_ring_count_its_notebook_shows(capsys):
    result = ch05.q1(ring_reduce_scatter)
    assert result.passed and result.message.startswith(f"{ch05.Q1_RINGS} random rings")
    assert ch05.q1(lambda buffers: ring_reduce_scatter(buffers)).message.startswith(f"{ch05.Q1_RINGS} random rings")
    stored = (ROOT / "solutions" / "05_nccl_collectives.ipynb").read_text(encoding="utf-8")
    assert f"q1 passed — {ch05.Q1_RINGS} random rings" in stored
    capsys.readouterr()
