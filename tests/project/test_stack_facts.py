"""The stack facts that go stale live in one dated file (labsupport/stack.toml, issue #30 item 3): every entry
names its source and the day it was read, chapter 0 renders its map from it, and no chapter notebook states a
version of a stack named there that the file does not list (the rule: labsupport.stack_facts)."""
from __future__ import annotations

from datetime import date
from pathlib import Path

import nbformat
import pytest

from labsupport import stack_facts as S

ROOT = Path(__file__).resolve().parents[2]
CHAPTERS = [p for folder in ("notebooks", "solutions") for p in sorted((ROOT / folder).glob("[0-9][0-9]_*.ipynb"))]
FACTS = S.load_stack()


def _text(path: Path) -> list[tuple[str, str]]:
    """(where, text) for each cell's source and each of its text outputs."""
    out = []
    for i, cell in enumerate(nbformat.read(path, as_version=4).cells):
        out.append((f"{path.parent.name}/{path.name} cell {i}", cell.source))
        for o in cell.get("outputs", []):
            text = o.get("text") or o.get("data", {}).get("text/plain") or ""
            out.append((f"{path.parent.name}/{path.name} cell {i} output", "".join(text)))
    return out


def test_every_entry_is_dated_and_sourced():
    assert {e.id for e in FACTS.entries} >= {"megatron-core", "megatron-lm", "megatron-bridge", "nemo-2", "nemo-3",
                                             "automodel"}
    for e in FACTS.entries:
        assert isinstance(e.checked, date) and date(2026, 1, 1) <= e.checked <= date.today(), e.id
        assert e.source.strip() and e.role.strip() and e.names, e.id
    assert FACTS.as_of == max(e.checked for e in FACTS.entries)


def test_the_facts_the_chapters_repair():
    """What moved where (issue #30, first finding), as the file states it."""
    nemo3, bridge, nemo2 = FACTS.entry("nemo-3"), FACTS.entry("megatron-bridge"), FACTS.entry("nemo-2")
    assert "3.0.0" in nemo3.versions and "NVIDIA-NeMo/Speech" in nemo3.role + nemo3.source and "speech" in nemo3.role
    assert "#6172" in bridge.status and "2026-09-22" in bridge.status and "AutoBridge" in bridge.role
    assert nemo2.book and "nemo-toolkit<3" in nemo2.status and "nemo.collections.llm" in nemo2.role
    assert [e.id for e in FACTS.entries if e.book] == ["nemo-2"]
    assert {"0.16.1", "0.19"} <= set(FACTS.entry("megatron-core").versions)
    assert "Hugging Face" in FACTS.entry("automodel").role


@pytest.mark.parametrize("path", CHAPTERS, ids=[f"{p.parent.name}/{p.stem}" for p in CHAPTERS])
def test_no_chapter_states_a_version_the_file_does_not_list(path):
    unknown = [f"{where}: {v}" for where, text in _text(path) for v in S.unknown_versions(text, FACTS)]
    assert unknown == [], f"add these to labsupport/stack.toml (with a source and a date) or correct the chapter: " \
                          f"{unknown}"


def test_the_version_rule_catches_what_it_should():
    said = S.version_mentions("NeMo 2.0 and NeMo 1.x; megatron-core 0.16.1 (core_v0.16.1, core_r0.19.0); "
                              "NVIDIA/NeMo v2.5.0rc0, Megatron-Bridge `v0.6.0`; NeMo 8cfedd7; AutoBridge 9.9", FACTS)
    assert said == [("NeMo", "2.0"), ("NeMo", "1.x"), ("megatron-core", "0.16.1"), ("core_v", "0.16.1"),
                    ("core_r", "0.19.0"), ("NVIDIA/NeMo", "2.5.0rc0"), ("Megatron-Bridge", "0.6.0")]
    assert S.unknown_versions("the packaging layer for the NeMo 26.06 training stack", FACTS) == ["NeMo 26.06"]
    assert S.unknown_versions("megatron-core 0.12 and Megatron-Bridge v0.5.0", FACTS) == \
        ["megatron-core 0.12", "Megatron-Bridge 0.5.0"]
    assert S.unknown_versions("torch 2.13.0, NCCL v2.30.7-1", FACTS) == []       # not stacks of this file


def test_chapter_0_renders_its_map_from_the_file():
    nb = nbformat.read(ROOT / "notebooks" / "00_orientation.ipynb", as_version=4)
    sources = "\n".join(c.source for c in nb.cells if c.cell_type == "code")
    assert "stack_facts.map_rows()" in sources and "stack_facts.as_of_line()" in sources
    outputs = "\n".join("".join(o.get("text") or o.get("data", {}).get("text/plain") or "")
                        for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", []))
    assert S.as_of_line(FACTS) in outputs
    for e in FACTS.entries:
        assert e.name in outputs, f"chapter 0's map lacks {e.name}: re-run notebooks/00_orientation.ipynb"
    assert "the book's generation" in outputs


def test_a_broken_file_fails_in_one_line(tmp_path):
    bad = tmp_path / "stack.toml"
    bad.write_text('[[entry]]\nid = "x"\nname = "X"\n', encoding="utf-8")
    with pytest.raises(ValueError, match=r"^error: stack.toml entry 0 \(x\): missing \['names'"):
        S.load_stack(bad)
    bad.write_text("\n".join(f'{f} = "a"' if f != "names" and f != "versions" and f != "book" else
                             (f"{f} = []" if f != "book" else "book = false")
                             for f in S.FIELDS).join(["[[entry]]\n", "\n"]), encoding="utf-8")
    with pytest.raises(ValueError, match=r"^error: .* checked = 'a': write a TOML date"):
        S.load_stack(bad)


def test_nccl_and_deepspeed_are_dated_here_and_rendered_from_here():
    """Issue #30: NCCL's per-call pick log and the variable table's source; DeepSpeed's status, dated."""
    from labsupport.distributed import nccl_facts, nccl_tuning
    from labsupport.pages import envcheck
    nccl, deepspeed = FACTS.entry("nccl"), FACTS.entry("deepspeed")
    assert {v for v, *_ in nccl_tuning.PICK_LOG} | {nccl_tuning.NCCL_VERSION} <= set(nccl.versions)
    assert "v2.30.7-1" in nccl.source and "[[nccl_variable]]" in nccl.source
    assert nccl.checked == nccl_facts.FACTS_CHECKED
    row = next(r for r in envcheck.FRAMEWORK_STATUS if r[0] == "DeepSpeed")
    assert row[2] == deepspeed.status and deepspeed.checked.isoformat() in row[3] and "2026/05" in deepspeed.status


def test_chapter_5_renders_the_variable_table_from_the_file():
    """The NCCL variable table is data in stack.toml; chapter 5's printed table is its rows, in the guide's order."""
    from labsupport.distributed import nccl_facts
    table = S.load_nccl_variables(statuses=nccl_facts.STATUSES)
    assert nccl_facts.NCCL_ENV_FACTS == table.facts and nccl_facts.FACTS_CHECKED == table.checked
    nb = nbformat.read(ROOT / "notebooks" / "05_nccl_collectives.ipynb", as_version=4)
    cell = next(c for c in nb.cells if c.cell_type == "code" and "fact_check_exports" in c.source)
    printed = "".join("".join(o.get("text") or o.get("data", {}).get("text/plain") or "") for o in cell.outputs)
    assert f"checked {table.checked.isoformat()} against {table.source}" in printed
    for name, (status, fact) in table.facts.items():
        line = next((ln for ln in printed.splitlines() if ln.startswith(name + "=")), None)
        assert line is not None and status in line and fact in line, \
            f"chapter 5 does not show stack.toml's row for {name}: re-run notebooks/05_nccl_collectives.ipynb"


@pytest.mark.parametrize("row, message", [
    ('name = "NCCL_X"\nstatus = "exists"', r"fields \['name', 'status'\]: give exactly name, status and fact"),
    ('name = "NCCL_X"\nstatus = "maybe"\nfact = "f"', r"status 'maybe': use one of"),
])
def test_a_broken_variable_row_fails_in_one_line(tmp_path, row, message):
    from labsupport.distributed import nccl_facts
    bad = tmp_path / "stack.toml"
    bad.write_text(f'[nccl_variables]\nsource = "s"\nchecked = 2026-12-02\n\n[[nccl_variable]]\n{row}\n',
                   encoding="utf-8")
    with pytest.raises(ValueError, match=rf"^error: stack.toml nccl_variable 0 \(NCCL_X\): {message}"):
        S.load_nccl_variables(bad, statuses=nccl_facts.STATUSES)
    bad.write_text('[nccl_variables]\nsource = "s"\n', encoding="utf-8")
    with pytest.raises(ValueError, match=r"^error: stack.toml \[nccl_variables\]: give a source, a TOML date"):
        S.load_nccl_variables(bad)


def test_the_defaults_are_data_and_megatron_cores_match_the_installed_one():
    """The stack defaults a statement rests on are [[default]] rows; the megatron-core ones hold for the installed
    megatron-core, and the three-stack rendering names the mask defaults from the file."""
    import inspect

    from megatron.core.datasets import gpt_dataset

    from labsupport.datasets.gpt_samples import GPTDataset
    from labsupport.training import generations
    defaults = S.load_defaults()
    assert {"nemo1-mask-from-fusion", "nemo2-create-attention-mask", "bridge-skip-mask", "te-causal-kernel",
            "deterministic-mode-0.16", "deterministic-mode-0.19"} <= set(defaults)
    create = defaults["mcore-create-attention-mask"]
    assert create.value == str(gpt_dataset.GPTDatasetConfig.__dataclass_fields__["create_attention_mask"].default)
    threshold = defaults["mcore-final-epoch-threshold"]
    assert f"threshold = {threshold.value}" in inspect.getsource(gpt_dataset)
    assert float(threshold.value) == GPTDataset.SEPARATE_FINAL_EPOCH_THRESHOLD
    skip = defaults["bridge-skip-mask"]
    assert f"{skip.setting.rsplit('.', 1)[-1]}={skip.value}" in generations.BRIDGE_MASK_NOTE
    for d in defaults.values():
        assert d.source.strip() and date(2026, 1, 1) <= d.checked <= date.today(), d.id
    nb = nbformat.read(ROOT / "notebooks" / "00_orientation.ipynb", as_version=4)
    shown = "".join("".join(o.get("text") or o.get("data", {}).get("text/plain") or "")
                    for c in nb.cells if c.cell_type == "code" and "default_rows()" in c.source for o in c.outputs)
    for d in defaults.values():
        assert f"{d.setting} = {d.value}" in shown, \
            f"chapter 0's appendix lacks {d.id}: re-run notebooks/00_orientation.ipynb"


def test_a_broken_default_row_fails_in_one_line(tmp_path):
    bad = tmp_path / "stack.toml"
    bad.write_text('[[default]]\nid = "x"\nstack = "S"\n', encoding="utf-8")
    with pytest.raises(ValueError, match=r"^error: stack.toml default 0 \(x\): fields .*: give exactly \['id'"):
        S.load_defaults(bad)
    row = "".join(f'{f} = "a"\n' for f in S.DEFAULT_FIELDS)
    bad.write_text(f"[[default]]\n{row}", encoding="utf-8")
    with pytest.raises(ValueError, match=r"^error: stack.toml default 0 \(a\) checked = 'a': write a TOML date"):
        S.load_defaults(bad)
