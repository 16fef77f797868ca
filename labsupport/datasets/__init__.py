"""The Megatron data path, module for module beside ``megatron.core.datasets`` (chapters 1–4, 6).

| module | chapter | what | Megatron-Core counterpart |
|---|---|---|---|
| ``bpe`` | 1 | byte-level BPE from scratch (the teaching version) | — |
| ``tokenizer`` | 1 | SentencePiece training, ``Tokenizer``, fingerprints | ``megatron.core.tokenizers`` |
| ``word_cache`` | 2 | the tokenizer's word cache and its proof (speed path of ``preprocess``) | — |
| ``indexed`` | 2 | ``.bin``/``.idx`` reader and builder (MMIDIDX) | ``datasets/indexed_dataset.py`` |
| ``preprocess`` | 2 | jsonl → ``.bin``/``.idx`` (the CLI's code) | ``tools/preprocess_data.py`` |
| ``blending`` | 3 | blending indices, ``BlendedDataset`` | ``datasets/blended_dataset.py`` |
| ``blending_numba`` | 3 | Megatron's blending loop, compiled by numba (default) | ``datasets/helpers.cpp`` |
| ``blending_numpy`` | 3 | numpy engine of the blending indices (no numba), proven equal | ``datasets/helpers.cpp`` |
| ``gpt_samples`` | 4 | GPT document/sample/shuffle indices, masks | ``datasets/gpt_dataset.py`` |
| ``bin_packing`` | 4 | bin-packing heuristics for SFT packing | NeMo ``sequence_packing_utils.py`` |
| ``sft_packing`` | 4 | SFT jsonl → packed sequences with ``cu_seqlens`` | NeMo ``prepare_packed_ft_dataset.py`` |
| ``utils`` | all | index normalisation shared by every indexable class | ``datasets/utils.py`` |

The fast paths live beside the readable versions they must equal (Megatron keeps its hot loops
in ``helpers.cpp`` the same way).
"""
