"""Chapter 6's typed config (labsupport.training.schema): OmegaConf structured configs refuse bad
types, each section's validate() refuses bad values, every message names the field, the config
is dataclass instances read as attributes, and the command line exits 2 with one line."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest
from omegaconf import OmegaConf

from labsupport.config import flat_items
from labsupport.paths import REPO_ROOT
from labsupport.training import schema as S
from labsupport.training.settings import DEFAULT_CONFIG, ConfigError, load_settings


def test_schema_declares_exactly_the_keys_of_the_chapter_config():
    file_keys = [key for key, _ in flat_items(OmegaConf.load(DEFAULT_CONFIG))]
    assert S.schema_keys() == file_keys


def test_values_are_converted_to_the_declared_types():
    cfg = load_settings().config
    assert cfg.trainer.precision == "32"                      # YAML's int 32 read as the string "32"
    assert isinstance(cfg.model.optim.lr, float) and isinstance(cfg.model.optim.betas[0], float)
    assert cfg.model.max_position_embeddings == cfg.model.encoder_seq_length == 64  # interpolation resolved
    assert type(cfg) is S.RunConfig and type(cfg.model.data) is S.DataConfig  # dataclass instances
    assert isinstance(cfg.model.data.data_prefix, list) and cfg.model.data.flags["reset_position_ids"] is True


@pytest.mark.parametrize("override, message", [
    ("model.micro_batch_size=0", "model.micro_batch_size=0: expected an integer ≥ 1"),
    ("model.hidden_size=wide", "model.hidden_size='wide': expected an integer ≥ 1"),
    ("model.micro_batch_size=2.5", "model.micro_batch_size=2.5: expected an integer ≥ 1"),
    ("model.seed=-1", "model.seed=-1: expected an integer ≥ 0"),
    ("model.optim.sched.warmup_steps=-1", "model.optim.sched.warmup_steps=-1: expected an integer ≥ 0"),
    ("model.data.reset_attention_mask=maybe", "model.data.reset_attention_mask='maybe': expected true or false"),
    ("model.optim.lr=0", "model.optim.lr=0.0: expected a number > 0"),
    ("model.optim.weight_decay=-0.1", "model.optim.weight_decay=-0.1: expected a number ≥ 0"),
    ("model.optim.betas=[0.9,x]", "model.optim.betas[1]='x': expected a list of numbers"),
    ("trainer.precision=16", "trainer.precision='16': use 32 or bf16"),
    ("trainer.accelerator=tpu", "trainer.accelerator='tpu': use auto, cpu or gpu"),
    ("model.tokenizer.library=huggingface",
     "model.tokenizer.library='huggingface': this workbook trains with sentencepiece"),
    ("model.data.data_impl=lazy", "model.data.data_impl='lazy': this workbook's trainer supports 'mmap' only"),
    ("model.data.data_prefix=web", "model.data.data_prefix='web': expected a list"),
    ("model.data=5", "model.data=5: expected a section of keys"),
    ("model.max_position_embeddings=${model.tokenizer.library}",
     "model.max_position_embeddings='sentencepiece': expected an integer ≥ 2"),
    ("model.max_position_embeddings=${nowhere}", "model.max_position_embeddings: cannot be resolved"),
])
def test_a_bad_value_names_its_field_and_what_to_write(override, message):
    with pytest.raises(ConfigError) as info:
        load_settings(overrides=[override])
    assert str(info.value).startswith(message), str(info.value)


@pytest.mark.parametrize("override, message", [
    ("model.global_batch_size=6", "model.global_batch_size=6 is not divisible by model.micro_batch_size × DP = 4 × 1"),
    ("model.data.seq_length=32", "model.data.seq_length=32 differs from model.encoder_seq_length=64"),
    ("model.hidden_size=63", "model.hidden_size=63 is not divisible by model.num_attention_heads=2"),
    ("exp_manager.resume_if_exists=perhaps", "exp_manager.resume_if_exists='perhaps': expected true or false"),
])
def test_a_rule_joining_fields_names_them(override, message):
    with pytest.raises(ConfigError) as info:
        S.read_run_config(OmegaConf.merge(OmegaConf.load(DEFAULT_CONFIG), OmegaConf.from_dotlist([override])))
    assert str(info.value).startswith(message), str(info.value)


def test_validate_checks_a_value_set_after_reading():
    config, layout = S.read_run_config(OmegaConf.load(DEFAULT_CONFIG), world_size=1)
    assert (layout.world_size, layout.data_parallel) == (1, 1)
    config.model.micro_batch_size = 3
    with pytest.raises(ConfigError, match=r"^model.global_batch_size=8 is not divisible by model.micro_batch_size"):
        config.validate()
    with pytest.raises(ConfigError, match=r"^trainer.devices × trainer.num_nodes = 1 but 2 process"):
        S.read_run_config(OmegaConf.load(DEFAULT_CONFIG), world_size=2)


def test_a_missing_key_is_named(tmp_path):
    text = DEFAULT_CONFIG.read_text(encoding="utf-8").replace("  num_layers: 2\n", "")
    assert "num_layers" not in text
    (tmp_path / "short.yaml").write_text(text, encoding="utf-8")
    with pytest.raises(ConfigError, match=r"^model\.num_layers is missing from the config; see configs/"):
        load_settings(tmp_path / "short.yaml")


def test_a_key_added_on_purpose_is_kept_out_of_the_typed_config():
    settings = load_settings(overrides=["+model.data.num_workers=2"])
    assert not hasattr(settings.config.model.data, "num_workers")


def test_the_command_exits_2_with_one_line_naming_the_field():
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    proc = subprocess.run([sys.executable, "-m", "labsupport", "train", "--no-progress", "model.micro_batch_size=0"],
                          cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=240)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.strip().splitlines() == ["error: model.micro_batch_size=0: expected an integer ≥ 1"]


def test_the_config_fingerprint_is_the_model_section_as_written():
    """Checkpoints store sha256 of the model section's JSON; a resume compares it, so the typed
    config must digest to what the earlier OmegaConf-based code wrote for the same YAML."""
    import hashlib
    import json

    from labsupport.training.settings import config_fingerprint

    raw = OmegaConf.to_container(OmegaConf.load(DEFAULT_CONFIG).model, resolve=True)
    # keys added later (the batch ramp) are left out while null: the fingerprint older checkpoints recorded
    assert raw.pop("rampup_batch_size") is None and raw.pop("step_batch_size_schedule") is None
    written = hashlib.sha256(json.dumps(raw, sort_keys=True, default=str).encode()).hexdigest()
    config, _ = S.read_run_config(OmegaConf.load(DEFAULT_CONFIG))
    assert config_fingerprint(config) == written
    ramped = OmegaConf.merge(OmegaConf.load(DEFAULT_CONFIG),
                             OmegaConf.from_dotlist(["model.rampup_batch_size=[4,4,8]"]))
    assert config_fingerprint(S.read_run_config(ramped)[0]) != written    # once set, it is part of the model config
    extra = OmegaConf.merge(OmegaConf.load(DEFAULT_CONFIG), OmegaConf.from_dotlist(["model.data.num_workers=2"]))
    assert config_fingerprint(S.read_run_config(extra)[0]) == written      # an undeclared key is not part of it
    config.model.seed += 1
    assert config_fingerprint(config) != written
