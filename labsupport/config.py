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
from typing import Iterable

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


def parallel_layout(cfg: DictConfig) -> ParallelLayout:
    """Derive the data-parallel size from trainer.devices × trainer.num_nodes / (TP × PP × CP).

    Megatron-Core's rules (megatron-core 0.16.1), each checked when the config has the key:

    * ``parallel_state.initialize_model_parallel``: the world size divides by TP × PP × CP
      (``model.context_parallel_size``, default 1); DP = world / (TP × PP × CP);
    * ``TransformerConfig.__post_init__``: ``model.num_attention_heads`` divides by TP, and
      ``model.num_query_groups`` (KV heads) is a multiple or a divisor of TP;
    * ``transformer_block.get_num_layers_to_build``: ``model.num_layers`` divides by PP (the even
      split; Megatron's uneven first/last-stage options are not modelled here).

    Raises ConfigError naming the field when a size is not a positive integer or a rule fails.
    TP larger than ``trainer.devices`` is legal — the layout says so in ``tp_spans_nodes`` —
    but slow; :func:`labsupport.distributed.gpu_grid.check_layout` warns with the cost.
    """
    def positive(key: str, default: int | None = None) -> int:
        value = OmegaConf.select(cfg, key, default=default)
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise ConfigError(f"{key} must be a positive integer, got {value!r}")
        return value

    devices, nodes = positive("trainer.devices"), positive("trainer.num_nodes")
    tp = positive("model.tensor_model_parallel_size")
    pp = positive("model.pipeline_model_parallel_size")
    cp = positive("model.context_parallel_size", 1)
    world = devices * nodes
    if world % (tp * pp * cp):
        cp_part = " × model.context_parallel_size" if cp > 1 else ""
        raise ConfigError(f"trainer.devices × trainer.num_nodes = {world} GPUs is not divisible by "
                          f"model.tensor_model_parallel_size × model.pipeline_model_parallel_size{cp_part} = "
                          f"{tp}×{pp}" + (f"×{cp}" if cp > 1 else ""))
    _check_model_rules(cfg, positive, tp, pp)
    return ParallelLayout(world, tp, pp, world // (tp * pp * cp), gpus_per_node=devices)


def _check_model_rules(cfg: DictConfig, positive, tp: int, pp: int) -> None:
    """Megatron-Core's rules that tie the model's shape to TP and PP (see :func:`parallel_layout`)."""
    if OmegaConf.select(cfg, "model.num_attention_heads") is not None:
        heads = positive("model.num_attention_heads")
        if heads % tp:
            raise ConfigError(f"model.num_attention_heads = {heads} is not divisible by "
                              f"model.tensor_model_parallel_size = {tp}: each TP rank holds whole heads")
    if OmegaConf.select(cfg, "model.num_query_groups") is not None:
        groups = positive("model.num_query_groups")
        if groups % tp and tp % groups:
            raise ConfigError(f"model.num_query_groups = {groups} is neither a multiple nor a divisor of "
                              f"model.tensor_model_parallel_size = {tp}")
    if OmegaConf.select(cfg, "model.num_layers") is not None:
        layers = positive("model.num_layers")
        if layers % pp:
            raise ConfigError(f"model.num_layers = {layers} is not divisible by "
                              f"model.pipeline_model_parallel_size = {pp}: every stage holds the same number of layers")
