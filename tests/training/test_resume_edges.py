"""Resume at the edges (issue #32 item 12): a flipped bit in a checkpoint's format string, a
restarted job whose run had already finished, and a model too large to build.

Faults injected: the format string of the newest checkpoint changed by one bit (its checksum
unchanged), ``--resume-if-exists`` after the last save, ``model.num_layers=1000000``.
"""
from __future__ import annotations

import pytest
import torch

from labsupport.config import ConfigError
from labsupport.training import checkpoint as ckpt
from labsupport.training.cli import EXIT_USAGE
from labsupport.training.schema import MAX_MODEL_PARAMETERS
from labsupport.training.settings import load_settings
from tests.training import test_faults
from tests.training.test_faults import TORCH, errors, run_main, tiny

tiny_prefix = test_faults.tiny_prefix   # the module's 12-document corpus (a fixture)


def test_a_flipped_bit_in_the_format_string_is_damage_and_falls_back(tmp_path, capsys, tiny_prefix):
    save = tmp_path / "s"
    assert run_main(capsys, tiny(tiny_prefix), TORCH, "trainer.max_steps=2", "--save-dir", str(save),
                    "--save-every", "1")[0] == 0           # a single file: its format string is easy to reach
    newest, older = ckpt.checkpoints_newest_first(save)
    state = torch.load(newest, weights_only=True)
    flipped = bytearray(state["format"].encode())
    flipped[3] ^= 0x01                                          # "labsupport" → "labrupport"
    state["format"] = flipped.decode()
    torch.save(state, newest)
    status, err = run_main(capsys, tiny(tiny_prefix), TORCH, "trainer.max_steps=2", "--resume", str(save))
    assert status == 0, err
    assert any(newest.name in x and "damaged" in x and "format" in x for x in err), err
    assert any(f"resuming from {older.name}" in x for x in err), err
    # a checkpoint of another program (no checksum of ours) is still "not a labsupport checkpoint"
    torch.save({"format": "something-else/1"}, newest)
    status, err = run_main(capsys, tiny(tiny_prefix), "trainer.max_steps=2", "--resume", str(newest))
    assert status == EXIT_USAGE and "not a labsupport training checkpoint" in errors(err)[0], err


def test_resume_if_exists_on_a_finished_run_ends_with_0_and_one_line(tmp_path, capsys, tiny_prefix):
    save = tmp_path / "s"
    assert run_main(capsys, tiny(tiny_prefix), "trainer.max_steps=2", "--save-dir", str(save))[0] == 0
    status, err = run_main(capsys, tiny(tiny_prefix), "trainer.max_steps=2", "--save-dir", str(save),
                           "--resume-if-exists")
    assert status == 0 and not errors(err), err
    assert [x for x in err if "already complete" in x] == [
        f"train: {ckpt.checkpoint_name(2, 16)} is at step 2, trainer.max_steps=2: the run is already complete, "
        "nothing to do"], err
    assert [p.name for p in ckpt.checkpoints_newest_first(save)] == [ckpt.checkpoint_name(2, 16)]
    # an explicit --resume of a finished run still says how to train further (status 2)
    status, err = run_main(capsys, tiny(tiny_prefix), "trainer.max_steps=2", "--resume", str(save))
    assert status == EXIT_USAGE and "raise trainer.max_steps" in errors(err)[0], err


@pytest.mark.parametrize("override, field", [
    ("model.num_layers=1000000", "model.num_layers=1000000"),
    ("model.hidden_size=1000000", "model.hidden_size=1000000"),
    ("model.ffn_hidden_size=1000000000", "model.ffn_hidden_size=1000000000"),
])
def test_a_model_over_the_size_bound_is_refused_naming_the_field(override, field):
    with pytest.raises(ConfigError) as exc:
        load_settings(overrides=[override, "model.num_attention_heads=1"])
    message = str(exc.value)
    assert message.startswith(f"{field}: the model would have") and f"{MAX_MODEL_PARAMETERS:.0e}" in message, message


def test_the_shipped_model_is_far_below_the_bound():
    settings = load_settings()
    assert settings.config.model.parameters_without_vocab() < MAX_MODEL_PARAMETERS / 100
