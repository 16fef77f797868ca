"""labsupport.training.trace: every occurrence found really holds the document's tokens, and
every document of a sample is traced back to it."""
from __future__ import annotations

import numpy as np

from labsupport.training.data import build_blend
from labsupport.training.settings import load_settings
from labsupport.training.trace import documents_in_sample, trace_document
from labsupport.training.trainer import train


def test_trace_finds_the_tokens_and_the_loss_share():
    settings = load_settings(overrides=["trainer.max_steps=4"])
    blend = build_blend(settings)
    result = train(settings, keep_token_losses=True, show_progress=False)
    checked = 0
    for i in (0, 5, 13, 30):
        d, docs = documents_in_sample(blend, i)
        for doc in docs:
            t = trace_document(blend, settings, settings.names[d], doc, result)
            assert i in [o.blend_index for o in t.occurrences]
            ids = t.token_ids
            assert ids[-1] == 3  # EOD of the workbook tokenizer
            for o in t.occurrences:
                toks = blend[o.blend_index]["tokens"][o.span[0]:o.span[1]].tolist()
                assert any(ids[j:j + len(toks)] == toks for j in range(len(ids) - len(toks) + 1))
                assert o.step == o.blend_index // settings.config.model.global_batch_size + 1
                if o.loss_share is not None:
                    assert 0 < o.loss_share < 1
                checked += 1
    assert checked >= 4
    # the shares of all spans of one sample add up to that sample's share of the step's loss
    i = 1
    d, docs = documents_in_sample(blend, i)
    shares = [o.loss_share for doc in set(docs)
              for o in trace_document(blend, settings, settings.names[d], doc, result).occurrences
              if o.blend_index == i]
    step_total = sum(float(result.token_losses[j].sum()) for j in range(8))
    np.testing.assert_allclose(sum(shares), float(result.token_losses[i].sum()) / step_total, rtol=1e-5)
