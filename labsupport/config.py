"""NeMo-style YAML configs read with OmegaConf (chapter 0; chapter 6 end to end).

NeMo declares model, data and trainer in YAML and overrides keys from the command line
(Hydra's ``key.sub=value`` dotlist). ``load_config`` does the same; ``describe_config`` says
what each key controls and which chapter shows it; ``parallel_layout`` derives the
data-parallel size and refuses layouts that cannot work, naming the field. A layout that works
but is slow — tensor parallelism wider than one node — is allowed, as in Megatron-Core;
``labsupport.distributed.gpu_grid.check_layout`` warns about it with the cost in seconds.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable

from omegaconf import DictConfig, OmegaConf

from labsupport.paths import CONFIG_DIR

#: key → (what it controls, where the workbook shows it)
KEY_NOTES: dict[str, tuple[str, str]] = {
    "model.hidden_size": ("width of every transformer layer (d_model)", "book §6.3"),
    "model.num_layers": ("number of transformer layers", "book §6.3"),
    "model.tensor_model_parallel_size": ("GPUs that split each layer's matrices (TP); all-gather / reduce-scatter "
                                         "inside every layer", "ch00 grid, ch05 collectives"),
    "model.pipeline_model_parallel_size": ("GPUs that hold consecutive groups of layers (PP); send/recv between stages",
                                           "ch00 grid, ch05 collectives"),
    "model.precision": ("number format of the compute: bf16 halves memory and traffic vs fp32", "book §1.14"),
    "data.data_prefix": ("weights and .bin/.idx prefixes to blend", "ch02 indexing, ch03 blending"),
    "data.seq_length": ("tokens per training sample; packing fills it", "ch04 packing"),
    "data.tokenizer.type": ("tokenizer library; must match preprocessing and inference", "ch01 tokenization"),
    "data.tokenizer.model": ("the tokenizer model file (its fingerprint is stored beside each dataset)", "ch01, ch02"),
    "trainer.devices": ("GPUs per node", "ch00 environment check"),
    "trainer.num_nodes": ("machines; devices × num_nodes GPUs in all", "ch05 collectives"),
    "trainer.max_steps": ("optimizer steps to run; with the batch size it fixes the samples drawn", "ch03 blending"),
}

#: Where a real NeMo 1.x config (``megatron_gpt_config.yaml``) keeps the keys that the book's conceptual
#: config puts elsewhere; the other keys have the same path in both.
NEMO1_KEYS: dict[str, str] = {
    "model.precision": "trainer.precision",
    "data.data_prefix": "model.data.data_prefix",
    "data.seq_length": "model.encoder_seq_length (model.data.seq_length follows it)",
    "data.tokenizer.type": "model.tokenizer.library",
    "data.tokenizer.model": "model.tokenizer.model",
}


class ConfigError(ValueError):
    """A config value that cannot work; the message names the field."""


def load_config(source: str | Path = "gpt_pretrain", overrides: Iterable[str] = ()) -> DictConfig:
    """Load a YAML config (a name in ``configs/`` or a path) and apply Hydra-style overrides.

    ``overrides`` are dotlist strings such as ``"model.tensor_model_parallel_size=4"``.
    A key that does not exist in the file is refused (a typo would otherwise add a new key
    silently); use ``+key=value`` to add one on purpose, as Hydra does.
    """
    path = Path(source)
    if not path.suffix:
        path = CONFIG_DIR / f"{source}.yaml"
    if not path.is_file():
        raise FileNotFoundError(f"config {path.name!r} not found (looked in {CONFIG_DIR.name}/ and the given path)")
    cfg = OmegaConf.load(path)
    strict, additions = [], []
    for item in overrides:
        if "=" not in item:
            raise ConfigError(f"override {item!r}: expected key=value, e.g. trainer.devices=4")
        (additions if item.startswith("+") else strict).append(item.lstrip("+"))
    for item in strict:
        key = item.split("=", 1)[0]
        if OmegaConf.select(cfg, key, default="__missing__") == "__missing__":
            raise ConfigError(f"override {item!r}: key {key!r} is not in {path.name}; prefix it with '+' to add it")
    return OmegaConf.merge(cfg, OmegaConf.from_dotlist(strict + additions))


def flat_items(cfg: DictConfig, prefix: str = "") -> list[tuple[str, object]]:
    """(dotted key, value) pairs of the leaves, in file order; lists stay whole."""
    items: list[tuple[str, object]] = []
    for key, value in cfg.items():
        dotted = f"{prefix}{key}"
        if isinstance(value, DictConfig):
            items += flat_items(value, dotted + ".")
        else:
            items.append((dotted, OmegaConf.to_container(value) if hasattr(value, "_content") else value))
    return items


def describe_config(cfg: DictConfig) -> list[tuple[str, object, str, str]]:
    """Rows (key, value, what it controls, chapter) for every leaf of ``cfg``; where NeMo 1.x keeps
    the key under another path, ``what`` ends with it (see :data:`NEMO1_KEYS`)."""
    rows = []
    for key, value in flat_items(cfg):
        what, where = KEY_NOTES.get(key, ("(not explained in this workbook)", ""))
        if key in NEMO1_KEYS:
            what += f" — NeMo 1.x: {NEMO1_KEYS[key]}"
        rows.append((key, value, what, where))
    return rows


@dataclass(frozen=True)
class ParallelLayout:
    """How the GPUs of a run are divided: world = TP × PP × DP (× CP when the config sets it)."""

    world_size: int
    tensor_parallel: int
    pipeline_parallel: int
    data_parallel: int
    gpus_per_node: int = 0

    @property
    def tp_nodes(self) -> int:
        """Nodes one tensor-parallel group spans (1 = it stays on one node's NVLink)."""
        if self.gpus_per_node < 1:
            return 1
        return -(-self.tensor_parallel // self.gpus_per_node)

    @property
    def tp_spans_nodes(self) -> bool:
        """True when TP > GPUs per node: legal, but TP's per-layer traffic crosses the network."""
        return self.tp_nodes > 1


@dataclass(frozen=True)
class LayoutRule:
    """One of Megatron's layout rules: a row of :data:`LAYOUT_RULES`.

    ``applies(v)`` and ``holds(v)`` read the sizes ``v`` (see :func:`parallel_layout`; a key the config
    lacks is None); ``message(v)`` is the ConfigError's text, naming the fields; ``source`` is the
    Megatron-LM file and line that checks it, at the tag named there.
    """

    name: str
    applies: Callable[[dict], bool]
    holds: Callable[[dict], bool]
    message: Callable[[dict], str]
    source: str


def _world_message(v: dict) -> str:
    cp_part = " × model.context_parallel_size" if v["cp"] > 1 else ""
    return (f"trainer.devices × trainer.num_nodes = {v['world']} GPUs is not divisible by "
            f"model.tensor_model_parallel_size × model.pipeline_model_parallel_size{cp_part} = "
            f"{v['tp']}×{v['pp']}" + (f"×{v['cp']}" if v["cp"] > 1 else ""))


_TC = "megatron/core/transformer/transformer_config.py"
#: Megatron's layout rules, one row each, in the order they are checked (Megatron-LM tag core_v0.16.1,
#: the megatron-core installed here; file:line of the check). A rule whose keys the config lacks is skipped.
LAYOUT_RULES: tuple[LayoutRule, ...] = (
    LayoutRule("the world size divides by TP × PP × CP", lambda v: True,
               lambda v: v["world"] % (v["tp"] * v["pp"] * v["cp"]) == 0, _world_message,
               "core_v0.16.1 megatron/core/parallel_state.py:741 (initialize_model_parallel)"),
    LayoutRule("the attention heads divide by TP", lambda v: v["heads"] is not None,
               lambda v: v["heads"] % v["tp"] == 0,
               lambda v: f"model.num_attention_heads = {v['heads']} is not divisible by "
                         f"model.tensor_model_parallel_size = {v['tp']}: each TP rank holds whole heads",
               f"core_v0.16.1 {_TC}:924 (TransformerConfig.__post_init__)"),
    LayoutRule("the KV groups are a multiple or a divisor of TP", lambda v: v["groups"] is not None,
               lambda v: v["groups"] % v["tp"] == 0 or v["tp"] % v["groups"] == 0,
               lambda v: f"model.num_query_groups = {v['groups']} is neither a multiple nor a divisor of "
                         f"model.tensor_model_parallel_size = {v['tp']}",
               f"core_v0.16.1 {_TC}:940 (TransformerConfig.__post_init__)"),
    LayoutRule("the FFN hidden size divides by TP", lambda v: v["ffn"] is not None,
               lambda v: v["ffn"] % v["tp"] == 0,
               lambda v: f"model.ffn_hidden_size = {v['ffn']} is not divisible by "
                         f"model.tensor_model_parallel_size = {v['tp']}: the MLP's first matrix is split by columns",
               "core_v0.16.1 megatron/core/tensor_parallel/layers.py:842 (ColumnParallelLinear: "
               "divide(output_size, world_size), megatron/core/utils.py:468)"),
    LayoutRule("the layers divide by PP (even split)", lambda v: v["layers"] is not None,
               lambda v: v["layers"] % v["pp"] == 0,
               lambda v: f"model.num_layers = {v['layers']} is not divisible by model.pipeline_model_parallel_size = "
                         f"{v['pp']}: every stage holds the same number of layers",
               "core_v0.16.1 megatron/core/transformer/transformer_block.py:157 (get_num_layers_to_build)"),
    LayoutRule("the layers divide by PP × VP (interleaved)", lambda v: v["layers"] is not None and v["vp"] > 1,
               lambda v: v["layers"] % (v["pp"] * v["vp"]) == 0,
               lambda v: f"model.num_layers = {v['layers']} is not divisible by model.pipeline_model_parallel_size × "
                         f"model.virtual_pipeline_model_parallel_size = {v['pp']}×{v['vp']}: every virtual stage "
                         f"holds the same number of layers",
               "core_v0.16.1 megatron/core/transformer/transformer_block.py:177 (get_num_layers_to_build); "
               "megatron/training/arguments.py:548"),
    LayoutRule("the sequence divides by TP with sequence parallelism", lambda v: v["seq"] is not None and v["sp"],
               lambda v: v["seq"] % v["tp"] == 0,
               lambda v: f"data.seq_length = {v['seq']} is not divisible by model.tensor_model_parallel_size = "
                         f"{v['tp']} with model.sequence_parallel: each TP rank holds seq_length / TP tokens",
               "core_v0.16.1 megatron/core/tensor_parallel/mappings.py:70 (_split_along_first_dim)"),
    LayoutRule("the sequence divides by 2 × CP with context parallelism",
               lambda v: v["seq"] is not None and v["cp"] > 1,
               lambda v: v["seq"] % (2 * v["cp"]) == 0,
               lambda v: f"data.seq_length = {v['seq']} is not divisible by 2 × model.context_parallel_size = "
                         f"2×{v['cp']}: each CP rank holds two of 2 × CP chunks (causal attention's load balance)",
               "core_v0.16.1 megatron/training/arguments.py:818"),
)


def parallel_layout(cfg: DictConfig) -> ParallelLayout:
    """Derive the data-parallel size from trainer.devices × trainer.num_nodes / (TP × PP × CP).

    Checks every row of :data:`LAYOUT_RULES` (Megatron-Core's rules, each with its source line at
    core_v0.16.1) whose keys the config has: ``model.context_parallel_size`` (default 1),
    ``model.virtual_pipeline_model_parallel_size`` (default 1), ``model.sequence_parallel`` (default
    false), ``model.num_attention_heads``, ``model.num_query_groups``, ``model.num_layers``,
    ``model.ffn_hidden_size`` and ``data.seq_length``. The even layer split only: Megatron's uneven
    first/last-stage options are not modelled here.

    Raises ConfigError naming the fields when a size is not a positive integer or a rule fails.
    TP larger than ``trainer.devices`` is legal — the layout says so in ``tp_spans_nodes`` —
    but slow; :func:`labsupport.distributed.gpu_grid.check_layout` warns with the cost.
    """
    v = layout_sizes(cfg)
    for rule in LAYOUT_RULES:
        if rule.applies(v) and not rule.holds(v):
            raise ConfigError(rule.message(v))
    return ParallelLayout(v["world"], v["tp"], v["pp"], v["world"] // (v["tp"] * v["pp"] * v["cp"]),
                          gpus_per_node=v["devices"])


def layout_sizes(cfg: DictConfig) -> dict:
    """The sizes :data:`LAYOUT_RULES` read, from ``cfg`` (None for an absent optional key).

    Raises ConfigError naming the key when a size is not a positive integer, or
    ``model.sequence_parallel`` is not a boolean.
    """
    def positive(key: str, default: int | None = None) -> int:
        value = OmegaConf.select(cfg, key, default=default)
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise ConfigError(f"{key} must be a positive integer, got {value!r}")
        return value

    def optional(key: str) -> int | None:
        return None if OmegaConf.select(cfg, key) is None else positive(key)

    v = {"devices": positive("trainer.devices"), "nodes": positive("trainer.num_nodes"),
         "tp": positive("model.tensor_model_parallel_size"), "pp": positive("model.pipeline_model_parallel_size"),
         "cp": positive("model.context_parallel_size", 1),
         "vp": positive("model.virtual_pipeline_model_parallel_size", 1),
         "heads": optional("model.num_attention_heads"), "groups": optional("model.num_query_groups"),
         "layers": optional("model.num_layers"), "ffn": optional("model.ffn_hidden_size"),
         "seq": optional("data.seq_length")}
    sp = OmegaConf.select(cfg, "model.sequence_parallel", default=False)
    if not isinstance(sp, bool):
        raise ConfigError(f"model.sequence_parallel must be true or false, got {sp!r}")
    v["sp"], v["world"] = sp, v["devices"] * v["nodes"]
    return v
