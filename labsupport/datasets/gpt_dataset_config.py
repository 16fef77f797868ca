"""The knobs of a GPT pre-training dataset, as one object — chapter 4 (packing and masks; chapters
3 and 6 build their datasets with it).

:class:`GPTDatasetConfig` plays the part of megatron-core's
``megatron.core.datasets.gpt_dataset.GPTDatasetConfig``: one frozen config shared by every
:class:`~labsupport.datasets.gpt_samples.GPTDataset` of a blend, while what differs per dataset
(the indexed file, its split's sequence indices, the samples wanted, the index cache entry) is
passed to the dataset itself.  The names follow this workbook's YAML; megatron-core's are in the
comments.  A value that cannot work is refused at construction (``ValueError`` naming the field).
"""
from __future__ import annotations

from dataclasses import dataclass

__all__ = ["GPTDatasetConfig", "NO_PAD"]

#: Megatron's "no pad token" value (``megatron_dataset._PAD_TOKEN_ID``).
NO_PAD = -1


@dataclass(frozen=True, kw_only=True)
class GPTDatasetConfig:
    """How a GPTDataset cuts samples and marks document boundaries (keyword-only: three booleans
    in a row are too easy to swap).

    ``seq_length`` S tokens per sample (> 1); ``seed`` the shuffle's seed; ``eod_token`` the
    tokenizer's end-of-document id; the three boundary flags of chapter 4; ``pad_token`` the
    tokenizer's pad id (Megatron zeroes it in tokens/labels and masks its loss; -1 = none, and a
    pad equal to ``eod_token`` counts as none, as in Megatron); ``drop_last_partial_sequence`` and
    ``add_extra_token`` as in Megatron; ``create_attention_mask`` adds the dense (1, S, S) mask;
    ``inter_document_masking`` is megatron-core ≥ 0.19's option (boundaries from the index).
    Chapter 6's fast start (megatron-core's ``BlendedMegatronDatasetConfig`` fields, both needing
    an index cache: :mod:`labsupport.datasets.fast_start`): ``fast_cache_load`` trusts a cache
    entry after O(1) checks (dtype, shape, the corpus's file sizes) instead of hashing the corpus
    and the arrays; ``defer_npy_index_mmap`` opens the ``.npy`` files at the first sample, not at
    construction (the length comes from the index arithmetic).
    """

    seq_length: int                              # sequence_length
    seed: int                                    # random_seed
    eod_token: int                               # tokenizer.eod
    reset_position_ids: bool
    reset_attention_mask: bool
    eod_mask_loss: bool
    pad_token: int = NO_PAD                      # tokenizer.pad
    drop_last_partial_sequence: bool = True      # drop_last_partial_validation_sequence
    add_extra_token: bool = True                 # add_extra_token_to_sequence
    create_attention_mask: bool = False
    inter_document_masking: bool = False         # megatron-core ≥ 0.19
    fast_cache_load: bool = False                # --dataloader-fast-cache-load
    defer_npy_index_mmap: bool = False           # --dataloader-defer-npy-index-mmap

    def __post_init__(self) -> None:
        if int(self.seq_length) <= 1:
            raise ValueError(f"seq_length must be > 1, got {self.seq_length}")
