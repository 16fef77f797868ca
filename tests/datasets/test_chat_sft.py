"""labsupport.datasets.chat_sft (chapter 4): the chat template's text, the loss mask on assistant turns
only, bad messages refused by index, conversations built from sft.jsonl, and packed conversations
computing exactly the per-token losses of each conversation alone."""
from __future__ import annotations

import numpy as np
import pytest
import torch

import labsupport
from labsupport.datasets import chat_sft as cs
from labsupport.datasets import sft_packing as sp
from labsupport.datasets.hf_tokenizer import HFTokenizer, workbook_hf_tokenizer
from labsupport.models.packed_losses import packed_token_losses, separate_token_losses
from labsupport.models.tiny_lm import TinyCausalLM

TWO_TURNS = [
    {"role": "system", "content": "Be brief."},
    {"role": "user", "content": "Hi"},
    {"role": "assistant", "content": "Hello!"},
    {"role": "user", "content": "2+2?"},
    {"role": "assistant", "content": "4"},
]


@pytest.fixture(scope="module")
def tok():
    return HFTokenizer(workbook_hf_tokenizer())


@pytest.fixture(scope="module")
def records():
    return sp.read_sft_jsonl(labsupport.data_file("sft"))


def test_template_renders_chatml_exactly():
    expected = ("<|im_start|>system\nBe brief.<|im_end|>\n"
                "<|im_start|>user\nHi<|im_end|>\n"
                "<|im_start|>assistant\nHello!<|im_end|>\n"
                "<|im_start|>user\n2+2?<|im_end|>\n"
                "<|im_start|>assistant\n4<|im_end|>\n")
    assert cs.render_chat(TWO_TURNS) == expected
    assert cs.render_chat(TWO_TURNS[:4], add_generation_prompt=True) == (
        expected[:expected.index("<|im_start|>assistant\n4")] + "<|im_start|>assistant\n")
    text, spans = cs.render_chat_with_spans(TWO_TURNS)
    assert [text[a:b] for a, b in spans] == ["Hello!<|im_end|>", "4<|im_end|>"]


def test_loss_mask_is_exactly_the_assistant_turns(tok):
    data = cs.tokenize_chats([TWO_TURNS], tok)
    ids, mask = data.example(0)
    assert ids.dtype == np.int32 and mask.dtype == np.uint8 and ids.shape == mask.shape
    assert tok.decode(ids) == cs.render_chat(TWO_TURNS)
    # each run of masked tokens decodes to one assistant content plus its <|im_end|>
    edges = np.flatnonzero(np.diff(np.concatenate([[0], mask, [0]])))
    runs = [tok.decode(ids[a:b]) for a, b in zip(edges[::2], edges[1::2])]
    assert runs == ["Hello!<|im_end|>", "4<|im_end|>"]
    assert int(ids[mask == 1][-1]) == 4 and np.count_nonzero(ids[mask == 1] == 4) == 2   # <|im_end|> is id 4


def test_user_and_system_tokens_are_never_masked_in(tok, records):
    convs = cs.conversations_from_pairs(records[:60], seed=3)
    data = cs.tokenize_chats(convs, tok)
    for i, conv in enumerate(convs):
        ids, mask = data.example(i)
        masked_text = tok.decode(ids[mask == 1])
        expected = "".join(m["content"] + "<|im_end|>" for m in conv if m["role"] == "assistant")
        assert masked_text == expected
        assert "<|im_start|>" not in masked_text
    assert data.loss_mask().size == data.tokens.size and (data.train_lengths == data.lengths - 1).all()


@pytest.mark.parametrize(("messages", "match"), [
    ([{"role": "user", "content": "a"}, {"role": "bot", "content": "b"}], r"message 1: role 'bot'"),
    ([{"role": "user", "content": "a"}, {"role": "assistant", "content": None}], r"message 1: 'content' must"),
    ([{"role": "user", "content": "a"}, "hello"], r"message 1: expected a dict"),
    ([{"content": "a"}], r"message 0: role None"),
    ([], r"no messages"),
    ("hello", r"expected a list"),
])
def test_bad_messages_are_refused_naming_the_index(messages, match):
    with pytest.raises(ValueError, match=match):
        cs.render_chat(messages)


def test_tokenize_names_the_bad_conversation(tok):
    with pytest.raises(ValueError, match=r"conversation 1, message 0: role 'robot'"):
        cs.tokenize_chats([TWO_TURNS, [{"role": "robot", "content": "x"}]], tok)
    with pytest.raises(ValueError, match=r"conversation 0: no assistant message"):
        cs.tokenize_chats([TWO_TURNS[:2]], tok)


def test_conversations_from_pairs_is_deterministic_and_uses_every_pair_once(records):
    convs = cs.conversations_from_pairs(records, turns=(1, 3), seed=0)
    assert convs == cs.conversations_from_pairs(records, turns=(1, 3), seed=0)
    assert convs != cs.conversations_from_pairs(records, turns=(1, 3), seed=1)
    pairs = [(u["content"], a["content"]) for c in convs for u, a in zip(c[1::2], c[2::2])]
    assert pairs == [(r.input, r.output) for r in records]
    assert all(c[0] == {"role": "system", "content": cs.WORKBOOK_SYSTEM_PROMPT} for c in convs)
    turns = [(len(c) - 1) // 2 for c in convs]
    assert set(turns[:-1]) == {1, 2, 3} and 1 <= turns[-1] <= 3
    bare = cs.conversations_from_pairs(records[:5], turns=(2, 2), system=None)
    assert [len(c) for c in bare] == [4, 4, 2] and bare[0][0]["role"] == "user"
    with pytest.raises(ValueError, match=r"turns=\(0, 3\)"):
        cs.conversations_from_pairs(records, turns=(0, 3))


@pytest.mark.parametrize("seed", [0, 1])
def test_packed_conversations_compute_the_losses_of_each_alone(tok, records, seed):
    convs = cs.conversations_from_pairs(records[:120], seed=seed)
    data = cs.tokenize_chats(convs, tok)
    short = [i for i in range(len(data)) if data.lengths[i] <= 300][:12]
    data = cs.tokenize_chats([convs[i] for i in short], tok)
    packed = sp.pack_sft(data, 600)
    assert len(packed) >= 2 and packed.seq_start_id.size == len(data)
    torch.manual_seed(seed)
    model = TinyCausalLM(vocab_size=tok.vocab_size, max_positions=1024).double().eval()
    with torch.no_grad():
        for k in range(len(packed)):
            together, mask = packed_token_losses(model, packed, k)
            alone, mask_alone = separate_token_losses(model, data, packed, k)
            assert torch.equal(mask, mask_alone) and mask.sum() > 0
            on = mask.bool()
            assert torch.allclose(together[on], alone[on], rtol=0, atol=1e-10)
    # the check has teeth: without the boundary mask the later conversations' losses change
    view = packed.training_view(0)
    with torch.no_grad():
        leaked = model(view["tokens"].reshape(1, -1), view["position_ids"].reshape(1, -1))[0]
    leaked = torch.nn.functional.cross_entropy(leaked, view["labels"], reduction="none")
    first = int(view["cu_seqlens"][1])
    assert (leaked[first:] - separate_token_losses(model, data, packed, 0)[0][first:]).abs().max() > 1e-3


def test_truncated_conversations_count_those_left_without_loss(tok):
    long_user = [{"role": "user", "content": "word " * 80}, {"role": "assistant", "content": "ok"}]
    data = cs.tokenize_chats([TWO_TURNS, long_user], tok)
    packed = sp.pack_sft(data, 30, too_long="truncate")
    assert packed.stats["truncated"] >= 1 and packed.stats["truncated_without_answer"] == 1


def test_encode_with_offsets_gives_character_spans(tok):
    text = "<|im_start|>안녕 hi"
    [(ids, offsets)] = tok.encode_with_offsets([text])
    assert ids == tok.encode(text) and ids[0] == 3 and offsets[0] == (0, 12)
    assert {offsets[i] for i in range(1, len(ids)) if text[offsets[i][0]:offsets[i][1]] == "녕"} == {(13, 14)}
    assert cs.assistant_token_mask(offsets, [(13, 14)]).tolist() == [int(o == (13, 14)) for o in offsets]
