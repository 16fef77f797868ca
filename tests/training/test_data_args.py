"""``python -m labsupport train --data-args-path FILE`` (chapter 6, issue #34 item 5): a blend given as a file,
Megatron-LM's format (``get_blend_from_list(f.read().split())``), becomes the same config as the list in the YAML."""
from __future__ import annotations

import pytest

from labsupport.config import ConfigError
from labsupport.training.cli import EXIT_USAGE, main
from labsupport.training.data_args import data_prefix_override, read_data_args
from labsupport.training.settings import DEFAULT_CONFIG, load_settings

BLEND = [0.4, "work/indexed/web_text_document", 0.3, "work/indexed/code_text_document",
         0.2, "work/indexed/books_text_document", 0.1, "work/indexed/korean_text_document"]


def _file(tmp_path, text: str, name: str = "blend.txt"):
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def test_the_file_is_read_as_megatron_splits_it(tmp_path):
    text = "0.4 work/indexed/web_text_document\n0.3\twork/indexed/code_text_document\n\n" \
           "  0.2 work/indexed/books_text_document 0.1 work/indexed/korean_text_document  \n"
    assert read_data_args(_file(tmp_path, text)) == BLEND
    assert read_data_args(_file(tmp_path, "a\nb c\n")) == ["a", "b", "c"]            # prefixes alone
    assert read_data_args(_file(tmp_path, "1e-3 x 2 y")) == [0.001, "x", 2.0, "y"]


def test_the_file_gives_the_same_settings_as_the_list_in_the_yaml(tmp_path):
    from_file = load_settings(DEFAULT_CONFIG, [data_prefix_override(_file(tmp_path, " ".join(map(str, BLEND))))])
    from_yaml = load_settings(DEFAULT_CONFIG)
    assert from_file.prefixes == from_yaml.prefixes and from_file.names == from_yaml.names
    assert list(from_file.config.model.data.data_prefix) == list(from_yaml.config.model.data.data_prefix)
    reordered = load_settings(DEFAULT_CONFIG, [data_prefix_override(_file(
        tmp_path, "0.5 work/indexed/code_text_document 0.5 work/indexed/web_text_document"))])
    assert [p.rsplit("/", 1)[-1] for p in reordered.prefixes] == ["code_text_document", "web_text_document"]


@pytest.mark.parametrize("text, says", [
    ("1 a 2", "a weighted list is weight, prefix pairs"),
    ("-1 a", "weight -1 is negative"),
    ("", "data_prefix is empty"),
    ("0.5 it's 0.5 b", "the prefix \"it's\" does not survive as a config value"),
])
def test_a_bad_file_is_one_config_error_naming_the_flag(tmp_path, text, says):
    with pytest.raises(ConfigError, match="^--data-args-path ") as info:
        data_prefix_override(_file(tmp_path, text))
    assert says in str(info.value) and "\n" not in str(info.value)


def test_the_command_refuses_a_missing_file_and_two_blends_with_one_line_and_2(tmp_path, capsys):
    assert main(["--no-progress", "--data-args-path", str(tmp_path / "none.txt")]) == EXIT_USAGE
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and err[0].startswith("error: --data-args-path ") and "none.txt" in err[0], err
    blend = _file(tmp_path, "1 work/indexed/web_text_document")
    assert main(["--no-progress", "--data-args-path", str(blend), "model.data.data_prefix=[1.0,x]"]) == EXIT_USAGE
    err = capsys.readouterr().err.splitlines()
    assert err == ["error: --data-args-path and model.data.data_prefix=… both give the blend: give one"]


def test_a_run_from_a_blend_file(tmp_path, capsys):
    blend = _file(tmp_path, "0.5 work/indexed/web_text_document 0.5 work/indexed/code_text_document")
    assert main(["--no-progress", "--data-args-path", str(blend), "trainer.max_steps=1"]) == 0
    assert "step 1 · loss" in capsys.readouterr().out
