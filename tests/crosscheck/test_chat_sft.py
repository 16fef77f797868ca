"""labsupport.datasets.chat_sft (chapter 4) against transformers' ``apply_chat_template``: the same rendered
text, the same token ids and the same ``assistant_masks`` (``return_assistant_tokens_mask=True``), for
conversations built from sft.jsonl and for edge cases.

Edge cases and what both sides do: empty content renders as nothing between the header and
``<|im_end|>`` (an empty assistant turn still trains on its ``<|im_end|>``); Korean and other
multi-byte text is masked by characters, so every byte-level token of a character shares its mask;
content holding the *text* ``<|im_end|>`` becomes the control token (id 4) on both sides
(transformers' default ``sanitize_control_tokens=False``); content starting with newlines can merge
with the template's ``\\n`` into one token that straddles the assistant span and is masked in.
"""
from __future__ import annotations

import pytest

import labsupport
from labsupport.datasets import chat_sft as cs
from labsupport.datasets import sft_packing as sp
from labsupport.datasets.hf_tokenizer import HFTokenizer, workbook_hf_tokenizer

pytestmark = pytest.mark.crosscheck

EDGE_CASES = [
    [{"role": "user", "content": ""}, {"role": "assistant", "content": ""}],
    [{"role": "system", "content": "한국어로 답하세요."}, {"role": "user", "content": "데비안이 뭐예요?"},
     {"role": "assistant", "content": "데비안은 자유 운영체제입니다. 🐧 é"}],
    [{"role": "user", "content": "say <|im_end|> please"},
     {"role": "assistant", "content": "<|im_end|>ok<|im_start|>"}],
    [{"role": "user", "content": "x"}, {"role": "assistant", "content": "\n\n  leading\tand trailing  \n\n"}],
    [{"role": "assistant", "content": "first"}, {"role": "user", "content": "then"},
     {"role": "assistant", "content": "<|endoftext|>"}],
]


@pytest.fixture(scope="module")
def hf():
    transformers = pytest.importorskip("transformers", reason="`make setup-crosscheck` installs transformers")
    return transformers.AutoTokenizer.from_pretrained(str(workbook_hf_tokenizer()))


@pytest.fixture(scope="module")
def conversations():
    records = sp.read_sft_jsonl(labsupport.data_file("sft"))
    return cs.conversations_from_pairs(records[:130], seed=7)[:50] + EDGE_CASES


def test_rendered_text_equals_transformers(hf, conversations):
    for i, conv in enumerate(conversations):
        for gen in (False, True):
            theirs = hf.apply_chat_template(conv, chat_template=cs.WORKBOOK_CHAT_TEMPLATE, tokenize=False,
                                            add_generation_prompt=gen)
            assert cs.render_chat(conv, add_generation_prompt=gen) == theirs, f"conversation {i}"


def test_ids_and_assistant_mask_equal_transformers(hf, conversations):
    ours = cs.tokenize_chats(conversations, HFTokenizer(workbook_hf_tokenizer()))
    for i, conv in enumerate(conversations):
        out = hf.apply_chat_template(conv, chat_template=cs.WORKBOOK_CHAT_TEMPLATE, tokenize=True,
                                     return_dict=True, return_assistant_tokens_mask=True)
        ids, mask = ours.example(i)
        assert ids.tolist() == list(out["input_ids"]), f"conversation {i}"
        assert mask.tolist() == list(out["assistant_masks"]), f"conversation {i}"


def test_control_token_text_becomes_the_control_token(hf):
    conv = EDGE_CASES[2]
    ids, mask = cs.tokenize_chats([conv], HFTokenizer(workbook_hf_tokenizer())).example(0)
    im_end = hf.convert_tokens_to_ids("<|im_end|>")
    assert im_end == 4
    # 2 from the template, 1 in the user's text, 1 in the assistant's text
    assert ids.tolist().count(im_end) == 4
    assert [int(m) for t, m in zip(ids.tolist(), mask.tolist()) if t == im_end] == [0, 0, 1, 1]
