"""Record the upstream names that chapter 0's and chapter 6's three-generation table uses.

Reads NVIDIA's repositories at fixed tags/commits from local git mirrors (``git --git-dir=... show
REF:PATH``; no network) and writes ``labsupport/training/upstream_fields.json``: for each class,
function or YAML file the table names, the repository, ref, commit, path and the field/argument
names found there (dataclass fields through the named bases, ``__init__`` parameters, YAML keys,
the keyword arguments NeMo passes to megatron-core's ``GPTDatasetConfig``).  The tests
(``tests/training/test_generations.py``) check the table against this file, offline.

    python scripts/record_upstream_fields.py \
        --megatron-lm /work/.mirror/NVIDIA+Megatron-LM/repo --nemo /work/.mirror/NVIDIA+NeMo/repo \
        --bridge /work/.mirror/NVIDIA-NeMo+Megatron-Bridge/repo
"""
from __future__ import annotations

import argparse
import ast
import datetime
import json
import subprocess
import sys
from pathlib import Path

import yaml

OUT = Path(__file__).resolve().parents[1] / "labsupport" / "training" / "upstream_fields.json"
REPOS = {"megatron-lm": "NVIDIA/Megatron-LM", "nemo": "NVIDIA/NeMo", "bridge": "NVIDIA-NeMo/Megatron-Bridge"}
# The refs read.  Megatron-Bridge v0.6.0 pins Megatron-LM as its 3rdparty/Megatron-LM submodule
# (commit cd4afff…, megatron-core 0.19.0); its dataclasses extend the ones at that commit.
BRIDGE_REF = "v0.6.0"
NEMO_REF = "v2.5.0rc0"
MCORE_REFS = {"0.16": "core_v0.16.1", "0.19": "core_r0.19.0"}


class Mirror:
    def __init__(self, key: str, git_dir: str) -> None:
        self.key, self.git_dir = key, git_dir

    def commit(self, ref: str) -> str:
        return subprocess.run(["git", "--git-dir", self.git_dir, "rev-parse", f"{ref}^{{commit}}"],
                              check=True, capture_output=True, text=True).stdout.strip()

    def show(self, ref: str, path: str) -> str:
        return subprocess.run(["git", "--git-dir", self.git_dir, "show", f"{ref}:{path}"],
                              check=True, capture_output=True, text=True).stdout

    def submodule(self, ref: str, path: str) -> str:
        out = subprocess.run(["git", "--git-dir", self.git_dir, "ls-tree", ref, path],
                             check=True, capture_output=True, text=True).stdout.split()
        return out[2]


def _class(tree: ast.Module, name: str) -> ast.ClassDef:
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and node.name == name:
            return node
    raise KeyError(name)


def dataclass_fields(source: str, name: str) -> list[str]:
    """Annotated class-level names of class ``name`` (its own dataclass fields, in order)."""
    out = []
    for node in _class(ast.parse(source), name).body:
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            if "ClassVar" not in ast.unparse(node.annotation):
                out.append(node.target.id)
    return out


def init_params(source: str, name: str) -> list[str]:
    """Parameters of ``name.__init__`` (without self, *args, **kwargs)."""
    for node in _class(ast.parse(source), name).body:
        if isinstance(node, ast.FunctionDef) and node.name == "__init__":
            a = node.args
            return [p.arg for p in a.posonlyargs + a.args + a.kwonlyargs if p.arg != "self"]
    return []


def function_params(source: str, name: str) -> list[str]:
    """Parameters of the module-level function ``name``."""
    for node in ast.parse(source).body:
        if isinstance(node, ast.FunctionDef) and node.name == name:
            a = node.args
            return [p.arg for p in a.posonlyargs + a.args + a.kwonlyargs]
    raise KeyError(name)


def call_keywords(source: str, func_attr: str, first_arg: str | None = None) -> dict[str, str]:
    """keyword → source expression of the first call ``...<func_attr>(...)`` (or ``func_attr(...)``),
    whose first positional argument is ``first_arg`` when given (``run.Config(nl.Trainer, ...)``)."""
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Call):
            f = node.func
            called = f.attr if isinstance(f, ast.Attribute) else getattr(f, "id", None)
            if called == func_attr and (first_arg is None or (node.args and ast.unparse(node.args[0]) == first_arg)):
                return {k.arg: ast.unparse(k.value) for k in node.keywords if k.arg}
    raise KeyError(func_attr)


def dict_literal(source: str, var: str) -> dict[str, str]:
    """key → source expression of the first ``var = {...}`` dict literal."""
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == var for t in node.targets) \
                and isinstance(node.value, ast.Dict):
            return {ast.literal_eval(k): ast.unparse(v) for k, v in zip(node.value.keys, node.value.values)}
    raise KeyError(var)


def subscript_assignments(source: str, var: str) -> dict[str, str]:
    """key → expression of the first ``var["key"] = expr`` in source order (the unconditional one)."""
    out: dict[str, str] = {}
    nodes = sorted((n for n in ast.walk(ast.parse(source)) if isinstance(n, ast.Assign)), key=lambda n: n.lineno)
    for node in nodes:
        for t in node.targets:
            if isinstance(t, ast.Subscript) and getattr(t.value, "id", None) == var:
                out.setdefault(ast.literal_eval(t.slice), ast.unparse(node.value))
    return out


def registered_functions(source: str, decorator: str) -> list[str]:
    return [n.name for n in ast.parse(source).body
            if isinstance(n, ast.FunctionDef) and any(getattr(d, "id", None) == decorator for d in n.decorator_list)]


def yaml_keys(text: str) -> list[str]:
    def walk(node, prefix=""):
        for k, v in node.items():
            if isinstance(v, dict):
                yield from walk(v, f"{prefix}{k}.")
            else:
                yield f"{prefix}{k}"
    return list(walk(yaml.safe_load(text)))


def entry(m: Mirror, ref: str, parts: list[tuple[str, str]], names: list[str] | dict, what: str) -> dict:
    commit = m.commit(ref) if len(ref) != 40 else ref
    return {"repo": REPOS[m.key], "ref": ref, "commit": commit, "paths": [f"{p}::{s}" for p, s in parts],
            "what": what, "names": names}


def record(mlm: Mirror, nemo: Mirror, bridge: Mirror) -> dict:
    out: dict[str, dict] = {}
    gds, bmdc = "megatron/core/datasets/gpt_dataset.py", "megatron/core/datasets/blended_megatron_dataset_config.py"
    for version, ref in MCORE_REFS.items():
        names = (dataclass_fields(mlm.show(ref, bmdc), "BlendedMegatronDatasetConfig")
                 + dataclass_fields(mlm.show(ref, gds), "GPTDatasetConfig"))
        out[f"mcore-{version}:GPTDatasetConfig"] = entry(
            mlm, ref, [(bmdc, "BlendedMegatronDatasetConfig"), (gds, "GPTDatasetConfig")], names,
            "dataclass fields of megatron.core.datasets.gpt_dataset.GPTDatasetConfig (with its base)")
    pin = bridge.submodule(BRIDGE_REF, "3rdparty/Megatron-LM")
    bcfg = "src/megatron/bridge/training/config.py"
    bsrc = bridge.show(BRIDGE_REF, bcfg)
    mtrain = "megatron/training/config/training_config.py"
    mcommon = "megatron/training/config/common_config.py"

    def pinned(path: str, cls: str) -> list[str]:
        return dataclass_fields(mlm.show(pin, path), cls)

    ds_names = (pinned(bmdc, "BlendedMegatronDatasetConfig") + pinned(gds, "GPTDatasetConfig")
                + dataclass_fields(bridge.show(BRIDGE_REF, "src/megatron/bridge/data/base.py"), "DataloaderConfig")
                + dataclass_fields(bsrc, "GPTDatasetConfig") + init_params(bsrc, "GPTDatasetConfig"))
    out["bridge:GPTDatasetConfig"] = entry(
        bridge, BRIDGE_REF, [(bcfg, "GPTDatasetConfig"), ("src/megatron/bridge/data/base.py", "DataloaderConfig"),
                             (f"3rdparty/Megatron-LM@{pin[:7]}/{gds}", "GPTDatasetConfig"),
                             (f"3rdparty/Megatron-LM@{pin[:7]}/{bmdc}", "BlendedMegatronDatasetConfig")],
        sorted(set(ds_names)), "fields and __init__ arguments of megatron.bridge.training.config.GPTDatasetConfig")
    out["bridge:ConfigContainer"] = entry(bridge, BRIDGE_REF, [(bcfg, "ConfigContainer")],
                                          dataclass_fields(bsrc, "ConfigContainer"), "ConfigContainer's sub-configs")
    for cls, path in (("TrainingConfig", mtrain), ("ValidationConfig", mtrain), ("SchedulerConfig", mtrain),
                      ("LoggerConfig", mtrain), ("CheckpointConfig", mtrain), ("RNGConfig", mcommon)):
        own = dataclass_fields(bsrc, cls) if f"class {cls}(" in bsrc else []
        out[f"bridge:{cls}"] = entry(bridge, BRIDGE_REF,
                                     [(bcfg, cls), (f"3rdparty/Megatron-LM@{pin[:7]}/{path}", cls)],
                                     sorted(set(own + pinned(path, cls))),
                                     f"fields of {cls} as ConfigContainer uses it")
    tok = "src/megatron/bridge/training/tokenizers/config.py"
    out["bridge:TokenizerConfig"] = entry(
        bridge, BRIDGE_REF,
        [(tok, "TokenizerConfig"), (f"3rdparty/Megatron-LM@{pin[:7]}/{mtrain}", "TokenizerConfig")],
        sorted(set(dataclass_fields(bridge.show(BRIDGE_REF, tok), "TokenizerConfig")
                   + pinned(mtrain, "TokenizerConfig"))),
        "fields of megatron.bridge.training.tokenizers.config.TokenizerConfig")
    opt = "megatron/core/optimizer/optimizer_config.py"
    out["bridge:OptimizerConfig"] = entry(
        bridge, BRIDGE_REF, [(bcfg, "OptimizerConfig"), (f"3rdparty/Megatron-LM@{pin[:7]}/{opt}", "OptimizerConfig")],
        sorted(set(dataclass_fields(bsrc, "OptimizerConfig") + pinned(opt, "OptimizerConfig"))),
        "fields of megatron.bridge.training.config.OptimizerConfig")
    prov = "src/megatron/bridge/models/gpt_provider.py"
    tc, mpc = "megatron/core/transformer/transformer_config.py", "megatron/core/model_parallel_config.py"
    out["bridge:GPTModelProvider"] = entry(
        bridge, BRIDGE_REF, [(prov, "GPTModelProvider"), (f"3rdparty/Megatron-LM@{pin[:7]}/{tc}", "TransformerConfig"),
                             (f"3rdparty/Megatron-LM@{pin[:7]}/{mpc}", "ModelParallelConfig")],
        sorted(set(dataclass_fields(bridge.show(BRIDGE_REF, prov), "GPTModelProvider")
                   + pinned(tc, "TransformerConfig") + pinned(mpc, "ModelParallelConfig"))),
        "fields of megatron.bridge.models.GPTModelProvider (TransformerConfig, ModelParallelConfig)")
    mp = "src/megatron/bridge/training/mixed_precision.py"
    names = registered_functions(bridge.show(BRIDGE_REF, mp), "register")
    out["bridge:mixed_precision"] = entry(bridge, BRIDGE_REF, [(mp, "@register")],
                                          sorted(set(names + [n.replace("_", "-") for n in names])),
                                          "recipe names ConfigContainer(mixed_precision=...) accepts")

    ptd = "nemo/collections/llm/gpt/data/pre_training.py"
    src = nemo.show(NEMO_REF, ptd)
    out["nemo2:PreTrainingDataModule"] = entry(nemo, NEMO_REF, [(ptd, "PreTrainingDataModule.__init__")],
                                               init_params(src, "PreTrainingDataModule"),
                                               "arguments of nemo.collections.llm.PreTrainingDataModule")
    out["nemo2:GPTDatasetConfig-kwargs"] = entry(
        nemo, NEMO_REF, [(ptd, "PreTrainingDataModule.gpt_dataset_config"), (ptd, "build_kwargs[...]")],
        {**call_keywords(src, "GPTDatasetConfig"), **subscript_assignments(src, "build_kwargs")},
        "what NeMo 2.0 passes to megatron-core's GPTDatasetConfig (keyword → expression)")
    strat = "nemo/lightning/pytorch/strategies/megatron_strategy.py"
    out["nemo2:MegatronStrategy"] = entry(nemo, NEMO_REF, [(strat, "MegatronStrategy.__init__")],
                                          init_params(nemo.show(NEMO_REF, strat), "MegatronStrategy"),
                                          "arguments of nemo.lightning.MegatronStrategy")
    mpp = "nemo/lightning/pytorch/plugins/mixed_precision.py"
    out["nemo2:MegatronMixedPrecision"] = entry(nemo, NEMO_REF, [(mpp, "MegatronMixedPrecision.__init__")],
                                                init_params(nemo.show(NEMO_REF, mpp), "MegatronMixedPrecision"),
                                                "arguments of nemo.lightning.MegatronMixedPrecision")
    tu = "nemo/collections/nlp/modules/common/tokenizer_utils.py"
    out["nemo2:get_nmt_tokenizer"] = entry(nemo, NEMO_REF, [(tu, "get_nmt_tokenizer")],
                                           function_params(nemo.show(NEMO_REF, tu), "get_nmt_tokenizer"),
                                           "arguments of the tokenizer factory PreTrainingDataModule uses")
    gbase = "nemo/collections/llm/gpt/model/base.py"
    out["nemo2:GPTConfig"] = entry(nemo, NEMO_REF, [(gbase, "GPTConfig")],
                                   dataclass_fields(nemo.show(NEMO_REF, gbase), "GPTConfig"),
                                   "GPTConfig's own fields (it extends megatron-core's TransformerConfig)")
    rec = "nemo/collections/llm/recipes/llama3_8b.py"
    out["nemo2:Trainer-keywords"] = entry(nemo, NEMO_REF, [(rec, "run.Config(nl.Trainer, ...)")],
                                          sorted(call_keywords(nemo.show(NEMO_REF, rec), "Config", "nl.Trainer")),
                                          "keywords a NeMo 2.0 recipe gives nl.Trainer (Lightning's Trainer)")
    yml = "examples/nlp/language_modeling/conf/megatron_gpt_config.yaml"
    out["nemo1:megatron_gpt_config.yaml"] = entry(nemo, NEMO_REF, [(yml, "keys")], yaml_keys(nemo.show(NEMO_REF, yml)),
                                                  "the keys of NeMo 1.x's GPT pre-training config")
    gm = "nemo/collections/nlp/models/language_modeling/megatron_gpt_model.py"
    gsrc = nemo.show(NEMO_REF, gm)
    out["nemo1:GPTDatasetConfig-kwargs"] = entry(
        nemo, NEMO_REF, [(gm, "build_train_valid_test_datasets: kwargs = {...}"), (gm, "kwargs[...]")],
        {**dict_literal(gsrc, "kwargs"), **subscript_assignments(gsrc, "kwargs")},
        "what NeMo 1.x passes to megatron-core's GPTDatasetConfig (keyword → expression)")
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--megatron-lm", required=True)
    p.add_argument("--nemo", required=True)
    p.add_argument("--bridge", required=True)
    p.add_argument("--output", default=str(OUT))
    a = p.parse_args(argv)
    try:
        data = record(Mirror("megatron-lm", a.megatron_lm), Mirror("nemo", a.nemo), Mirror("bridge", a.bridge))
    except (subprocess.CalledProcessError, KeyError) as exc:
        print(f"error: reading the mirrors failed ({exc}); check the --megatron-lm/--nemo/--bridge git dirs",
              file=sys.stderr)
        return 1
    doc = {"recorded": datetime.date.today().isoformat(), "script": "scripts/record_upstream_fields.py",
           "sources": data}
    tmp = Path(a.output + ".tmp")
    tmp.write_text(json.dumps(doc, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    tmp.replace(a.output)
    print(f"wrote {len(data)} entries to {a.output}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
