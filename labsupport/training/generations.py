"""One run in three generations of NVIDIA's stack — chapter 0 (the map) and chapter 6 (the key table).

The same settings are spelled differently in

* **NeMo 1.x** — a YAML file read with OmegaConf and overridden with Hydra
  (``examples/nlp/language_modeling/conf/megatron_gpt_config.yaml``; this workbook's
  ``configs/megatron_gpt_tiny.yaml`` keeps that layout, so its keys are the first column);
* **NeMo 2.0** — Python objects: ``llm.PreTrainingDataModule``, ``nl.Trainer``,
  ``nl.MegatronStrategy``, ``nl.MegatronMixedPrecision``, ``llm.GPTConfig``;
* **Megatron-Bridge** — one ``ConfigContainer`` of typed sub-configs (``dataset``, ``train``,
  ``model``, ``optimizer``, ``scheduler``, ``tokenizer``, ``logger``, ``rng``, ``mixed_precision``).

All three end in megatron-core's ``GPTDatasetConfig`` for the data path; :data:`ROWS` names that
field too.  Every name here was read in the projects' sources at the refs of :data:`VERSIONS`
(as of 2026-12-01) and is recorded, with repository, path and commit, in
``upstream_fields.json`` (written by ``scripts/record_upstream_fields.py``);
``tests/training/test_generations.py`` checks the table against that record, against the installed
megatron-core and against this workbook's schema, so the table cannot drift silently.

Documents apart (issue #30 item 2): ``reset_attention_mask`` only builds a block mask in the dataloader;
with each stack's defaults nothing carries it to the attention (NeMo 1.x
``get_attention_mask_from_fusion: True``; NeMo 2.0 ``create_attention_mask=False``; Bridge
``skip_getting_attention_mask_from_dataset=True``), and Transformer Engine's fused causal kernel ignores a
mask (Megatron-LM #2357).  So each rendering that sets a reset flag also sets the stack's switch of
:data:`DOCUMENT_MASKING` and says, on that line, what the attention path needs; :func:`masking_gaps` is
the rule the tests hold every rendering to.
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

from omegaconf import OmegaConf

from labsupport.stack_facts import load_defaults

__all__ = ["Row", "ROWS", "VALIDATION_KEYS", "LATER_KEYS", "VERSIONS", "upstream", "key_table",
           "bridge_mixed_precision", "render_nemo1", "render_nemo2", "render_bridge", "UPSTREAM_FILE",
           "DOCUMENT_MASKING", "masking_gaps"]

UPSTREAM_FILE = Path(__file__).with_name("upstream_fields.json")

#: the versions read (their repository refs and commits are in upstream_fields.json)
VERSIONS = {
    "nemo1": "NeMo 1.x YAML layout, as still shipped in NVIDIA/NeMo v2.5.0rc0",
    "nemo2": "NeMo 2.0 (NVIDIA/NeMo v2.5.0rc0)",
    "bridge": "Megatron-Bridge v0.6.0 (NVIDIA-NeMo/Megatron-Bridge; pins megatron-core 0.19.0)",
    "mcore": "megatron-core 0.16.1 and 0.19 (NVIDIA/Megatron-LM core_v0.16.1, core_r0.19.0)",
}


@dataclass(frozen=True)
class Row:
    """One setting in every generation.

    ``key``: this workbook's config key (``configs/megatron_gpt_tiny.yaml``), None when the workbook
    has none; ``nemo1``: the NeMo 1.x YAML key; ``mcore``: the megatron-core ``GPTDatasetConfig``
    field it reaches (None: not a dataset setting); ``nemo2``: (class, argument); ``bridge``:
    (ConfigContainer attribute, sub-config class, field) — a field of None means the attribute takes
    a value itself (``mixed_precision="bf16_mixed"``); None where that generation has no such
    setting.  ``note`` is shown with the Bridge spelling.
    """

    key: str | None
    book: str | None
    nemo1: str | None
    mcore: str | None
    nemo2: tuple[str, str] | None
    bridge: tuple[str, str, str | None] | None
    what: str
    chapter: str
    note: str = ""


ROWS: tuple[Row, ...] = (
    Row("model.data.data_prefix", "data.data_prefix", "model.data.data_prefix", "blend",
        ("PreTrainingDataModule", "paths"), ("dataset", "GPTDatasetConfig", "blend"),
        "weight, prefix pairs to blend", "ch2, ch3", "(prefixes, weights); or data_path=[w, prefix, …]"),
    Row("model.data.splits_string", None, "model.data.splits_string", "split",
        ("PreTrainingDataModule", "split"), ("dataset", "GPTDatasetConfig", "split"),
        "train/validation/test shares of each prefix", "ch3"),
    Row("model.data.seq_length", "data.seq_length", "model.data.seq_length", "sequence_length",
        ("PreTrainingDataModule", "seq_length"), ("dataset", "GPTDatasetConfig", "seq_length"),
        "tokens per sample", "ch4", "and model.seq_length"),
    Row(None, None, "model.data.mmap_bin_files", "mmap_bin_files",
        ("PreTrainingDataModule", "mmap_bin_files"), ("dataset", "GPTDatasetConfig", "mmap_bin_files"),
        "memory-map the .bin (else read with file pointers)", "ch2"),
    Row("model.data.index_mapping_dir", None, "model.data.index_mapping_dir", "path_to_cache",
        ("PreTrainingDataModule", "index_mapping_dir"), ("dataset", "GPTDatasetConfig", "path_to_cache"),
        "where the document/sample/shuffle index .npy files are cached", "ch3, ch4"),
    Row("model.seed", None, "model.seed", "random_seed",
        ("PreTrainingDataModule", "seed"), ("dataset", "GPTDatasetConfig", "random_seed"),
        "the datasets' shuffle seed", "ch4", "model init: rng.seed"),
    Row("model.data.reset_position_ids", None, "model.data.reset_position_ids", "reset_position_ids",
        ("PreTrainingDataModule", "reset_position_ids"), ("dataset", "GPTDatasetConfig", "reset_position_ids"),
        "positions restart after EOD", "ch4"),
    Row("model.data.reset_attention_mask", None, "model.data.reset_attention_mask", "reset_attention_mask",
        ("PreTrainingDataModule", "reset_attention_mask"), ("dataset", "GPTDatasetConfig", "reset_attention_mask"),
        "block mask in the dataloader's dense mask", "ch4, ch6",
        "only with a dataloader mask: see create_attention_mask"),
    Row(None, None, "model.get_attention_mask_from_fusion", "create_attention_mask",
        ("PreTrainingDataModule", "create_attention_mask"),
        ("dataset", "GPTDatasetConfig", "skip_getting_attention_mask_from_dataset"),
        "build the dense mask in the dataloader", "ch4, ch6",
        "default True: the mask is dropped; NeMo 1.x passes not get_attention_mask_from_fusion"),
    Row(None, None, None, "inter_document_masking", None, ("dataset", "GPTDatasetConfig", "inter_document_masking"),
        "cu_seqlens per sample from the document index (megatron-core ≥ 0.19)", "ch4"),
    Row("model.data.eod_mask_loss", None, "model.data.eod_mask_loss", "eod_mask_loss",
        ("PreTrainingDataModule", "eod_mask_loss"), ("dataset", "GPTDatasetConfig", "eod_mask_loss"),
        "no loss on EOD tokens", "ch4"),
    Row("model.tokenizer.library", "data.tokenizer.type", "model.tokenizer.library", "tokenizer",
        ("PreTrainingDataModule", "tokenizer"), ("tokenizer", "TokenizerConfig", "tokenizer_type"),
        "tokenizer library", "ch1", '"SentencePieceTokenizer"'),
    Row("model.tokenizer.model", "data.tokenizer.model", "model.tokenizer.model", None,
        ("PreTrainingDataModule", "tokenizer"), ("tokenizer", "TokenizerConfig", "tokenizer_model"),
        "tokenizer model file", "ch1"),
    Row("model.micro_batch_size", None, "model.micro_batch_size", None,
        ("PreTrainingDataModule", "micro_batch_size"), ("train", "TrainingConfig", "micro_batch_size"),
        "samples per rank per forward", "ch6"),
    Row("model.global_batch_size", None, "model.global_batch_size", None,
        ("PreTrainingDataModule", "global_batch_size"), ("train", "TrainingConfig", "global_batch_size"),
        "samples per optimizer step", "ch6"),
    Row("model.tensor_model_parallel_size", "model.tensor_model_parallel_size", "model.tensor_model_parallel_size",
        None, ("MegatronStrategy", "tensor_model_parallel_size"),
        ("model", "GPTModelProvider", "tensor_model_parallel_size"), "TP size", "ch5"),
    Row("model.pipeline_model_parallel_size", "model.pipeline_model_parallel_size",
        "model.pipeline_model_parallel_size", None, ("MegatronStrategy", "pipeline_model_parallel_size"),
        ("model", "GPTModelProvider", "pipeline_model_parallel_size"), "PP size", "ch5"),
    Row("model.num_layers", None, "model.num_layers", None, ("GPTConfig", "num_layers"),
        ("model", "GPTModelProvider", "num_layers"), "transformer layers", "ch6"),
    Row("model.hidden_size", "model.hidden_size", "model.hidden_size", None, ("GPTConfig", "hidden_size"),
        ("model", "GPTModelProvider", "hidden_size"), "width of every layer", "ch6"),
    Row("model.num_attention_heads", None, "model.num_attention_heads", None, ("GPTConfig", "num_attention_heads"),
        ("model", "GPTModelProvider", "num_attention_heads"), "attention heads", "ch6"),
    Row("model.optim.lr", None, "model.optim.lr", None, ("OptimizerConfig", "lr"),
        ("optimizer", "OptimizerConfig", "lr"), "peak learning rate", "ch6"),
    Row("model.optim.sched.warmup_steps", None, "model.optim.sched.warmup_steps", None, None,
        ("scheduler", "SchedulerConfig", "lr_warmup_iters"), "linear warm-up steps", "ch6"),
    Row("trainer.precision", "model.precision", "trainer.precision", None, ("MegatronMixedPrecision", "precision"),
        ("mixed_precision", "mixed_precision", None), "number format", "ch0", '"bf16_mixed"'),
    Row("trainer.devices", "trainer.devices", "trainer.devices", None, ("Trainer", "devices"), None,
        "GPUs (processes) per node", "ch0, ch6", "torchrun --nproc-per-node"),
    Row("trainer.num_nodes", "trainer.num_nodes", "trainer.num_nodes", None, ("Trainer", "num_nodes"), None,
        "machines", "ch0, ch6", "torchrun --nnodes"),
    Row("trainer.max_steps", "trainer.max_steps", "trainer.max_steps", None, ("Trainer", "max_steps"),
        ("train", "TrainingConfig", "train_iters"), "optimizer steps", "ch6"),
    Row("trainer.log_every_n_steps", None, "trainer.log_every_n_steps", None, ("Trainer", "log_every_n_steps"),
        ("logger", "LoggerConfig", "log_interval"), "log every N steps", "ch6"),
    # Megatron-LM's --eval-interval/--eval-iters (ValidationConfig, megatron/training/training_config.py at
    # core_v0.16.1); Bridge v0.6.0 takes the same dataclass (3rdparty Megatron-LM cd4afff) as cfg.validation
    Row("trainer.val_check_interval", None, "trainer.val_check_interval", None, ("Trainer", "val_check_interval"),
        ("validation", "ValidationConfig", "eval_interval"), "validate every N steps (null: never)", "ch6",
        "Megatron-LM --eval-interval"),
    Row("trainer.limit_val_batches", None, "trainer.limit_val_batches", None, ("Trainer", "limit_val_batches"),
        ("validation", "ValidationConfig", "eval_iters"), "global batches per validation", "ch6",
        "Megatron-LM --eval-iters"),
    # the batch ramp (labsupport/training/batch_ramp.py): Megatron-LM's --rampup-batch-size up to core_v0.17.x,
    # --step-batch-size-schedule from core_v0.18.0; Bridge v0.6.0's TrainingConfig holds both
    Row("model.rampup_batch_size", None, "model.rampup_batch_size", None,
        ("PreTrainingDataModule", "rampup_batch_size"),
        ("train", "TrainingConfig", "rampup_batch_size"), "grow the global batch: [start, increment, samples]", "ch6",
        "Megatron-LM --rampup-batch-size (≤ 0.17; 0.18+ has no ramp-up calculator)"),
    Row("model.step_batch_size_schedule", None, None, None, None,
        ("train", "TrainingConfig", "step_batch_size_schedule"), "global batch by tokens seen: \"0:B1 T2:B2 …\"",
        "ch6", "Megatron-LM --step-batch-size-schedule (0.18+)"),
    # the checkpoint format (labsupport/training/checkpoint.py, dist_checkpoint.py)
    Row("exp_manager.ckpt_format", None, "model.dist_ckpt_format", None, ("MegatronStrategy", "save_ckpt_format"),
        ("checkpoint", "CheckpointConfig", "ckpt_format"), "torch_dist (a shard per rank) or torch (one file)", "ch6",
        "Megatron-LM --ckpt-format"),
    Row("exp_manager.async_save", None, "exp_manager.checkpoint_callback_params.async_save", None,
        ("MegatronStrategy", "ckpt_async_save"), ("checkpoint", "CheckpointConfig", "async_save"),
        "write checkpoints in the background", "ch6", "Megatron-LM --async-save"),
)

#: the rows of validation: rendered only when the run validates (``trainer.val_check_interval`` set), so
#: a config that does not validate renders as before (NeMo 1.x's own default would validate)
VALIDATION_KEYS = ("trainer.val_check_interval", "trainer.limit_val_batches")

#: keys added after the renderings were first written: a rendering shows one only when the config sets it
#: to something other than the schema's default, so a config that does not use them renders as before
LATER_KEYS = {"model.rampup_batch_size": None, "model.step_batch_size_schedule": None,
              "exp_manager.ckpt_format": "torch_dist", "exp_manager.async_save": False}

#: NeMo 2.0 class → the record in upstream_fields.json that lists its arguments.  ``GPTConfig``
#: extends megatron-core's ``TransformerConfig`` and ``OptimizerConfig`` *is* megatron-core's: their
#: inherited names are checked against the installed megatron-core (:data:`NEMO2_MCORE_BASE`).
NEMO2_RECORD = {"PreTrainingDataModule": "nemo2:PreTrainingDataModule", "MegatronStrategy": "nemo2:MegatronStrategy",
                "MegatronMixedPrecision": "nemo2:MegatronMixedPrecision", "Trainer": "nemo2:Trainer-keywords",
                "GPTConfig": "nemo2:GPTConfig", "OptimizerConfig": None}
NEMO2_MCORE_BASE = {"GPTConfig": "megatron.core.transformer.transformer_config.TransformerConfig",
                    "OptimizerConfig": "megatron.core.optimizer.OptimizerConfig"}
#: how a NeMo 2.0 class is written in a recipe
NEMO2_PREFIX = {"PreTrainingDataModule": "llm.", "MegatronStrategy": "nl.", "MegatronMixedPrecision": "nl.",
                "Trainer": "nl.", "GPTConfig": "llm.", "OptimizerConfig": "OptimizerConfig"}


@lru_cache(maxsize=1)
def upstream() -> dict[str, dict[str, Any]]:
    """The recorded upstream names (``upstream_fields.json``'s ``sources``)."""
    return json.loads(UPSTREAM_FILE.read_text(encoding="utf-8"))["sources"]


def _nemo2_text(row: Row) -> str:
    if row.nemo2 is None:
        return "–"
    cls, arg = row.nemo2
    prefix = NEMO2_PREFIX[cls]
    name = cls if prefix == cls else prefix + cls
    return f"{name}({arg}=...)"


def bridge_mixed_precision(precision: Any) -> str:
    """Megatron-Bridge's ``ConfigContainer.mixed_precision`` (as Python source) for a NeMo 1.x ``trainer.precision``.

    ``"bf16_mixed"`` (a recipe of ``mixed_precision.py``) for a bf16 setting; ``None`` otherwise: Bridge v0.6.0's
    default (``config.py``), no mixed-precision recipe, the model in fp32 — what ``trainer.precision=32`` means."""
    return '"bf16_mixed"' if str(precision).startswith("bf16") else "None"


def _bridge_text(row: Row) -> str:
    if row.bridge is None:
        return f"– ({row.note})" if row.note else "–"
    attr, _, fld = row.bridge
    if attr == "mixed_precision":
        return f"{attr}={bridge_mixed_precision(32)} for 32 (fp32), {row.note} for bf16-mixed"
    if fld is None:
        return f"{attr}={row.note}"
    return f"{attr}.{fld}" + (f" ({row.note})" if row.note else "")


def key_table() -> list[tuple[str, str, str, str, str]]:
    """Rows (workbook key or –, NeMo 1.x key, megatron-core field, NeMo 2.0, Megatron-Bridge) for printing."""
    return [(r.key or "–", r.nemo1 or "–", r.mcore or "–", _nemo2_text(r), _bridge_text(r)) for r in ROWS]


# ------------------------------------------------------------------------------------- rendering
#: per stack: (the setting that carries reset_attention_mask's block mask to the model, as rendered;
#: what the line must also say about the attention path, or None where the setting is the whole fix).
#: Names: NVIDIA/NeMo v2.5.0rc0 (megatron_gpt_config.yaml, PreTrainingDataModule, GPTConfig),
#: Megatron-Bridge v0.6.0 and megatron-core core_r0.19.0 (GPTDatasetConfig) — all in upstream_fields.json.
DOCUMENT_MASKING: dict[str, tuple[str, str | None]] = {
    "nemo1": ("model.get_attention_mask_from_fusion=false", "model.transformer_engine=false"),
    "nemo2": ("create_attention_mask=True", "transformer_layer_spec"),
    "bridge": ("inter_document_masking=True", None),
}
_RESET = ("reset_attention_mask", "reset_position_ids")
_TE_NOTE = "TE's fused causal kernel ignores the mask: Megatron-LM #2357"
NEMO1_MASK_NOTE = (f"# and an unfused path: model.transformer_engine=false model.masked_softmax_fusion=false "
                   f"({_TE_NOTE})")
NEMO2_MASK_NOTE = (f"# and an unfused path: GPTConfig(transformer_layer_spec=<local spec, no TE>, "
                   f"masked_softmax_fusion=False) ({_TE_NOTE})")
#: the defaults these notes name are data: labsupport/stack.toml's [[default]] rows (source, date)
_BRIDGE_SKIP = load_defaults()["bridge-skip-mask"]
BRIDGE_MASK_NOTE = ("# megatron-core >= 0.19: cu_seqlens per sample (packed THD); without it Bridge drops the dense "
                    f"mask ({_BRIDGE_SKIP.setting.rsplit('.', 1)[-1]}={_BRIDGE_SKIP.value})")


def _resets(text: str) -> list[str]:
    """The reset flags ``text`` turns on (Hydra's true or Python's True)."""
    return [flag for flag in _RESET if re.search(rf"\b{flag}=(?:true|True)\b", text)]


def masking_gaps(stack: str, text: str) -> list[str]:
    """Why a rendered ``stack`` config (nemo1 | nemo2 | bridge) does not keep documents apart; [] when it does.

    A reset flag that is on needs the stack's setting of :data:`DOCUMENT_MASKING` in the same text, and
    where that setting is not the whole fix the line that sets it must say what else the attention path
    needs (its comment names it)."""
    if stack not in DOCUMENT_MASKING:
        raise ValueError(f"error: masking_gaps stack {stack!r}: use one of {sorted(DOCUMENT_MASKING)}")
    flags = _resets(text)
    if not flags:
        return []
    setting, says = DOCUMENT_MASKING[stack]
    lines = [line for line in text.splitlines() if setting in line.split("#", 1)[0]]
    if not lines:
        return [f"{stack}: {' and '.join(flags)} on without {setting}: the block mask never reaches attention"]
    if says is not None and not any(says in line.split("#", 1)[-1] for line in lines if "#" in line):
        return [f"{stack}: the line with {setting} does not say that the attention path also needs {says}"]
    return []


def _values(cfg: Any) -> dict[str, Any]:
    out = {}
    for r in ROWS:
        if r.key is not None:
            v = OmegaConf.select(cfg, r.key)
            out[r.key] = OmegaConf.to_container(v) if OmegaConf.is_config(v) else v
    return out


def _validates(v: dict[str, Any]) -> bool:
    return v.get("trainer.val_check_interval") is not None


def _reset_on(v: dict[str, Any]) -> bool:
    return any(v[f"model.data.{flag}"] for flag in _RESET)


def _split(v: dict[str, Any]) -> str:
    """megatron-core needs a split with a blend; the workbook's null means every document for training."""
    return v["model.data.splits_string"] or "1,0,0"


def _hydra(value: Any) -> str:
    """A value as a Hydra override writes it (true/false, null)."""
    if value is None:
        return "null"
    if isinstance(value, (list, tuple)):   # one shell word: [4,4,24]
        return "[" + ",".join(_hydra(x) for x in value) + "]"
    return str(value).lower() if isinstance(value, bool) else str(value)


def render_nemo1(cfg: Any) -> str:
    """The NeMo 1.x launch of ``cfg``: Hydra overrides of megatron_gpt_config.yaml."""
    v = _values(cfg)
    prefix = "[" + ",".join(str(x) for x in v["model.data.data_prefix"]) + "]"
    keys = [r.key for r in ROWS if r.key and r.key not in ("model.data.data_prefix", "model.data.splits_string")
            and (r.key not in VALIDATION_KEYS or _validates(v))
            and (r.key not in LATER_KEYS or (r.nemo1 and v[r.key] not in (None, LATER_KEYS[r.key])))]
    # quoted for the shell; Hydra reads an unquoted 1,0,0 as a sweep, so the split is quoted for Hydra too
    split = _split(v)
    lines = [f'  "model.data.data_prefix={prefix}" \\', f"  \"model.data.splits_string='{split}'\" \\"]
    shown = {**v, "model.tokenizer.model": "TOKENIZER.model"}   # the workbook's alias "workbook" is not NeMo's
    # NeMo 1.x's model.data.seq_length interpolates model.encoder_seq_length: override the latter
    names = {"model.data.seq_length": "model.encoder_seq_length",
             **{r.key: r.nemo1 for r in ROWS if r.key in LATER_KEYS and r.nemo1}}
    masks = [k for k in keys if k.endswith(_RESET)]
    lines += [f"  {names.get(k, k)}={_hydra(shown[k])} \\" for k in keys if k not in masks]
    lines += [f"  {k}={_hydra(shown[k])} \\" for k in masks]
    if _reset_on(v):   # the last line, so that its comment can say what else is needed
        lines.append(f"  {DOCUMENT_MASKING['nemo1'][0]}  {NEMO1_MASK_NOTE}")
    lines[-1] = lines[-1].removesuffix(" \\")
    return ("python examples/nlp/language_modeling/megatron_gpt_pretraining.py \\\n"
            "  --config-path=conf --config-name=megatron_gpt_config \\\n" + "\n".join(lines))


def _blend(v: dict[str, Any]) -> tuple[list[str], list[float]]:
    items = v["model.data.data_prefix"]
    return [str(p) for p in items[1::2]], [float(w) for w in items[0::2]]


def render_nemo2(cfg: Any) -> str:
    """The NeMo 2.0 objects of ``cfg`` (the list form of ``paths``: blend and split)."""
    v = _values(cfg)
    prefixes, weights = _blend(v)
    paths = ", ".join(f'"{w:g}", "{p}"' for w, p in zip(weights, prefixes))
    tf = lambda x: "True" if x else "False"  # noqa: E731
    prec = "bf16-mixed" if str(v["trainer.precision"]).startswith("bf16") else "32"
    return "\n".join([
        "from nemo import lightning as nl",
        "from nemo.collections import llm",
        "from nemo.collections.nlp.modules.common.tokenizer_utils import get_nmt_tokenizer",
        "from megatron.core.optimizer import OptimizerConfig",
        "",
        'tokenizer = get_nmt_tokenizer(library="sentencepiece", tokenizer_model="TOKENIZER.model")',
        f"data = llm.PreTrainingDataModule(paths=[{paths}],",
        f'    split="{_split(v)}", seq_length={v["model.data.seq_length"]}, seed={v["model.seed"]},',
        f'    micro_batch_size={v["model.micro_batch_size"]}, global_batch_size={v["model.global_batch_size"]},',
        f'    reset_position_ids={tf(v["model.data.reset_position_ids"])}, '
        f'reset_attention_mask={tf(v["model.data.reset_attention_mask"])}, '
        f'eod_mask_loss={tf(v["model.data.eod_mask_loss"])},',
        *([f"    {DOCUMENT_MASKING['nemo2'][0]},  {NEMO2_MASK_NOTE}"] if _reset_on(v) else []),
        f'    mmap_bin_files=True, index_mapping_dir={v["model.data.index_mapping_dir"]!r}, tokenizer=tokenizer)',
        f'model = llm.GPTModel(llm.GPTConfig(num_layers={v["model.num_layers"]}, hidden_size={v["model.hidden_size"]}, '
        f'num_attention_heads={v["model.num_attention_heads"]}, seq_length={v["model.data.seq_length"]}))',
        f'trainer = nl.Trainer(devices={v["trainer.devices"]}, num_nodes={v["trainer.num_nodes"]}, '
        f'max_steps={v["trainer.max_steps"]}, log_every_n_steps={v["trainer.log_every_n_steps"]},',
        *([f'    val_check_interval={v["trainer.val_check_interval"]}, '
           f'limit_val_batches={v["trainer.limit_val_batches"]},'] if _validates(v) else []),
        f'    strategy=nl.MegatronStrategy(tensor_model_parallel_size={v["model.tensor_model_parallel_size"]}, '
        f'pipeline_model_parallel_size={v["model.pipeline_model_parallel_size"]}),',
        f'    plugins=nl.MegatronMixedPrecision(precision="{prec}"))',
        f'optim = nl.MegatronOptimizerModule(config=OptimizerConfig(optimizer="adam", lr={v["model.optim.lr"]}))',
        "llm.pretrain(model, data, trainer, optim=optim)",
    ])


def render_bridge(cfg: Any) -> str:
    """The Megatron-Bridge ``ConfigContainer`` of ``cfg`` (launched with torchrun)."""
    v = _values(cfg)
    prefixes, weights = _blend(v)
    tf = lambda x: "True" if x else "False"  # noqa: E731
    mp = bridge_mixed_precision(v["trainer.precision"])
    return "\n".join([
        "from megatron.bridge.models import GPTModelProvider",
        "from megatron.bridge.training.config import (CheckpointConfig, ConfigContainer, GPTDatasetConfig, "
        "LoggerConfig,",
        "    OptimizerConfig, RNGConfig, SchedulerConfig, TrainingConfig"
        + (", ValidationConfig)" if _validates(v) else ")"),
        "from megatron.bridge.training.gpt_step import forward_step",
        "from megatron.bridge.training.pretrain import pretrain",
        "from megatron.bridge.training.tokenizers.config import TokenizerConfig",
        "",
        "cfg = ConfigContainer(",
        f"    dataset=GPTDatasetConfig(blend=({prefixes!r}, {weights!r}),".replace("'", '"'),
        f'        split="{_split(v)}", seq_length={v["model.data.seq_length"]}, random_seed={v["model.seed"]},',
        f'        reset_position_ids={tf(v["model.data.reset_position_ids"])}, '
        f'reset_attention_mask={tf(v["model.data.reset_attention_mask"])}, '
        f'eod_mask_loss={tf(v["model.data.eod_mask_loss"])},',
        *([f"        {DOCUMENT_MASKING['bridge'][0]},  {BRIDGE_MASK_NOTE}"] if _reset_on(v) else []),
        f'        mmap_bin_files=True, path_to_cache={v["model.data.index_mapping_dir"]!r}),',
        f'    train=TrainingConfig(micro_batch_size={v["model.micro_batch_size"]}, '
        f'global_batch_size={v["model.global_batch_size"]}, train_iters={v["trainer.max_steps"]}),',
        *([f'    validation=ValidationConfig(eval_interval={v["trainer.val_check_interval"]}, '
           f'eval_iters={v["trainer.limit_val_batches"]}),'] if _validates(v) else []),
        f'    model=GPTModelProvider(num_layers={v["model.num_layers"]}, hidden_size={v["model.hidden_size"]}, '
        f'num_attention_heads={v["model.num_attention_heads"]}, seq_length={v["model.data.seq_length"]},',
        f'        tensor_model_parallel_size={v["model.tensor_model_parallel_size"]}, '
        f'pipeline_model_parallel_size={v["model.pipeline_model_parallel_size"]}),',
        f'    optimizer=OptimizerConfig(optimizer="adam", lr={v["model.optim.lr"]}),',
        f'    scheduler=SchedulerConfig(lr_warmup_iters={v["model.optim.sched.warmup_steps"]}),',
        '    tokenizer=TokenizerConfig(tokenizer_type="SentencePieceTokenizer", tokenizer_model="TOKENIZER.model"),',
        f'    logger=LoggerConfig(log_interval={v["trainer.log_every_n_steps"]}), checkpoint=CheckpointConfig(),',
        f"    rng=RNGConfig(seed={v['model.seed']}), mixed_precision={mp})",
        f'pretrain(cfg, forward_step_func=forward_step)   # torchrun --nproc-per-node {v["trainer.devices"]} '
        f'--nnodes {v["trainer.num_nodes"]}',
    ])
