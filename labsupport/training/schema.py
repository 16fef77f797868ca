"""Chapter 6's run as one typed config, ``RunConfig`` — chapter 6 (end to end, book §6.2.2).

``configs/megatron_gpt_tiny.yaml`` keeps NeMo 1.x's layout (``trainer`` / ``exp_manager`` /
``model`` with ``model.data``, ``model.tokenizer`` and ``model.optim`` inside).  Each section is a
dataclass; :func:`read_run_config` merges the YAML (plus overrides) onto them as an OmegaConf
*structured config* and turns the result into dataclass instances (``OmegaConf.to_object``), as
Megatron-Bridge builds its ``ConfigContainer``.  OmegaConf refuses a value of the wrong type and a
missing key; each dataclass's ``validate()`` holds the rules a type cannot say (least values,
closed sets of names) and :meth:`RunConfig.validate` the rules that join fields (the global batch
divides by micro batch × DP).  The trainer reads attributes: ``config.model.optim.lr``.

Every problem is one :class:`~labsupport.config.ConfigError` whose message starts with the
field: ``model.micro_batch_size=0: expected an integer ≥ 1``.  OmegaConf's own conversions apply:
a string ``"4"`` is read as 4 for an ``int`` field, ``yes``/``no``/``on``/``off`` as booleans.
Keys the schema lacks (added on purpose with ``+key=value``) are left out: the trainer does not
read them.
"""
from __future__ import annotations

import copy
import dataclasses
import math
import typing
from dataclasses import dataclass, field
from typing import Any, List, Optional

from omegaconf import MISSING, DictConfig, OmegaConf
from omegaconf.errors import MissingMandatoryValue, OmegaConfBaseException, ValidationError

from labsupport.config import ConfigError, ParallelLayout, parallel_layout
from labsupport.training.batch_ramp import BatchSchedule, parse_step_schedule
from labsupport.datasets.splits import parse_and_normalize_split

__all__ = ["TrainerConfig", "ExpManagerConfig", "TokenizerConfig", "DataConfig", "SchedConfig",
           "OptimConfig", "ModelConfig", "RunConfig", "read_run_config", "schema_keys", "LAYOUT_HINT",
           "MAX_MODEL_PARAMETERS"]

LAYOUT_HINT = "see configs/megatron_gpt_tiny.yaml for the layout"
#: The largest model the trainer builds (parameters without the vocabulary's embedding and head):
#: 2×10⁸ parameters are 0.8 GB of fp32 weights and 2.4 GB with AdamW's two moments — far beyond
#: chapter 6's tiny GPT (about 0.1 M), still within one machine's memory.
MAX_MODEL_PARAMETERS = 200_000_000


# ------------------------------------------------------------------ the rules, in the learner's words
def _integer(key: str, value: Any, least: int = 1) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < least:
        raise ConfigError(f"{key}={value!r}: expected an integer ≥ {least}")


def _number(key: str, value: Any, *, above: float | None = None, least: float | None = None) -> None:
    number = isinstance(value, (int, float)) and not isinstance(value, bool)
    if number and not math.isfinite(value):
        bound = f" > {above:g}" if above is not None else f" ≥ {least:g}" if least is not None else ""
        raise ConfigError(f"{key}={value!r}: expected a finite number{bound}")
    if above is not None and not (number and value > above):
        raise ConfigError(f"{key}={value!r}: expected a number > {above:g}")
    if least is not None and not (number and value >= least):
        raise ConfigError(f"{key}={value!r}: expected a number ≥ {least:g}")


def _choice(key: str, value: Any, choices: tuple[str, ...], hint: str) -> None:
    if value not in choices:
        raise ConfigError(f"{key}={value!r}: {hint}")


def _flag(key: str, value: Any) -> None:
    if not isinstance(value, bool):
        raise ConfigError(f"{key}={value!r}: expected true or false")


def _text(key: str, value: Any, *, optional: bool = False) -> None:
    if not (isinstance(value, str) or (optional and value is None)):
        raise ConfigError(f"{key}={value!r}: expected a string" + (" or null" if optional else ""))


# ----------------------------------------------------------------------------------- the sections
@dataclass
class TrainerConfig:
    """``trainer``: processes, steps and number format (Lightning's ``Trainer`` arguments)."""

    devices: int = MISSING
    num_nodes: int = MISSING
    accelerator: str = MISSING          # auto | cpu | gpu
    precision: str = MISSING            # 32 | bf16 (bf16-mixed: NeMo 2.0's spelling)
    max_steps: int = MISSING
    log_every_n_steps: int = MISSING
    #: seconds a rank waits in a collective before the run stops naming the silent rank (issue 23)
    rank_timeout_s: float = MISSING
    #: deterministic kernels before the model is built (labsupport/training/determinism.py); false: torch's defaults
    deterministic: bool = False
    #: validate every N optimizer steps (null: never; Megatron's eval_interval) — labsupport/training/validation.py
    val_check_interval: Optional[int] = None
    #: global batches each validation reads (Megatron's eval_iters); needed when val_check_interval is set
    limit_val_batches: Optional[int] = None

    @property
    def bf16(self) -> bool:
        """True when the run computes in bf16 autocast (``bf16`` or ``bf16-mixed``)."""
        return self.precision.startswith("bf16")

    def validate(self) -> None:
        for name in ("devices", "num_nodes", "max_steps", "log_every_n_steps"):
            _integer(f"trainer.{name}", getattr(self, name))
        _choice("trainer.accelerator", self.accelerator, ("auto", "cpu", "gpu"), "use auto, cpu or gpu")
        _choice("trainer.precision", self.precision, ("32", "bf16", "bf16-mixed"), "use 32 or bf16")
        _number("trainer.rank_timeout_s", self.rank_timeout_s, above=0.0)
        _flag("trainer.deterministic", self.deterministic)
        self.validate_validation()

    def validate_validation(self) -> None:
        """``val_check_interval`` and ``limit_val_batches``: integers ≥ 1 or null, and a number of
        batches whenever an interval is set (NeMo 1.x's fractions of an epoch are not read here)."""
        for name, unit in (("val_check_interval", "optimizer steps"), ("limit_val_batches", "global batches")):
            value = getattr(self, name)
            if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
                raise ConfigError(f"trainer.{name}={value!r}: expected an integer ≥ 1 ({unit}) or null "
                                  "(null: no validation)")
        if self.val_check_interval is not None and self.limit_val_batches is None:
            raise ConfigError(f"trainer.limit_val_batches=None with trainer.val_check_interval="
                              f"{self.val_check_interval}: set the global batches each validation reads, "
                              "e.g. trainer.limit_val_batches=2")


@dataclass
class ExpManagerConfig:
    """``exp_manager``: NeMo's experiment manager (here its resume switch and the checkpoint format)."""

    resume_if_exists: bool = MISSING
    #: torch_dist: torch.distributed.checkpoint, a shard per rank + metadata (Megatron's --ckpt-format default);
    #: torch: the older single file written by rank 0 (labsupport/training/checkpoint.py)
    ckpt_format: str = "torch_dist"
    #: write a torch_dist checkpoint in the background while training goes on (Megatron's --async-save)
    async_save: bool = False

    def validate(self) -> None:
        _flag("exp_manager.resume_if_exists", self.resume_if_exists)
        _choice("exp_manager.ckpt_format", self.ckpt_format, ("torch_dist", "torch"), "use torch_dist or torch")
        _flag("exp_manager.async_save", self.async_save)
        if self.async_save and self.ckpt_format != "torch_dist":
            raise ConfigError("exp_manager.async_save=true with exp_manager.ckpt_format=torch: only torch_dist "
                              "checkpoints are written in the background; set exp_manager.ckpt_format=torch_dist")


@dataclass
class TokenizerConfig:
    """``model.tokenizer``: the SentencePiece model that preprocessing used."""

    library: str = MISSING
    model: str = MISSING                # a .model path, or "workbook"

    def validate(self) -> None:
        _choice("model.tokenizer.library", self.library, ("sentencepiece",),
                "this workbook trains with sentencepiece models only")
        _text("model.tokenizer.model", self.model)


@dataclass
class DataConfig:
    """``model.data``: the blend, sample length and chapter 4's boundary flags."""

    data_prefix: List[Any] = MISSING             # weight, prefix pairs (or prefixes alone)
    data_impl: str = MISSING
    dataloader_type: str = MISSING
    splits_string: Optional[str] = MISSING       # train,valid,test weights (null: every document trains)
    # GPTDataset index cache folder (null: <prefix>/cache/GPTDataset_indices)
    index_mapping_dir: Optional[str] = None
    seq_length: int = MISSING
    reset_position_ids: bool = MISSING
    reset_attention_mask: bool = MISSING
    eod_mask_loss: bool = MISSING

    @property
    def flags(self) -> dict[str, bool]:
        """Chapter 4's three boundary flags by name."""
        return {"reset_position_ids": self.reset_position_ids, "reset_attention_mask": self.reset_attention_mask,
                "eod_mask_loss": self.eod_mask_loss}

    def blend(self) -> tuple[list[str], list[float]]:
        """``data_prefix`` as (prefixes as written, weights as written; 1.0 each when it has none)."""
        from labsupport.datasets.blending import BlendError, get_blend_from_list  # noqa: PLC0415 - blending loads torch; reading a config stays torch-free

        try:
            prefixes, weights = get_blend_from_list(copy.deepcopy(self.data_prefix), check_files=False)
        except BlendError as exc:
            raise ConfigError(f"model.data.{exc}") from None
        return [str(p) for p in prefixes], [1.0] * len(prefixes) if weights is None else [float(w) for w in weights]

    def validate(self) -> None:
        if not isinstance(self.data_prefix, list):
            raise ConfigError(f"model.data.data_prefix={self.data_prefix!r}: expected a list")
        _choice("model.data.data_impl", self.data_impl, ("mmap",), "this workbook's trainer supports 'mmap' only")
        _choice("model.data.dataloader_type", self.dataloader_type, ("single",),
                "this workbook's trainer supports 'single' only")
        _text("model.data.splits_string", self.splits_string, optional=True)
        _text("model.data.index_mapping_dir", self.index_mapping_dir, optional=True)
        _integer("model.data.seq_length", self.seq_length, 2)
        for name in self.flags:
            _flag(f"model.data.{name}", getattr(self, name))
        if self.splits_string is not None:
            try:
                parse_and_normalize_split(self.splits_string)
            except ValueError as exc:
                raise ConfigError(f"model.data.splits_string={self.splits_string!r}: {exc}") from None
        self.blend()


@dataclass
class SchedConfig:
    """``model.optim.sched``: linear warm-up, then constant."""

    warmup_steps: int = MISSING

    def validate(self) -> None:
        _integer("model.optim.sched.warmup_steps", self.warmup_steps, 0)


@dataclass
class OptimConfig:
    """``model.optim``: AdamW's settings (NeMo's ``fused_adam`` runs as ``torch.optim.AdamW``)."""

    name: str = MISSING
    lr: float = MISSING
    weight_decay: float = MISSING
    betas: List[float] = MISSING
    sched: SchedConfig = field(default_factory=SchedConfig)

    def validate(self) -> None:
        _choice("model.optim.name", self.name, ("fused_adam", "adam", "adamw"),
                "use fused_adam, adam or adamw (all run as torch.optim.AdamW here)")
        _number("model.optim.lr", self.lr, above=0.0)
        _number("model.optim.weight_decay", self.weight_decay, least=0.0)
        if not isinstance(self.betas, list):
            raise ConfigError(f"model.optim.betas={self.betas!r}: expected a list of numbers")
        for i, beta in enumerate(self.betas):
            if isinstance(beta, bool) or not isinstance(beta, (int, float)):
                raise ConfigError(f"model.optim.betas[{i}]={beta!r}: expected a list of numbers")
        if len(self.betas) != 2:
            raise ConfigError(f"model.optim.betas={list(self.betas)!r}: expected two numbers [beta1, beta2] "
                              "(AdamW's moment decays, e.g. [0.9, 0.98])")
        for i, beta in enumerate(self.betas):
            if not (math.isfinite(beta) and 0.0 <= beta < 1.0):
                raise ConfigError(f"model.optim.betas[{i}]={beta!r}: expected a number in [0, 1) "
                                  "(AdamW's moment decay, e.g. 0.9)")
        self.sched.validate()


@dataclass
class ModelConfig:
    """``model``: batch sizes, parallel sizes, the GPT's shape, tokenizer, data and optimizer."""

    micro_batch_size: int = MISSING
    global_batch_size: int = MISSING
    #: [start, increment, samples]: grow the global batch from start to global_batch_size (NeMo 1.x's key,
    #: Megatron ≤ 0.17's --rampup-batch-size) — labsupport/training/batch_ramp.py; null: constant
    rampup_batch_size: Optional[List[int]] = None
    #: "THRESHOLD:BATCH ..." with thresholds in tokens (Megatron 0.18+'s --step-batch-size-schedule); null: constant
    step_batch_size_schedule: Optional[str] = None
    seed: int = MISSING
    tensor_model_parallel_size: int = MISSING
    pipeline_model_parallel_size: int = MISSING
    encoder_seq_length: int = MISSING
    max_position_embeddings: int = MISSING
    num_layers: int = MISSING
    hidden_size: int = MISSING
    ffn_hidden_size: int = MISSING
    num_attention_heads: int = MISSING
    tokenizer: TokenizerConfig = field(default_factory=TokenizerConfig)
    data: DataConfig = field(default_factory=DataConfig)
    optim: OptimConfig = field(default_factory=OptimConfig)

    def validate(self) -> None:
        for name in ("micro_batch_size", "global_batch_size", "tensor_model_parallel_size",
                     "pipeline_model_parallel_size", "num_layers", "hidden_size", "ffn_hidden_size",
                     "num_attention_heads"):
            _integer(f"model.{name}", getattr(self, name))
        _integer("model.seed", self.seed, 0)
        _integer("model.encoder_seq_length", self.encoder_seq_length, 2)
        _integer("model.max_position_embeddings", self.max_position_embeddings, 2)
        self.tokenizer.validate()
        self.data.validate()
        self.optim.validate()

    def validate_shape(self) -> None:
        """The rules that join the model's fields (after every field is valid)."""
        seq = self.encoder_seq_length
        if self.data.seq_length != seq:
            raise ConfigError(f"model.data.seq_length={self.data.seq_length} differs from "
                              f"model.encoder_seq_length={seq}; keep them equal (NeMo interpolates one from the other)")
        if self.max_position_embeddings < seq:
            raise ConfigError("model.max_position_embeddings is smaller than model.encoder_seq_length")
        if self.hidden_size % self.num_attention_heads:
            raise ConfigError(f"model.hidden_size={self.hidden_size} is not divisible by "
                              f"model.num_attention_heads={self.num_attention_heads}")
        self.validate_size()

    def batch_schedule(self, data_parallel: int) -> BatchSchedule:
        """The global batch per step (:class:`~labsupport.training.batch_ramp.BatchSchedule`), unchecked."""
        ramp, text = self.rampup_batch_size, self.step_batch_size_schedule
        steps = None if text is None else tuple(parse_step_schedule(text, self.encoder_seq_length))
        return BatchSchedule(self.global_batch_size, self.micro_batch_size * data_parallel,
                             None if ramp is None else tuple(int(v) for v in ramp), steps)

    def validate_ramp(self, max_steps: int, data_parallel: int) -> None:
        """Megatron's assertions on a ramp-up or step schedule, as one line each, plus its run-time
        consistency check (every batch divisible by micro × DP) done here for every step of the run."""
        ramp, text, final = self.rampup_batch_size, self.step_batch_size_schedule, self.global_batch_size
        if ramp is not None and text is not None:
            raise ConfigError("model.rampup_batch_size and model.step_batch_size_schedule are both set; keep one "
                              "(Megatron 0.18+ has only the step schedule)")
        if ramp is not None:
            _check_rampup(ramp, final)
        if text is not None:
            _check_step_schedule(text, self.encoder_seq_length, final)
        schedule = self.batch_schedule(data_parallel)
        for step, size in enumerate(schedule.sizes(max_steps), start=1):
            if size % schedule.group:
                raise ConfigError(f"model.{'rampup_batch_size' if ramp is not None else 'step_batch_size_schedule'}: "
                                  f"step {step}'s global batch {size} is not divisible by model.micro_batch_size × DP"
                                  f" = {schedule.group}; choose sizes that are multiples of {schedule.group}")

    def parameters_without_vocab(self) -> int:
        """The GPT's parameter count, less the token embedding and output head (the vocabulary
        comes from the tokenizer): per layer QKV + output projection (4h² + 4h), the MLP
        (2hf + f + h) and two LayerNorms (4h); the position embedding P·h; the final LayerNorm."""
        h = self.hidden_size
        return self.num_layers * self._per_layer() + self.max_position_embeddings * h + 2 * h

    def _per_layer(self) -> int:
        h, f = self.hidden_size, self.ffn_hidden_size
        return 4 * h * h + 2 * h * f + 9 * h + f

    def validate_size(self) -> None:
        """Refuse a model larger than :data:`MAX_MODEL_PARAMETERS`, naming the field that makes it so
        (before anything is built: ``model.num_layers=1000000`` would allocate until killed)."""
        total = self.parameters_without_vocab()
        if total <= MAX_MODEL_PARAMETERS:
            return
        h, f = self.hidden_size, self.ffn_hidden_size
        if self.max_position_embeddings * h > total // 2:
            name = "max_position_embeddings"
        elif self._per_layer() * 2 <= MAX_MODEL_PARAMETERS:
            name = "num_layers"
        else:
            name = "hidden_size" if 4 * h * h >= 2 * h * f else "ffn_hidden_size"
        raise ConfigError(f"model.{name}={getattr(self, name)}: the model would have {total:.3g} parameters "
                          f"(not counting the vocabulary), more than the {MAX_MODEL_PARAMETERS:.0e} this workbook "
                          f"trains (MAX_MODEL_PARAMETERS, docs/training.md); lower model.{name}")


def _check_rampup(ramp: Any, final: int) -> None:
    """``[start, increment, samples]``: three integers, start < global batch, the gap a multiple of increment."""
    key = "model.rampup_batch_size"
    if not isinstance(ramp, (list, tuple)) or len(ramp) != 3 or not all(
            isinstance(v, int) and not isinstance(v, bool) for v in ramp):
        raise ConfigError(f"{key}={ramp!r}: expected three integers [start batch, increment, ramp-up samples], "
                          "e.g. [4, 4, 64], or null")
    start, increment, samples = ramp
    if start < 1 or increment < 1 or samples < 1:
        raise ConfigError(f"{key}={list(ramp)}: start, increment and ramp-up samples must be ≥ 1")
    if start >= final or (final - start) % increment:
        raise ConfigError(f"{key}={list(ramp)}: the start batch must be below model.global_batch_size={final} and "
                          f"their gap a multiple of the increment (Megatron asserts both; equal sizes divide by zero "
                          "there): set null for a constant batch")


def _check_step_schedule(text: Any, seq_length: int, final: int) -> None:
    """``"THRESHOLD:BATCH ..."``: parseable, first threshold 0, thresholds increasing, batches growing
    (Megatron's training loop asserts that), the last batch = ``model.global_batch_size``."""
    key = "model.step_batch_size_schedule"
    try:
        if not isinstance(text, str):
            raise ValueError("not a string")
        schedule = parse_step_schedule(text, seq_length)
    except ValueError as exc:
        raise ConfigError(f"{key}={text!r}: {exc}; write entries like \"0:4 2048:8\" (tokens:global batch)") from None
    thresholds, sizes = [t for t, _ in schedule], [b for _, b in schedule]
    if not schedule or thresholds[0] != 0 or len(set(thresholds)) != len(thresholds):
        raise ConfigError(f"{key}={text!r}: the first threshold must be 0 and each later one larger (in tokens; "
                          f"÷ model.encoder_seq_length={seq_length} gives samples)")
    if min(sizes) < 1 or sizes != sorted(sizes):
        raise ConfigError(f"{key}={text!r}: batch sizes must be ≥ 1 and never shrink (Megatron asserts the number "
                          "of micro-batches only grows)")
    if sizes[-1] != final:
        raise ConfigError(f"{key}={text!r}: the last batch {sizes[-1]} differs from model.global_batch_size={final}; "
                          "Megatron takes the global batch from the schedule's last entry, so make them equal")


@dataclass
class RunConfig:
    """The whole file: ``trainer``, ``exp_manager``, ``model`` and ``allow_new_data_plan``."""

    trainer: TrainerConfig = field(default_factory=TrainerConfig)
    exp_manager: ExpManagerConfig = field(default_factory=ExpManagerConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    #: resume even when the samples already trained on would come in another order (data_plan)
    allow_new_data_plan: bool = False

    def validate(self, world_size: int | None = None) -> ParallelLayout:
        """Every section's rules, then those that join sections; ``world_size``: the processes
        actually launched (torchrun's ``WORLD_SIZE``), which must equal ``trainer.devices ×
        trainer.num_nodes``.  Returns the parallel layout (world and data-parallel size).
        Raises ConfigError naming the first bad field."""
        self.trainer.validate()
        self.exp_manager.validate()
        self.model.validate()
        _flag("allow_new_data_plan", self.allow_new_data_plan)
        layout = parallel_layout(OmegaConf.structured(self))
        if world_size is not None and world_size != layout.world_size:
            raise ConfigError(f"trainer.devices × trainer.num_nodes = {layout.world_size} but {world_size} process(es) "
                              f"were launched; set trainer.devices (per node) and trainer.num_nodes so that their "
                              f"product is {world_size}, e.g. trainer.devices={world_size}")
        if layout.tensor_parallel * layout.pipeline_parallel != 1:
            raise ConfigError(f"model.tensor_model_parallel_size={layout.tensor_parallel}, "
                              f"model.pipeline_model_parallel_size={layout.pipeline_parallel}: "
                              "this workbook's trainer runs data parallelism only; set both to 1")
        micro, dp = self.model.micro_batch_size, layout.data_parallel
        if self.model.global_batch_size % (micro * dp):
            raise ConfigError(f"model.global_batch_size={self.model.global_batch_size} is not divisible by "
                              f"model.micro_batch_size × DP = {micro} × {dp}; the global batch is micro × DP × "
                              "accumulation steps")
        self.model.validate_ramp(self.trainer.max_steps, dp)
        self.model.validate_shape()
        return layout


# ------------------------------------------------------------------------------ reading the YAML
def _sections(schema: type) -> dict[str, Any]:
    """Field name → its type (a section's dataclass, or a leaf's type)."""
    return typing.get_type_hints(schema)


def schema_keys(schema: type = RunConfig) -> list[str]:
    """Every leaf key of the schema, dotted (``model.data.seq_length``), in declaration order."""
    keys = []
    for name, kind in _sections(schema).items():
        keys += [f"{name}.{k}" for k in schema_keys(kind)] if dataclasses.is_dataclass(kind) else [name]
    return keys


def _known(raw: dict, schema: type, prefix: str = "") -> dict:
    """The part of ``raw`` (a plain dict, interpolations unresolved) that ``schema`` declares."""
    out = {}
    for name, kind in _sections(schema).items():
        if name not in raw:
            continue
        value = raw[name]
        if dataclasses.is_dataclass(kind):
            if not isinstance(value, dict):
                raise ConfigError(f"{prefix}{name}={value!r}: expected a section of keys; {LAYOUT_HINT}")
            value = _known(value, kind, f"{prefix}{name}.")
        out[name] = value
    return out


def _leaf_type(key: str) -> Any:
    """The declared type of the dotted leaf ``key`` (``None`` when it is not a leaf of RunConfig)."""
    schema: Any = RunConfig
    for name in key.split("."):
        if not dataclasses.is_dataclass(schema):
            return None
        schema = _sections(schema).get(name)
    return None if dataclasses.is_dataclass(schema) else schema


def _stand_in(kind: Any) -> Any:
    """A value of type ``kind`` that OmegaConf accepts (put where a wrongly typed value was)."""
    if typing.get_origin(kind) is typing.Union:
        return None
    return [] if typing.get_origin(kind) is list else {int: 0, float: 0.0, bool: False}.get(kind, "")


def _wrong_type(known: dict, key: str, value: Any) -> ConfigError:
    """The message for ``key``'s wrongly typed ``value``: its section's ``validate()`` with the
    value put back into an otherwise converted config (so the rule's words are said once)."""
    path = key.split("[")[0]
    *outer, name = path.split(".")
    holder = known
    for part in outer:
        holder = holder[part]
    if "[" in key:           # an element of a list: the section's rule sees the whole list
        value = holder[name]
    probe = copy.deepcopy(known)
    target = probe
    for part in outer:
        target = target[part]
    target[name] = _stand_in(_leaf_type(path))
    section: Any = _typed(probe)
    for part in outer:
        section = getattr(section, part)
    setattr(section, name, value)
    try:
        section.validate()
    except ConfigError as exc:
        return exc
    return ConfigError(f"{key}={value!r}: expected a value of type {_leaf_type(path)}")


def _typed(known: dict) -> RunConfig:
    """``known`` merged onto :class:`RunConfig` and turned into dataclass instances."""
    try:
        return OmegaConf.to_object(OmegaConf.merge(OmegaConf.structured(RunConfig), known))
    except OmegaConfBaseException as exc:
        key = str(getattr(exc, "full_key", "") or "config")
        if isinstance(exc, MissingMandatoryValue):
            raise ConfigError(f"{key} is missing from the config; {LAYOUT_HINT}") from None
        if isinstance(exc, ValidationError) and _leaf_type(key.split("[")[0]) is not None:
            raise _wrong_type(known, key, getattr(exc, "value", "?")) from None
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise ConfigError(f"{key}: cannot be resolved ({type(exc).__name__}: {first})") from None


def read_run_config(cfg: DictConfig, world_size: int | None = None) -> tuple[RunConfig, ParallelLayout]:
    """``cfg``'s declared keys as a :class:`RunConfig` (values converted to the declared types,
    e.g. ``trainer.precision`` ``32`` → ``"32"``; interpolations resolved), validated for
    ``world_size`` launched processes (:meth:`RunConfig.validate`), with its parallel layout.
    Raises ConfigError naming the first bad field."""
    config = _typed(_known(OmegaConf.to_container(cfg, resolve=False), RunConfig))
    return config, config.validate(world_size)
