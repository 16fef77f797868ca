"""labsupport.training.symptoms: each injected bug shows its symptom and each fix removes it
(the cheap rows; the training-based rows run in the chapter notebook)."""
from __future__ import annotations

import pytest

from labsupport.datasets.tokenizer import Tokenizer, workbook_tokenizer
from labsupport.training import symptoms as S
from labsupport.training.data import NaiveTextDataset, build_blend
from labsupport.training.settings import load_settings


@pytest.fixture(scope="module")
def setup():
    settings = load_settings(overrides=["trainer.max_steps=4"])
    return settings, build_blend(settings)


def test_boundary_mask_removes_cross_document_attention(setup):
    settings, _ = setup
    pairs = S.cross_document_pairs(settings, list(range(8)), Tokenizer(settings.tokenizer_path).eod)
    assert pairs["mask on"] == 0.0 < pairs["mask off"]


def test_mmap_reads_a_small_part_of_the_corpus(setup):
    settings, blend = setup
    mem = S.memory_footprint(settings, blend, list(range(8)))
    assert 0 < mem["mmap_bytes"] < mem["corpus_bytes"] / 10
    assert mem["mmap_bytes"] % S.PAGE_BYTES == 0


def test_memory_as_the_corpus_grows(setup, tmp_path):
    """Loading grows with the corpus; the pages one step reads through mmap do not."""
    settings, blend = setup
    rows = S.memory_as_corpus_grows(settings, [1, 3, 9], tmp_path)
    base = S.memory_footprint(settings, blend, list(range(settings.config.model.global_batch_size)))
    assert [r["copies"] for r in rows] == [1, 3, 9]
    assert rows[0]["corpus_bytes"] == base["corpus_bytes"]
    assert [r["corpus_bytes"] for r in rows] == [k * base["corpus_bytes"] for k in (1, 3, 9)]
    assert all(r["mmap_bytes"] <= 2 * base["mmap_bytes"] for r in rows)
    from labsupport.datasets.indexed import IndexedDataset

    grown = IndexedDataset(str(tmp_path / f"x3_{settings.names[0]}_text_document"))
    original = IndexedDataset(settings.prefixes[0])
    assert grown.num_documents == 3 * original.num_documents
    assert (grown.document(original.num_documents) == original.document(0)).all()


def test_another_tokenizer_garbles_and_the_config_refuses_it(setup):
    settings, blend = setup
    other = workbook_tokenizer(4000)
    mm = S.tokenizer_mismatch(settings, other, blend[0])
    assert mm["same"] != mm["other"]
    assert mm["refusal"].startswith("model.data.data_prefix 'work/indexed/web_text_document' "
                                    "was tokenized with tokenizer")


def test_naive_rows_are_one_padded_document(setup):
    settings, blend = setup
    tok = Tokenizer(settings.tokenizer_path)
    naive = NaiveTextDataset([["short text"], ["x = 1"], ["a book"], ["한국어"]], tok, 64, blend)
    row = naive[0]
    real = int(row["loss_mask"].sum())          # positions that predict a document token or its EOD
    assert 0 < real < 64 and row["loss_mask"][:real].eq(1).all()
    assert row["tokens"][real] == tok.eod and row["tokens"][real + 1:].eq(0).all()
    assert row["labels"][real - 1] == tok.eod


def test_loader_and_padding_reports_the_spread_per_step():
    from labsupport.training.settings import load_settings
    from labsupport.training.symptoms import loader_and_padding

    s = load_settings(overrides=["trainer.max_steps=4", "model.micro_batch_size=2", "model.global_batch_size=2",
                                 "model.hidden_size=32", "model.ffn_hidden_size=64", "model.encoder_seq_length=512"])
    out = loader_and_padding(s, 4)
    packed, padded = out["indexed + packed"], out["tokenize + pad"]
    assert packed["real_token_share"] == 1.0 and 0 < padded["real_token_share"] < 1.0
    for r in (packed, padded):
        assert len(r["step_tokens_per_s"]) == len(r["step_useful_tokens_per_s"]) == 3     # steps 2…4
        assert all(u <= t + 1e-9 for t, u in zip(r["step_tokens_per_s"], r["step_useful_tokens_per_s"]))
        assert min(r["step_tokens_per_s"]) <= r["tokens_per_s"] <= max(r["step_tokens_per_s"]) * (1 + 1e-9)


def test_symptom_logs_have_one_field_sick():
    import numpy as np

    rng = np.random.default_rng(0)
    for _ in range(20):
        log = S.healthy_log(rng)
        assert all(lo <= log[f] <= hi for f, (lo, hi) in S.HEALTHY_RANGES.items())
        assert log["attention_path"] in S.ATTENTION_PATHS and log["decode_roundtrip_ok"] is True
    for field in S.SICK_VALUES:
        log = S.symptom_log(field, np.random.default_rng(1))
        assert log[field] is False if field == "decode_roundtrip_ok" else \
            S.SICK_RANGES[field][0] <= log[field] <= S.SICK_RANGES[field][1]
        assert S.sick_log(field)[field] == S.SICK_VALUES[field]
    mixed = S.symptom_log("cross_document_attention", np.random.default_rng(2))
    assert mixed["attention_path"] == "fused" or mixed["reset_attention_mask"] is False
    assert S.sick_log("cross_document_attention")["reset_attention_mask"] is False           # unfused: flag off
    assert S.sick_log("cross_document_attention", "fused", True)["reset_attention_mask"] is True
    assert S.sick_log("data_share", "fused", False)["attention_path"] == "unfused"             # calm path kept
