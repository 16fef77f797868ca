"""The config keys of book §6.2.2 in three spellings — chapter 6 (end to end).

:data:`CONFIG_KEYS` rows: (book's conceptual key, NeMo 1.x YAML path, NeMo 2.0 Python attribute,
what it sets, the chapter that shows it).  Sources, as read for this workbook:

* NeMo 1.x: ``examples/nlp/language_modeling/conf/megatron_gpt_config.yaml`` (NVIDIA/NeMo, read at
  commit 000763d: ``trainer``/``exp_manager``/``model`` with ``model.data`` and ``model.tokenizer``);
* NeMo 2.0: ``nemo/collections/llm/gpt/data/pre_training.py`` (``PreTrainingDataModule``'s
  arguments; NVIDIA/NeMo commit 020a508) and the NeMo 2.0 user guide's ``nl.Trainer`` /
  ``nl.MegatronStrategy`` / ``nl.MegatronMixedPrecision`` (see ``../shared/reference/
  nemo-config-and-training.md``).
"""
from __future__ import annotations

__all__ = ["CONFIG_KEYS", "SOURCES"]

SOURCES = {
    "nemo1": "NVIDIA/NeMo examples/nlp/language_modeling/conf/megatron_gpt_config.yaml (read at commit 000763d)",
    "nemo2": "NVIDIA/NeMo nemo/collections/llm/gpt/data/pre_training.py (PreTrainingDataModule), NeMo 2.0 user guide (nl.Trainer, nl.MegatronStrategy, nl.MegatronMixedPrecision)",
}

CONFIG_KEYS: list[tuple[str, str, str, str, str]] = [
    ("data.data_prefix", "model.data.data_prefix", "PreTrainingDataModule(paths=...)", "weight, prefix pairs to blend", "ch2, ch3"),
    ("data.seq_length", "model.encoder_seq_length (model.data.seq_length follows it)", "PreTrainingDataModule(seq_length=...)", "tokens per sample", "ch4"),
    ("data.tokenizer.type", "model.tokenizer.library", "PreTrainingDataModule(tokenizer=...)", "tokenizer library", "ch1"),
    ("data.tokenizer.model", "model.tokenizer.model", "PreTrainingDataModule(tokenizer=...)", "tokenizer model file", "ch1"),
    ("–", "model.micro_batch_size", "PreTrainingDataModule(micro_batch_size=...)", "samples per rank per forward", "ch6"),
    ("–", "model.global_batch_size", "PreTrainingDataModule(global_batch_size=...)", "samples per optimizer step", "ch6"),
    ("–", "model.data.reset_position_ids", "PreTrainingDataModule(reset_position_ids=...)", "positions restart after EOD", "ch4"),
    ("–", "model.data.reset_attention_mask", "PreTrainingDataModule(reset_attention_mask=...)", "no attention across documents", "ch4"),
    ("–", "model.data.eod_mask_loss", "PreTrainingDataModule(eod_mask_loss=...)", "no loss on EOD tokens", "ch4"),
    ("–", "model.seed", "PreTrainingDataModule(seed=...)", "dataset shuffle seed", "ch4"),
    ("model.tensor_model_parallel_size", "model.tensor_model_parallel_size", "nl.MegatronStrategy(tensor_model_parallel_size=...)", "TP size", "ch5"),
    ("model.pipeline_model_parallel_size", "model.pipeline_model_parallel_size", "nl.MegatronStrategy(pipeline_model_parallel_size=...)", "PP size", "ch5"),
    ("model.precision", "trainer.precision", "nl.MegatronMixedPrecision(precision='bf16-mixed')", "number format", "ch0"),
    ("trainer.devices", "trainer.devices", "nl.Trainer(devices=...)", "GPUs (processes) per node", "ch0, ch6"),
    ("trainer.num_nodes", "trainer.num_nodes", "nl.Trainer(num_nodes=...)", "machines", "ch0, ch6"),
    ("trainer.max_steps", "trainer.max_steps", "nl.Trainer(max_steps=...)", "optimizer steps", "ch6"),
]
