"""The chapter 6 config read, checked and resolved — chapter 6 (end to end, book §6.2.2).

:func:`load_settings` takes a NeMo 1.x-layout YAML (``configs/megatron_gpt_tiny.yaml``) plus
Hydra-style ``key=value`` overrides and returns :class:`Settings`: plain numbers, resolved
dataset prefixes and the tokenizer path.  The file is read onto the typed schema of
:mod:`labsupport.training.schema` (OmegaConf structured configs: types, least values, allowed
names); the rules that join two fields are checked here.  Every problem is a
:class:`~labsupport.config.ConfigError` whose message starts with the field, e.g.
``model.global_batch_size=6 is not divisible by model.micro_batch_size × DP = 4 × 1``.

Resolution rules (so the config works from a fresh clone):

* a prefix ``work/indexed/<domain>_text_document`` for a shipped corpus (web, code, books,
  korean) is the workbook's own preprocessed file, built on first use
  (:func:`labsupport.datasets.preprocess.workbook_prefixes`); any other prefix is a path
  (relative ones from the repository root) and must have its ``.bin``/``.idx``;
* ``model.tokenizer.model: workbook`` is the workbook's standard SentencePiece model
  (:func:`labsupport.datasets.tokenizer.workbook_tokenizer`), built on first use; anything else
  is a ``.model`` path.  The datasets' sidecars must name the same tokenizer fingerprint.
"""
from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

import yaml
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from labsupport.config import ConfigError, load_config, parallel_layout
from labsupport.training.schema import typed_config
from labsupport.paths import DOMAINS, REPO_ROOT, work_dir

__all__ = ["Settings", "load_settings", "settings_from_config", "ConfigError", "DEFAULT_CONFIG",
           "resolve_prefix", "config_fingerprint"]

#: The chapter's config.
DEFAULT_CONFIG = REPO_ROOT / "configs" / "megatron_gpt_tiny.yaml"
_WORKBOOK_PREFIX = "work/indexed/"


@dataclass(frozen=True)
class Settings:
    """Everything one run needs, checked.  ``cfg`` is the resolved config (OmegaConf)."""

    cfg: DictConfig
    names: list[str]                 # dataset display names (web, code, …)
    prefixes: list[str]              # resolved .bin/.idx prefixes (absolute)
    weights: list[float]             # as written in data_prefix (normalised by the blend)
    tokenizer_path: Path
    tokenizer_fingerprint: str
    world_size: int
    data_parallel_size: int
    micro_batch_size: int
    global_batch_size: int
    num_microbatches: int
    seq_length: int
    max_steps: int
    seed: int
    precision: str                   # "32" or "bf16"
    accelerator: str                 # "cpu" | "gpu" | "auto"
    flags: dict[str, bool] = field(default_factory=dict)  # reset_position_ids, reset_attention_mask, eod_mask_loss

    @property
    def total_samples(self) -> int:
        """Samples the run draws: ``max_steps × global_batch_size`` (Megatron's train samples)."""
        return self.max_steps * self.global_batch_size

    @property
    def tokens_per_step(self) -> int:
        return self.global_batch_size * self.seq_length


def resolve_prefix(prefix: str, where: str) -> str:
    """A ``data_prefix`` entry → an absolute prefix with its ``.bin``/``.idx`` present.

    ``work/indexed/web_text_document`` → the workbook's file (built when missing); other
    relative paths are taken from the repository root.  ConfigError naming ``where`` when the
    files are missing.
    """
    text = str(prefix).strip()
    if text.startswith(_WORKBOOK_PREFIX):
        stem = text[len(_WORKBOOK_PREFIX):]
        domain = stem[: -len("_text_document")] if stem.endswith("_text_document") else None
        if domain in DOMAINS:
            from labsupport.datasets.preprocess import workbook_prefixes

            return workbook_prefixes([domain])[domain]
        path = work_dir("indexed") / stem
    else:
        path = Path(text) if os.path.isabs(text) else REPO_ROOT / text
    missing = [ext for ext in (".bin", ".idx") if not os.path.isfile(f"{path}{ext}")]
    if missing:
        raise ConfigError(
            f"{where}: prefix {text!r} has no {' or '.join(missing)} file; preprocess the corpus first "
            f"(python -m labsupport.preprocess --input FILE.jsonl --output-prefix ... ), or use one of the "
            f"workbook's prefixes {', '.join(_WORKBOOK_PREFIX + d + '_text_document' for d in DOMAINS)}")
    return str(path)


def _tokenizer(cfg: DictConfig) -> tuple[Path, str]:
    model = cfg.model.tokenizer.model          # library: checked by the schema (sentencepiece only)
    from labsupport.datasets.tokenizer import Tokenizer, workbook_tokenizer

    if model == "workbook":
        path = workbook_tokenizer()
    else:
        path = Path(str(model))
        path = path if path.is_absolute() else REPO_ROOT / path
        if not path.is_file():
            raise ConfigError(f"model.tokenizer.model={model!r}: no such file; give a SentencePiece .model "
                              "path or 'workbook' for the workbook's standard model")
    return path, Tokenizer(path).fingerprint


def config_fingerprint(cfg: DictConfig) -> str:
    """sha256 of the ``model`` section (architecture, data, batch, optimizer): what a
    checkpoint must share with the run that resumes it.  ``trainer.*`` may change (more steps,
    another number of processes)."""
    model = OmegaConf.to_container(cfg.model, resolve=True)
    return hashlib.sha256(json.dumps(model, sort_keys=True, default=str).encode()).hexdigest()


def settings_from_config(cfg: DictConfig, world_size: int | None = None) -> Settings:
    """Check ``cfg`` and resolve its prefixes and tokenizer.  ``world_size``: the processes
    actually launched (torchrun's ``WORLD_SIZE``); it must equal ``trainer.devices ×
    trainer.num_nodes``.  Types, least values and closed sets of names are the schema's
    (:mod:`labsupport.training.schema`); what depends on two fields is checked here.  Raises
    ConfigError naming the field.  ``Settings.cfg`` is the typed config."""
    from labsupport.datasets.blending import BlendError, get_blend_from_list, tokenizer_fingerprint

    cfg = typed_config(cfg)
    layout = parallel_layout(cfg)
    if world_size is not None and world_size != layout.world_size:
        raise ConfigError(f"trainer.devices × trainer.num_nodes = {layout.world_size} but {world_size} process(es) "
                          f"were launched; set trainer.devices (per node) and trainer.num_nodes so that their product "
                          f"is {world_size}, e.g. trainer.devices={world_size}")
    if layout.tensor_parallel * layout.pipeline_parallel != 1:
        raise ConfigError(f"model.tensor_model_parallel_size={layout.tensor_parallel}, model.pipeline_model_parallel_size="
                          f"{layout.pipeline_parallel}: this workbook's trainer runs data parallelism only; set both to 1")
    m = cfg.model
    micro, global_bs, dp, seq = m.micro_batch_size, m.global_batch_size, layout.data_parallel, m.encoder_seq_length
    if global_bs % (micro * dp):
        raise ConfigError(f"model.global_batch_size={global_bs} is not divisible by model.micro_batch_size × DP = "
                          f"{micro} × {dp}; the global batch is micro × DP × accumulation steps")
    if m.data.seq_length != seq:
        raise ConfigError(f"model.data.seq_length={m.data.seq_length} differs from "
                          f"model.encoder_seq_length={seq}; keep them equal (NeMo interpolates one from the other)")
    if m.max_position_embeddings < seq:
        raise ConfigError("model.max_position_embeddings is smaller than model.encoder_seq_length")
    if m.hidden_size % m.num_attention_heads:
        raise ConfigError(f"model.hidden_size={m.hidden_size} is not divisible by "
                          f"model.num_attention_heads={m.num_attention_heads}")
    precision = cfg.trainer.precision
    flags = {k: bool(m.data[k]) for k in ("reset_position_ids", "reset_attention_mask", "eod_mask_loss")}

    raw = OmegaConf.to_container(m.data.data_prefix, resolve=True)
    try:
        parsed = get_blend_from_list(raw, check_files=False)
    except BlendError as exc:
        raise ConfigError(f"model.data.{exc}") from None
    prefixes_raw, weights = parsed
    if weights is None:
        weights = [1.0] * len(prefixes_raw)
    step = 2
    prefixes = [resolve_prefix(p, f"model.data.data_prefix entry {1 + step * k}") for k, p in enumerate(prefixes_raw)]
    names = [Path(p).name.removesuffix("_text_document") for p in prefixes]
    tok_path, tok_fp = _tokenizer(cfg)
    for name_, prefix, entry in zip(names, prefixes, prefixes_raw):
        fp = tokenizer_fingerprint(prefix)
        if fp is not None and fp != tok_fp:
            raise ConfigError(f"model.data.data_prefix {entry!r} was tokenized with tokenizer {fp[:12]}… but "
                              f"model.tokenizer.model is {tok_fp[:12]}… ({tok_path.name}); re-preprocess with the "
                              "same model (book §6.2.4: one tokenizer for preprocessing, training and inference)")
    return Settings(cfg=cfg, names=names, prefixes=prefixes, weights=[float(w) for w in weights],
                    tokenizer_path=tok_path, tokenizer_fingerprint=tok_fp, world_size=layout.world_size,
                    data_parallel_size=dp, micro_batch_size=micro, global_batch_size=global_bs,
                    num_microbatches=global_bs // (micro * dp), seq_length=seq,
                    max_steps=cfg.trainer.max_steps, seed=m.seed,
                    precision="bf16" if precision.startswith("bf16") else "32", accelerator=cfg.trainer.accelerator,
                    flags=flags)


def load_settings(source: str | os.PathLike = DEFAULT_CONFIG, overrides: Sequence[str] = (),
                  world_size: int | None = None) -> Settings:
    """``load_config`` (unknown override keys refused) + :func:`settings_from_config`."""
    try:
        cfg = load_config(source, overrides)
    except FileNotFoundError as exc:
        raise ConfigError(f"--config: {exc}") from None
    except (OmegaConfBaseException, yaml.YAMLError) as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise ConfigError(f"{os.fspath(source)}: not a readable YAML config ({first}); check its indentation and quoting") from None
    return settings_from_config(cfg, world_size)
