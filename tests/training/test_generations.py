"""The three-generation table (labsupport.training.generations, chapters 0 and 6) cannot drift:
every name it uses is in the upstream record (upstream_fields.json, read from NVIDIA's sources at
named commits), in the installed megatron-core, and in this workbook's typed schema; NeMo's own
code passes each data key to the megatron-core field the table names."""
from __future__ import annotations

import dataclasses
import importlib
import re
import warnings

import pytest
from omegaconf import OmegaConf

from labsupport.config import load_config
from labsupport.training import generations as G
from labsupport.training.schema import schema_keys
from labsupport.training.settings import DEFAULT_CONFIG

UP = G.upstream()


def _names(key: str) -> set[str]:
    names = UP[key]["names"]
    return set(names if isinstance(names, list) else names.keys())


def _installed_fields(dotted: str) -> set[str]:
    module, _, cls = dotted.rpartition(".")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            obj = getattr(importlib.import_module(module), cls)
        except ImportError as exc:
            pytest.skip(f"megatron-core not installed ({exc})")
    return {f.name for f in dataclasses.fields(obj)}


def test_every_source_names_repo_path_and_commit():
    for key, src in UP.items():
        assert src["repo"] in ("NVIDIA/Megatron-LM", "NVIDIA/NeMo", "NVIDIA-NeMo/Megatron-Bridge"), key
        assert re.fullmatch(r"[0-9a-f]{40}", src["commit"]), key
        assert src["paths"] and src["names"], key


def test_workbook_keys_are_schema_fields():
    keys = set(schema_keys())
    assert [r.key for r in G.ROWS if r.key is not None and r.key not in keys] == []


def test_nemo1_keys_are_in_megatron_gpt_config_yaml():
    yaml_keys = _names("nemo1:megatron_gpt_config.yaml")
    assert [r.nemo1 for r in G.ROWS if r.nemo1 is not None and r.nemo1 not in yaml_keys] == []


def test_nemo2_arguments_exist():
    for r in G.ROWS:
        if r.nemo2 is None:
            continue
        cls, arg = r.nemo2
        record = G.NEMO2_RECORD[cls]
        known = _names(record) if record else set()
        if cls in G.NEMO2_MCORE_BASE:
            known |= _installed_fields(G.NEMO2_MCORE_BASE[cls])
        assert arg in known, f"{cls}({arg}=...) is not an argument at {record or G.NEMO2_MCORE_BASE[cls]}"


def test_bridge_fields_exist():
    container = _names("bridge:ConfigContainer")
    for r in G.ROWS:
        if r.bridge is None:
            continue
        attr, cls, fld = r.bridge
        assert attr in container, f"ConfigContainer has no {attr}"
        if fld is not None:
            assert fld in _names(f"bridge:{cls}"), f"Bridge {cls} has no field {fld}"
    precision = next(r for r in G.ROWS if r.key == "trainer.precision")
    assert precision.note.strip('"') in _names("bridge:mixed_precision")


def test_bridge_precision_of_32_is_fp32_not_a_bf16_recipe():
    """Bridge v0.6.0: mixed_precision defaults to None (fp32); trainer.precision=32 must not read as bf16_mixed."""
    assert G.bridge_mixed_precision(32) == "None" and G.bridge_mixed_precision("bf16-mixed") == '"bf16_mixed"'
    spelled = dict((row[0], row[4]) for row in G.key_table())["trainer.precision"]
    assert spelled.startswith("mixed_precision=None for 32 (fp32)"), spelled
    assert "mixed_precision=None" in G.render_bridge(load_config(DEFAULT_CONFIG))


@pytest.mark.parametrize("version", ["0.16", "0.19"])
def test_mcore_fields_are_in_the_recorded_gpt_dataset_config(version):
    recorded = _names(f"mcore-{version}:GPTDatasetConfig")
    wanted = {r.mcore for r in G.ROWS if r.mcore is not None}
    missing = wanted - recorded
    assert missing == ({"inter_document_masking"} if version == "0.16" else set())


def test_mcore_fields_exist_in_the_installed_megatron_core():
    """0.16.1 on Python 3.11, 0.19.2 on 3.12: every field the table names (inter_document_masking
    only from 0.19), and the recorded field list of that version is the installed one."""
    installed = _installed_fields("megatron.core.datasets.gpt_dataset.GPTDatasetConfig")
    import megatron.core

    version = ".".join(megatron.core.__version__.split(".")[:2])
    wanted = {r.mcore for r in G.ROWS if r.mcore is not None}
    if version == "0.16":
        wanted.discard("inter_document_masking")
        assert "inter_document_masking" not in installed
    assert wanted <= installed, wanted - installed
    if f"mcore-{version}:GPTDatasetConfig" in UP:
        assert set(UP[f"mcore-{version}:GPTDatasetConfig"]["names"]) == installed


def test_nemo_passes_each_data_key_to_the_named_mcore_field():
    """NeMo's own code (recorded keyword → expression) passes the NeMo 1.x key / the NeMo 2.0 argument
    of a row to the megatron-core field of that row."""
    nemo1 = UP["nemo1:GPTDatasetConfig-kwargs"]["names"]
    nemo2 = UP["nemo2:GPTDatasetConfig-kwargs"]["names"]
    checked = 0
    for r in G.ROWS:
        if r.mcore is None or r.mcore == "tokenizer":
            continue
        if r.nemo1 is not None:
            assert r.nemo1.rsplit(".", 1)[-1] in nemo1[r.mcore], (r.nemo1, r.mcore, nemo1.get(r.mcore))
            checked += 1
        if r.nemo2 is not None and r.nemo2[0] == "PreTrainingDataModule":
            assert r.nemo2[1] in nemo2[r.mcore] or r.nemo2[1] == "paths", (r.nemo2, nemo2.get(r.mcore))
            checked += 1
    assert checked >= 14
    assert nemo2["blend"] == "[paths, weights]"                        # the list form: get_blend_from_list(paths)
    assert "paths['validation']" in nemo2["blend_per_split"]          # the dict form needs train, validation, test


def test_bridge_has_no_blend_weights_field():
    """The migration guide's ``blend_weights=[...]`` (docs/nemo2-migration-guide.md at v0.6.0) is no field of
    Bridge's GPTDatasetConfig: its __init__ hands unknown keywords to megatron-core's, which refuses them."""
    assert "blend_weights" not in _names("bridge:GPTDatasetConfig")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            from megatron.core.datasets.gpt_dataset import GPTDatasetConfig
        except ImportError as exc:
            pytest.skip(f"megatron-core not installed ({exc})")
    with pytest.raises(TypeError, match="blend_weights"):
        GPTDatasetConfig(random_seed=0, sequence_length=8, blend=(["a"], None), blend_weights=[1.0], split="1,0,0",
                         reset_position_ids=False, reset_attention_mask=False, eod_mask_loss=False, tokenizer=None)


def test_the_rendered_bridge_dataset_config_builds_in_megatron_core():
    """The dataset keywords of render_bridge (seq_length → megatron-core's sequence_length, as Bridge's
    __init__ maps it) construct megatron-core's GPTDatasetConfig with the workbook's values."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            from megatron.core.datasets.gpt_dataset import GPTDatasetConfig
        except ImportError as exc:
            pytest.skip(f"megatron-core not installed ({exc})")
    text = G.render_bridge(load_config(DEFAULT_CONFIG))
    inner = text.split("dataset=GPTDatasetConfig(", 1)[1].split("),\n    train=", 1)[0]
    kwargs = eval(f"dict({inner})")                                           # noqa: S307 - our own rendering
    kwargs["sequence_length"] = kwargs.pop("seq_length")
    # inter_document_masking is megatron-core 0.19's (and Bridge v0.6.0's): recorded, popped where the
    # installed megatron-core (0.16.1) predates it
    assert kwargs["inter_document_masking"] is True
    assert "inter_document_masking" in _names("mcore-0.19:GPTDatasetConfig") & _names("bridge:GPTDatasetConfig")
    if "inter_document_masking" not in {f.name for f in dataclasses.fields(GPTDatasetConfig)}:
        kwargs.pop("inter_document_masking")

    class Tok:
        vocab_size, eod, pad = 8000, 3, -1
        unique_identifiers = {"class": "Tok"}

    cfg = GPTDatasetConfig(tokenizer=Tok(), **kwargs)
    from labsupport.datasets.splits import split_matrix
    workbook = load_config(DEFAULT_CONFIG)
    assert cfg.blend[1] == [0.4, 0.3, 0.2, 0.1]
    assert cfg.split_matrix == split_matrix(workbook.model.data.splits_string or "1,0,0")
    assert cfg.path_to_cache == workbook.model.data.index_mapping_dir
    assert cfg.sequence_length == 64 and cfg.reset_attention_mask is True and cfg.mmap_bin_files is True


def test_renderings_use_the_config_values():
    cfg = load_config(DEFAULT_CONFIG, ["model.micro_batch_size=2", "trainer.max_steps=7"])
    assert "model.micro_batch_size=2" in G.render_nemo1(cfg)
    assert "micro_batch_size=2," in G.render_nemo2(cfg) and "max_steps=7" in G.render_nemo2(cfg)
    assert "micro_batch_size=2," in G.render_bridge(cfg) and "train_iters=7" in G.render_bridge(cfg)
    assert 'paths=["0.4", "work/indexed/web_text_document"' in G.render_nemo2(cfg)


def test_every_key_of_the_rendered_nemo1_command_is_in_the_yaml():
    yaml_keys = _names("nemo1:megatron_gpt_config.yaml")
    lines = G.render_nemo1(load_config(DEFAULT_CONFIG)).splitlines()[2:]
    keys = [line.strip().strip('"').split("=", 1)[0] for line in lines]
    assert len(keys) > 20 and [k for k in keys if k not in yaml_keys] == []
    assert "model.encoder_seq_length" in keys and "model.data.seq_length" not in keys


def test_the_rendered_nemo2_tokenizer_call_uses_its_arguments():
    assert {"library", "tokenizer_model"} <= _names("nemo2:get_nmt_tokenizer")
    assert 'get_nmt_tokenizer(library="sentencepiece", tokenizer_model=' in G.render_nemo2(load_config(DEFAULT_CONFIG))


# ------------------------------------------------------------------ documents apart (issue #30 item 2)
RENDER = {"nemo1": G.render_nemo1, "nemo2": G.render_nemo2, "bridge": G.render_bridge}


@pytest.mark.parametrize("stack", sorted(RENDER))
def test_each_rendering_with_reset_flags_keeps_documents_apart(stack):
    """The reset flags are on in chapter 6's run, and each stack's rendering carries the setting that makes
    them take effect (saying on that line what the attention path still needs)."""
    text = RENDER[stack](load_config(DEFAULT_CONFIG))
    assert G._resets(text) == ["reset_attention_mask", "reset_position_ids"]
    assert G.masking_gaps(stack, text) == []


@pytest.mark.parametrize("stack", sorted(RENDER))
def test_the_masking_rule_fails_without_the_setting_or_its_note(stack):
    text = RENDER[stack](load_config(DEFAULT_CONFIG))
    setting, says = G.DOCUMENT_MASKING[stack]
    dropped = "\n".join(line for line in text.splitlines() if setting not in line)
    assert "without " + setting in G.masking_gaps(stack, dropped)[0]
    if says is not None:
        silent = "\n".join(line.split("  #", 1)[0] if setting in line else line for line in text.splitlines())
        assert "does not say" in G.masking_gaps(stack, silent)[0]


@pytest.mark.parametrize("stack", sorted(RENDER))
def test_without_reset_flags_no_masking_setting_is_rendered(stack):
    cfg = load_config(DEFAULT_CONFIG, ["model.data.reset_position_ids=false", "model.data.reset_attention_mask=false"])
    text = RENDER[stack](cfg)
    assert G._resets(text) == [] and G.DOCUMENT_MASKING[stack][0] not in text and G.masking_gaps(stack, text) == []


def test_every_masking_name_is_in_the_upstream_record():
    """The settings and what the notes name exist at the versions read (NeMo v2.5.0rc0, Bridge v0.6.0)."""
    yaml = _names("nemo1:megatron_gpt_config.yaml")
    assert {"model.get_attention_mask_from_fusion", "model.transformer_engine", "model.masked_softmax_fusion"} <= yaml
    assert "create_attention_mask" in _names("nemo2:PreTrainingDataModule")
    assert {"transformer_layer_spec", "masked_softmax_fusion"} <= _names("nemo2:GPTConfig")
    assert {"inter_document_masking", "skip_getting_attention_mask_from_dataset"} <= _names("bridge:GPTDatasetConfig")


def test_masking_gaps_refuses_an_unknown_stack():
    with pytest.raises(ValueError, match="^error: masking_gaps stack 'nemo3'"):
        G.masking_gaps("nemo3", "reset_attention_mask=True")


def test_later_keys_render_only_when_set_and_under_nemo1_names():
    """The batch ramp and checkpoint keys: absent from the NeMo 1.x rendering at their defaults; set, they
    appear under NeMo 1.x's own key (one shell word each); the step schedule, which NeMo 1.x lacks, never."""
    plain = G.render_nemo1(OmegaConf.load(DEFAULT_CONFIG))
    assert not any(k in plain for k in ("rampup_batch_size", "dist_ckpt_format", "async_save"))
    cfg = OmegaConf.merge(OmegaConf.load(DEFAULT_CONFIG), OmegaConf.from_dotlist(
        ["model.rampup_batch_size=[4,4,24]", "exp_manager.ckpt_format=torch"]))
    text = G.render_nemo1(cfg)
    assert "  model.rampup_batch_size=[4,4,24] \\" in text.splitlines()
    assert "  model.dist_ckpt_format=torch \\" in text.splitlines() and "exp_manager.ckpt_format" not in text
    sched = OmegaConf.merge(OmegaConf.load(DEFAULT_CONFIG), OmegaConf.from_dotlist(
        ["model.step_batch_size_schedule=0:4"]))
    assert "step_batch_size_schedule" not in G.render_nemo1(sched)
