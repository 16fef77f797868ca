"""The chapter 6 config read, checked and resolved — chapter 6 (end to end, book §6.2.2).

:func:`load_settings` takes a NeMo 1.x-layout YAML (``configs/megatron_gpt_tiny.yaml``) plus
Hydra-style ``key=value`` overrides and returns :class:`Settings`: the typed, checked config
(:class:`~labsupport.training.schema.RunConfig`, ``settings.config``) and what it resolves to on
this machine — dataset prefixes, the tokenizer path and fingerprint, world and data-parallel
size.  Every problem is a :class:`~labsupport.config.ConfigError` whose message starts with the
field, e.g.
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

import dataclasses
import hashlib
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import yaml
from omegaconf import DictConfig
from omegaconf.errors import OmegaConfBaseException

from labsupport.config import ConfigError, load_config
from labsupport.datasets.preprocess import workbook_prefixes
from labsupport.datasets.tokenizer import Tokenizer, workbook_tokenizer
from labsupport.paths import DOMAINS, REPO_ROOT, work_dir
from labsupport.training.batch_ramp import BatchSchedule
from labsupport.training.schema import RunConfig, read_run_config

__all__ = ["Settings", "load_settings", "read_config", "settings_from_config", "ConfigError", "DEFAULT_CONFIG",
           "resolve_prefix", "config_fingerprint", "model_dict", "RunConfig"]

#: The chapter's config.
DEFAULT_CONFIG = REPO_ROOT / "configs" / "megatron_gpt_tiny.yaml"
_WORKBOOK_PREFIX = "work/indexed/"


@dataclass(frozen=True)
class Settings:
    """What the checked config resolves to on this machine, and the config itself (``config``:
    read every configured value there, e.g. ``settings.config.model.micro_batch_size``)."""

    config: RunConfig
    names: list[str]                 # dataset display names (web, code, …)
    prefixes: list[str]              # resolved .bin/.idx prefixes (absolute)
    tokenizer_path: Path
    tokenizer_fingerprint: str
    world_size: int
    data_parallel_size: int
    index_mapping_dir: str | None = None   # the index cache folder, absolute (None: Megatron's default per prefix)

    @property
    def num_microbatches(self) -> int:
        """Micro-batches per rank in a step at the full global batch: global batch ÷ (micro batch × DP)
        (every step without a ramp-up; validation always)."""
        m = self.config.model
        return m.global_batch_size // (m.micro_batch_size * self.data_parallel_size)

    @property
    def schedule(self) -> BatchSchedule:
        """The global batch of every step (:mod:`~labsupport.training.batch_ramp`; constant without a ramp-up)."""
        return self.config.model.batch_schedule(self.data_parallel_size)

    @property
    def total_samples(self) -> int:
        """Samples the run draws: the global batches of its ``max_steps`` steps (Megatron's train
        samples; ``max_steps × global_batch_size`` without a ramp-up)."""
        return self.schedule.consumed_after(self.config.trainer.max_steps)

    @property
    def tokens_per_step(self) -> int:
        return self.config.model.global_batch_size * self.config.model.encoder_seq_length


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
            return workbook_prefixes([domain])[domain]
        path = work_dir("indexed") / stem
    else:
        path = Path(text) if os.path.isabs(text) else REPO_ROOT / text
    missing = [ext for ext in (".bin", ".idx") if not os.path.isfile(f"{path}{ext}")]
    if missing:
        raise ConfigError(
            f"{where}: prefix {text!r} has no {' or '.join(missing)} file; preprocess the corpus first "
            f"(.venv/bin/python -m labsupport preprocess --input FILE.jsonl --output-prefix ... ), or use one of the "
            f"workbook's prefixes {', '.join(_WORKBOOK_PREFIX + d + '_text_document' for d in DOMAINS)}")
    return str(path)


def _tokenizer(config: RunConfig) -> tuple[Path, str]:
    model = config.model.tokenizer.model          # library: checked by the schema (sentencepiece only)
    if model == "workbook":
        path = workbook_tokenizer()
    else:
        path = Path(model)
        path = path if path.is_absolute() else REPO_ROOT / path
        if not path.is_file():
            raise ConfigError(f"model.tokenizer.model={model!r}: no such file; give a SentencePiece .model "
                              "path or 'workbook' for the workbook's standard model")
    return path, Tokenizer(path).fingerprint


#: ``model`` keys added after checkpoints were first saved: left out of :func:`model_dict` while null, so
#: the fingerprint of a config that does not use them is the one older checkpoints recorded
_LATER_KEYS = ("rampup_batch_size", "step_batch_size_schedule")


def model_dict(config: RunConfig) -> dict:
    """The ``model`` section as plain values (what a checkpoint stores and compares)."""
    values = dataclasses.asdict(config.model)
    return {k: v for k, v in values.items() if not (k in _LATER_KEYS and v is None)}


def config_fingerprint(config: RunConfig) -> str:
    """sha256 of the ``model`` section (architecture, data, batch, optimizer): what a
    checkpoint must share with the run that resumes it.  ``trainer.*`` may change (more steps,
    another number of processes)."""
    return hashlib.sha256(json.dumps(model_dict(config), sort_keys=True, default=str).encode()).hexdigest()


def settings_from_config(cfg: DictConfig, world_size: int | None = None) -> Settings:
    """Read ``cfg`` as a :class:`RunConfig`, check it (:meth:`RunConfig.validate`: ``world_size``
    is the processes actually launched, torchrun's ``WORLD_SIZE``), and resolve its prefixes and
    tokenizer.  Raises ConfigError naming the field."""
    from labsupport.datasets.blending import tokenizer_fingerprint  # noqa: PLC0415 - blending loads torch; reading a config stays torch-free

    config, layout = read_run_config(cfg, world_size)
    written, _ = config.model.data.blend()
    prefixes = [resolve_prefix(p, f"model.data.data_prefix entry {1 + 2 * k}") for k, p in enumerate(written)]
    names = [Path(p).name.removesuffix("_text_document") for p in prefixes]
    tok_path, tok_fp = _tokenizer(config)
    for prefix, entry in zip(prefixes, written):
        fp = tokenizer_fingerprint(prefix)
        if fp is not None and fp != tok_fp:
            raise ConfigError(f"model.data.data_prefix {entry!r} was tokenized with tokenizer {fp[:12]}… but "
                              f"model.tokenizer.model is {tok_fp[:12]}… ({tok_path.name}); re-preprocess with the "
                              "same model (book §6.2.4: one tokenizer for preprocessing, training and inference)")
    return Settings(config=config, names=names, prefixes=prefixes, tokenizer_path=tok_path,
                    tokenizer_fingerprint=tok_fp, world_size=layout.world_size,
                    data_parallel_size=layout.data_parallel,
                    index_mapping_dir=_cache_dir(config.model.data.index_mapping_dir))


def _cache_dir(value: str | None) -> str | None:
    """``model.data.index_mapping_dir`` as a path (relative ones from the repository root)."""
    if value is None:
        return None
    return str(Path(value) if os.path.isabs(value) else REPO_ROOT / value)


def load_settings(source: str | os.PathLike = DEFAULT_CONFIG, overrides: Sequence[str] = (),
                  world_size: int | None = None) -> Settings:
    """:func:`read_config` + :func:`settings_from_config`."""
    return settings_from_config(read_config(source, overrides), world_size)


def read_config(source: str | os.PathLike = DEFAULT_CONFIG, overrides: Sequence[str] = ()) -> DictConfig:
    """``load_config`` (unknown override keys refused), a missing or unreadable file as ConfigError."""
    try:
        return load_config(source, overrides)
    except FileNotFoundError as exc:
        raise ConfigError(f"--config: {exc}") from None
    except (OmegaConfBaseException, yaml.YAMLError) as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise ConfigError(f"{os.fspath(source)}: not a readable YAML config ({first}); "
                          "check its indentation and quoting") from None
