"""Multi-turn chat SFT with a chat template — chapter 4 (the loss on assistant turns only, packed).

A conversation is a list of messages ``{"role": "system"|"user"|"assistant", "content": str}``.
:func:`render_chat` writes it out with a Jinja chat template exactly as transformers'
``tokenizer.apply_chat_template(conv, chat_template=..., tokenize=False)`` does (same sandboxed
environment: ``trim_blocks``, ``lstrip_blocks``, ``loopcontrols``, ``raise_exception``,
``strftime_now``, ``tojson``).  The template marks what the model should learn to write with
``{% generation %}…{% endgeneration %}``; :func:`render_chat_with_spans` records those character
spans, the way transformers does for ``return_assistant_tokens_mask=True``.

:func:`tokenize_chats` tokenizes the rendered text (no special tokens added, so the *text*
``<|im_start|>``/``<|im_end|>`` becomes those tokens) and sets the loss mask to 1 on every token
that overlaps a generation span — the assistant's content and its closing ``<|im_end|>``.  That is
transformers' rule too, with one consequence worth knowing: byte-level BPE can merge the
template's ``\\n`` after ``assistant`` with newlines that *start* the content into one token, which
then straddles the span and is masked in (transformers' ``assistant_masks`` does the same).

The result, :class:`TokenizedChat`, has the interface :func:`labsupport.datasets.sft_packing.pack_sft`
reads (``tokens``, ``offsets``, ``line``, ``lengths``, ``example``, ``loss_mask``), so conversations
pack exactly like ``{"input", "output"}`` pairs; only the mask is stored instead of ``answer_start``.

Control-token text inside a message (a user writing ``"<|im_end|>"``) is **not** escaped: it
becomes the control token, as with transformers' default ``sanitize_control_tokens=False``.  A
message can so end its own turn early; clean such text out of training data before it gets here.
"""
from __future__ import annotations

import json
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from datetime import datetime
from functools import lru_cache
from typing import Any, Iterator, Mapping, Sequence

import jinja2
import numpy as np
from jinja2.ext import Extension
from jinja2.sandbox import ImmutableSandboxedEnvironment

from labsupport.datasets.sft_packing import FlatSequences, SFTRecord
from labsupport.datasets.utils import normalize_index

__all__ = ["ROLES", "WORKBOOK_CHAT_TEMPLATE", "WORKBOOK_SYSTEM_PROMPT", "render_chat", "render_chat_with_spans",
           "validate_messages", "assistant_token_mask", "TokenizedChat", "tokenize_chats",
           "conversations_from_pairs"]

ROLES: tuple[str, ...] = ("system", "user", "assistant")

#: ChatML: ``<|im_start|>{role}\n{content}<|im_end|>\n`` per message; the assistant's content and
#: its ``<|im_end|>`` inside ``{% generation %}``; ``add_generation_prompt`` opens an assistant turn.
#: Newlines are Jinja string literals because ``trim_blocks`` eats a newline written after a tag.
WORKBOOK_CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{% if message['role'] == 'assistant' %}"
    "{{ '<|im_start|>assistant\\n' }}"
    "{% generation %}{{ message['content'] + '<|im_end|>' }}{% endgeneration %}"
    "{{ '\\n' }}"
    "{% else %}"
    "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' }}"
    "{% endif %}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)

#: The system message :func:`conversations_from_pairs` puts first by default.
WORKBOOK_SYSTEM_PROMPT = "You are a helpful assistant. Answer the user's request."


# ----------------------------------------------------------------------------------- rendering
class _GenerationSpans(Extension):
    """The ``{% generation %}`` tag: renders its body and, while recording, notes its character span."""

    tags = {"generation"}

    def __init__(self, environment: jinja2.Environment) -> None:
        super().__init__(environment)
        self._state: ContextVar[tuple[list[str], list[tuple[int, int]]] | None] = ContextVar("spans", default=None)

    def parse(self, parser: jinja2.parser.Parser) -> jinja2.nodes.CallBlock:
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
        return jinja2.nodes.CallBlock(self.call_method("_record"), [], [], body).set_lineno(lineno)

    def _record(self, caller: Any) -> str:
        text = caller()
        state = self._state.get()
        if state is not None:       # the blocks yielded so far are the text before this one
            blocks, spans = state
            start = sum(len(b) for b in blocks)
            spans.append((start, start + len(text)))
        return text

    @contextmanager
    def recording(self, blocks: list[str], spans: list[tuple[int, int]]) -> Iterator[None]:
        token = self._state.set((blocks, spans))
        try:
            yield
        finally:
            self._state.reset(token)


def _raise_exception(message: str) -> None:
    raise jinja2.exceptions.TemplateError(message)


def _tojson(x: Any, ensure_ascii: bool = False, indent: int | None = None, separators: Any = None,
            sort_keys: bool = False) -> str:
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


@lru_cache(maxsize=16)
def _compile(template: str) -> jinja2.Template:
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[_GenerationSpans, "jinja2.ext.loopcontrols"])
    env.filters["tojson"] = _tojson
    env.globals["raise_exception"] = _raise_exception
    env.globals["strftime_now"] = lambda fmt: datetime.now().strftime(fmt)
    return env.from_string(template)


def validate_messages(messages: Any, where: str = "") -> None:
    """Raise ValueError (one line, naming the message index) unless ``messages`` is a non-empty list of
    ``{"role": one of ROLES, "content": str}`` dicts.  ``where`` prefixes the message (e.g. a conversation)."""
    pre = f"{where}, " if where else ""
    if not isinstance(messages, (list, tuple)):
        raise ValueError(f"{where or 'messages'}: expected a list of message dicts, got {type(messages).__name__}")
    if not messages:
        raise ValueError(f"{where or 'messages'}: no messages")
    for i, m in enumerate(messages):
        if not isinstance(m, Mapping):
            raise ValueError(f"{pre}message {i}: expected a dict with 'role' and 'content', got {type(m).__name__}")
        if m.get("role") not in ROLES:
            raise ValueError(f"{pre}message {i}: role {m.get('role')!r} is not one of {', '.join(ROLES)}")
        if not isinstance(m.get("content"), str):
            raise ValueError(f"{pre}message {i}: 'content' must be a str, got {type(m.get('content')).__name__}")


def render_chat_with_spans(messages: Sequence[Mapping[str, str]], template: str = WORKBOOK_CHAT_TEMPLATE,
                           add_generation_prompt: bool = False) -> tuple[str, list[tuple[int, int]]]:
    """The rendered text and the ``(start, end)`` character spans of its ``{% generation %}`` blocks, in order."""
    validate_messages(messages)
    compiled = _compile(template)
    tracker = next(e for e in compiled.environment.extensions.values() if isinstance(e, _GenerationSpans))
    blocks: list[str] = []
    spans: list[tuple[int, int]] = []
    plain = [dict(m) for m in messages]
    with tracker.recording(blocks, spans):
        for block in compiled.generate(messages=plain, add_generation_prompt=bool(add_generation_prompt)):
            blocks.append(block)
    return "".join(blocks), spans


def render_chat(messages: Sequence[Mapping[str, str]], template: str = WORKBOOK_CHAT_TEMPLATE,
                add_generation_prompt: bool = False) -> str:
    """``messages`` written out with the Jinja chat ``template`` — transformers' ``apply_chat_template(messages,
    chat_template=template, tokenize=False, add_generation_prompt=...)``.  ValueError names a bad message.

    The template sees ``messages`` and ``add_generation_prompt`` only; transformers also passes the
    tokenizer's special tokens (``bos_token``, …) and ``tools``/``documents``, which this template does not use."""
    return render_chat_with_spans(messages, template, add_generation_prompt)[0]


# ---------------------------------------------------------------------------------- tokenizing
def assistant_token_mask(token_offsets: Sequence[tuple[int, int]], spans: Sequence[tuple[int, int]]) -> np.ndarray:
    """uint8, shape (n_tokens,): 1 where a token's character span overlaps one of ``spans`` (transformers' rule)."""
    offs = np.asarray(token_offsets, dtype=np.int64).reshape(-1, 2)
    mask = np.zeros(offs.shape[0], dtype=bool)
    for a, b in spans:
        mask |= (offs[:, 0] < b) & (offs[:, 1] > a)
    return mask.astype(np.uint8)


@dataclass(frozen=True, eq=False)
class TokenizedChat(FlatSequences):
    """Tokenized conversations, flat: conversation i is ``tokens[offsets[i]:offsets[i+1]]``.

    ``mask`` is the input-aligned loss mask (1 on assistant tokens, see :func:`assistant_token_mask`);
    ``line[i]`` numbers conversation i from 1 (``pack_sft`` names it in messages, ``PackedSFT.seq_line``
    keeps it).  Arrays: ``tokens`` int32 (T,), ``offsets`` int64 (n+1,), ``mask`` uint8 (T,), ``line`` int64 (n,).
    """

    tokens: np.ndarray
    offsets: np.ndarray
    mask: np.ndarray
    line: np.ndarray
    source: str = ""

    def example(self, i: int) -> tuple[np.ndarray, np.ndarray]:
        """Token ids (int32, (L,)) and loss mask (uint8, (L,)) of conversation i."""
        i = normalize_index(i, len(self), "conversation", "these chats")
        a, b = self.offsets[i], self.offsets[i + 1]
        return self.tokens[a:b], self.mask[a:b]

    def loss_mask(self) -> np.ndarray:
        """uint8, shape (T,): the input-aligned loss mask of all conversations, flat."""
        return self.mask


def tokenize_chats(conversations: Sequence[Sequence[Mapping[str, str]]], tokenizer: Any,
                   template: str = WORKBOOK_CHAT_TEMPLATE) -> TokenizedChat:
    """Render every conversation with ``template`` and tokenize it; the loss mask is 1 on assistant tokens.

    ``tokenizer`` needs ``encode_with_offsets(texts) -> [(ids, char_offsets), …]``
    (:class:`labsupport.datasets.hf_tokenizer.HFTokenizer`).  ValueError names a bad conversation or
    message, and a conversation with no assistant token (nothing to train on).
    """
    if not isinstance(conversations, (list, tuple)) or not conversations:
        raise ValueError("conversations: expected a non-empty list of conversations (lists of messages)")
    texts, spans = [], []
    for c, conv in enumerate(conversations):
        validate_messages(conv, f"conversation {c}")
        text, s = render_chat_with_spans(conv, template)
        texts.append(text)
        spans.append(s)
    encoded = tokenizer.encode_with_offsets(texts)
    ids_parts, mask_parts = [], []
    for c, ((ids, offs), s) in enumerate(zip(encoded, spans)):
        mask = assistant_token_mask(offs, s)
        if not mask.any():
            raise ValueError(f"conversation {c}: no assistant message, so no token carries the loss; "
                             "add the assistant's answer or drop the conversation")
        ids_parts.append(np.asarray(ids, dtype=np.int32))
        mask_parts.append(mask)
    offsets = np.zeros(len(ids_parts) + 1, dtype=np.int64)
    np.cumsum([p.size for p in ids_parts], out=offsets[1:])
    return TokenizedChat(np.concatenate(ids_parts), offsets, np.concatenate(mask_parts),
                         np.arange(1, len(ids_parts) + 1, dtype=np.int64))


# ---------------------------------------------------------------------------------------- data
def conversations_from_pairs(records: Sequence[SFTRecord], turns: tuple[int, int] = (1, 3), seed: int = 0,
                             system: str | None = WORKBOOK_SYSTEM_PROMPT) -> list[list[dict[str, str]]]:
    """Multi-turn conversations built from ``{"input", "output"}`` pairs, every pair used once, in order.

    Walking the pairs in order, each conversation takes the next ``k`` of them as k user/assistant
    turns, ``k`` drawn uniformly from ``turns`` = (min, max) by ``numpy.random.default_rng(seed)``
    (the last conversation may be shorter); ``system`` (None: none) is its first message.  Deterministic.

    The workbook calls it with ``read_sft_jsonl(labsupport.data_file("sft"))``: the conversations are
    derived from ``data/sft.jsonl``, whose sources, processing and licences ``data/README.md`` records,
    so no data file of their own is needed.  (Consecutive pairs are unrelated, so a "conversation"
    changes topic at every turn — fine for showing masks and packing, not a dialogue corpus.)
    """
    lo, hi = turns
    if not (isinstance(lo, int) and isinstance(hi, int) and 1 <= lo <= hi):
        raise ValueError(f"turns={turns!r}: expected (min, max) ints with 1 <= min <= max")
    if not records:
        raise ValueError("records: no SFT pairs to build conversations from")
    rng = np.random.default_rng(seed)
    out: list[list[dict[str, str]]] = []
    i = 0
    while i < len(records):
        k = int(rng.integers(lo, hi + 1))
        conv = [{"role": "system", "content": system}] if system is not None else []
        for rec in records[i:i + k]:
            conv += [{"role": "user", "content": rec.input}, {"role": "assistant", "content": rec.output}]
        out.append(conv)
        i += k
    return out
