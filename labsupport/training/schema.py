"""The typed schema of chapter 6's config — chapter 6 (end to end, book §6.2.2).

``configs/megatron_gpt_tiny.yaml`` keeps NeMo 1.x's layout (``trainer`` / ``exp_manager`` /
``model`` with ``model.data``, ``model.tokenizer`` and ``model.optim`` inside).  Each section is a
dataclass here, read as an OmegaConf *structured config* (``OmegaConf.structured``) — the way
Megatron-Bridge types the sub-configs of its ``ConfigContainer`` — so OmegaConf itself refuses a
value of the wrong type (``model.hidden_size=wide``) and a missing key.  What a type cannot say
(a least value, a closed set of names) is written on the field as metadata
(``minimum``/``above``/``choices`` and the sentence telling the learner what to do) and checked by
:func:`typed_config` after the merge.  Every problem is one
:class:`~labsupport.config.ConfigError` whose message starts with the field:
``model.micro_batch_size=0: expected an integer ≥ 1``.

OmegaConf's own conversions apply: a string ``"4"`` is read as 4 for an ``int`` field, and
``yes``/``no``/``on``/``off``/``1``/``0`` as booleans.  Keys the schema lacks (added on purpose with
``+key=value``) are kept, not checked: the trainer does not read them.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Iterator, List, Optional

from omegaconf import MISSING, DictConfig, OmegaConf
from omegaconf.errors import MissingMandatoryValue, OmegaConfBaseException

from labsupport.config import ConfigError

__all__ = ["TrainerConfig", "ExpManagerConfig", "TokenizerConfig", "DataConfig", "SchedConfig",
           "OptimConfig", "ModelConfig", "RunConfig", "typed_config", "schema_keys", "LAYOUT_HINT"]

LAYOUT_HINT = "see configs/megatron_gpt_tiny.yaml for the layout"


def _int(minimum: int = 1) -> Any:
    """A required integer ≥ ``minimum``."""
    return field(default=MISSING, metadata={"minimum": minimum})


def _number(*, above: float | None = None, minimum: float | None = None) -> Any:
    """A required number, > ``above`` or ≥ ``minimum``."""
    return field(default=MISSING, metadata={"above": above, "minimum": minimum})


def _choice(choices: tuple[str, ...], hint: str) -> Any:
    """A required string from ``choices``; ``hint`` tells the learner what to write instead."""
    return field(default=MISSING, metadata={"choices": choices, "hint": hint})


@dataclass
class TrainerConfig:
    """``trainer``: processes, steps and number format (Lightning's ``Trainer`` arguments)."""

    devices: int = _int()
    num_nodes: int = _int()
    accelerator: str = _choice(("auto", "cpu", "gpu"), "use auto, cpu or gpu")
    precision: str = _choice(("32", "bf16", "bf16-mixed"), "use 32 or bf16")
    max_steps: int = _int()
    log_every_n_steps: int = _int()
    #: seconds a rank waits in a collective before the run stops naming the silent rank (issue 23)
    rank_timeout_s: float = _number(above=0.0)


@dataclass
class ExpManagerConfig:
    """``exp_manager``: NeMo's experiment manager (here only its resume switch)."""

    resume_if_exists: bool = MISSING


@dataclass
class TokenizerConfig:
    """``model.tokenizer``: the SentencePiece model that preprocessing used."""

    library: str = _choice(("sentencepiece",), "this workbook trains with sentencepiece models only")
    model: str = MISSING


@dataclass
class DataConfig:
    """``model.data``: the blend, sample length and chapter 4's boundary flags."""

    data_prefix: List[Any] = MISSING
    data_impl: str = _choice(("mmap",), "this workbook's trainer supports 'mmap' only")
    dataloader_type: str = _choice(("single",), "this workbook's trainer supports 'single' only")
    splits_string: Optional[str] = MISSING       # train,valid,test weights (null: every document trains)
    index_mapping_dir: Optional[str] = None      # GPTDataset index cache folder (null: <prefix>/cache/GPTDataset_indices)
    seq_length: int = _int(2)
    reset_position_ids: bool = MISSING
    reset_attention_mask: bool = MISSING
    eod_mask_loss: bool = MISSING


@dataclass
class SchedConfig:
    """``model.optim.sched``: linear warm-up, then constant."""

    warmup_steps: int = _int(0)


@dataclass
class OptimConfig:
    """``model.optim``: AdamW's settings (NeMo's ``fused_adam`` runs as ``torch.optim.AdamW``)."""

    name: str = _choice(("fused_adam", "adam", "adamw"),
                        "use fused_adam, adam or adamw (all run as torch.optim.AdamW here)")
    lr: float = _number(above=0.0)
    weight_decay: float = _number(minimum=0.0)
    betas: List[float] = MISSING
    sched: SchedConfig = field(default_factory=SchedConfig)


@dataclass
class ModelConfig:
    """``model``: batch sizes, parallel sizes, the GPT's shape, tokenizer, data and optimizer."""

    micro_batch_size: int = _int()
    global_batch_size: int = _int()
    seed: int = _int(0)
    tensor_model_parallel_size: int = _int()
    pipeline_model_parallel_size: int = _int()
    encoder_seq_length: int = _int(2)
    max_position_embeddings: int = _int(2)
    num_layers: int = _int()
    hidden_size: int = _int()
    ffn_hidden_size: int = _int()
    num_attention_heads: int = _int()
    tokenizer: TokenizerConfig = field(default_factory=TokenizerConfig)
    data: DataConfig = field(default_factory=DataConfig)
    optim: OptimConfig = field(default_factory=OptimConfig)


@dataclass
class RunConfig:
    """The whole file: ``trainer``, ``exp_manager``, ``model`` and ``allow_new_data_plan``."""

    trainer: TrainerConfig = field(default_factory=TrainerConfig)
    exp_manager: ExpManagerConfig = field(default_factory=ExpManagerConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    #: resume even when the samples already trained on would come in another order (data_plan)
    allow_new_data_plan: bool = False


_SECTIONS: dict[str, type] = {}   # class name → dataclass (annotations are strings here)


def _section(f: dataclasses.Field) -> type | None:
    """The dataclass a field holds, or None for a leaf."""
    return _SECTIONS.get(f.type) if isinstance(f.type, str) else (f.type if dataclasses.is_dataclass(f.type) else None)


def _leaves(schema: type, prefix: str = "") -> Iterator[tuple[str, dataclasses.Field]]:
    for f in dataclasses.fields(schema):
        sub = _section(f)
        if sub is not None:
            yield from _leaves(sub, f"{prefix}{f.name}.")
        else:
            yield f"{prefix}{f.name}", f


def _known(raw: dict, schema: type, prefix: str = "") -> dict:
    """The part of ``raw`` (a plain dict, interpolations unresolved) that ``schema`` declares."""
    out = {}
    for f in dataclasses.fields(schema):
        if f.name not in raw:
            continue
        sub, value = _section(f), raw[f.name]
        if sub is not None:
            if not isinstance(value, dict):
                raise ConfigError(f"{prefix}{f.name}={value!r}: expected a section of keys; {LAYOUT_HINT}")
            value = _known(value, sub, f"{prefix}{f.name}.")
        out[f.name] = value
    return out


def schema_keys(schema: type = RunConfig) -> list[str]:
    """Every leaf key of the schema, dotted (``model.data.seq_length``), in declaration order."""
    return [key for key, _ in _leaves(schema)]


def _expected(f: dataclasses.Field) -> str:
    """What a value of field ``f`` must be, in words."""
    meta, kind = f.metadata, str(f.type)
    if "choices" in meta:
        return str(meta["hint"])
    if kind == "int":
        return f"expected an integer ≥ {meta.get('minimum', 1)}"
    if kind == "float":
        return f"expected a number > {meta['above']:g}" if meta.get("above") is not None else \
            f"expected a number ≥ {meta.get('minimum', 0):g}"
    if kind == "bool":
        return "expected true or false"
    if kind.startswith("List"):
        return "expected a list" + (" of numbers" if "float" in kind else "")
    return "expected a string" + (" or null" if kind.startswith("Optional") else "")


def _error(key: str, exc: OmegaConfBaseException, fields: dict[str, dataclasses.Field]) -> ConfigError:
    if isinstance(exc, MissingMandatoryValue):
        return ConfigError(f"{key} is missing from the config; {LAYOUT_HINT}")
    if key.split("[")[0] in fields and type(exc).__name__ in ("ValidationError", "InterpolationValidationError",
                                                "UnsupportedValueType"):
        return ConfigError(f"{key}={getattr(exc, 'value', '?')!r}: {_expected(fields[key.split('[')[0]])}")
    first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    return ConfigError(f"{key}: cannot be resolved ({type(exc).__name__}: {first})")


def _check_range(key: str, value: Any, f: dataclasses.Field) -> None:
    meta = f.metadata
    if "choices" in meta and value not in meta["choices"]:
        raise ConfigError(f"{key}={value!r}: {meta['hint']}")
    low, above = meta.get("minimum"), meta.get("above")
    if (low is not None and value < low) or (above is not None and value <= above):
        raise ConfigError(f"{key}={value!r}: {_expected(f)}")


def typed_config(cfg: DictConfig) -> DictConfig:
    """``cfg``'s declared keys merged onto :class:`RunConfig`, every field read and range-checked.

    Returns the typed config (values converted to the declared types, e.g. ``trainer.precision``
    ``32`` → ``"32"``; interpolations kept).  Keys the schema does not declare (a NeMo key added
    with ``+key=value``) are left out: the trainer does not read them.  Raises ConfigError naming
    the first bad field.
    """
    fields = dict(_leaves(RunConfig))
    try:
        raw = OmegaConf.to_container(cfg, resolve=False)
        typed = OmegaConf.merge(OmegaConf.structured(RunConfig), _known(raw, RunConfig))
    except OmegaConfBaseException as exc:
        raise _error(str(getattr(exc, "full_key", "") or "config"), exc, fields) from None
    for key, f in fields.items():
        try:
            value = OmegaConf.select(typed, key, throw_on_missing=True)
        except OmegaConfBaseException as exc:
            raise _error(key, exc, fields) from None
        if value is not None:
            _check_range(key, value, f)
    return typed


_SECTIONS.update({c.__name__: c for c in (TrainerConfig, ExpManagerConfig, TokenizerConfig, DataConfig, SchedConfig,
                                          OptimConfig, ModelConfig, RunConfig)})
