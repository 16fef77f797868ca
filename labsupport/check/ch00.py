"""Checks for chapter 0 (orientation): parallel layout (q1), memory arithmetic (q2), q3, a transfer:
the data-parallel group of a GPU in Megatron's rank order, and q4, the book's exercise 5 (NeMo or
Hugging Face for three scenarios, §6.2.8) as structured answers with a free-text "why" graded by hand.

The named mistakes of q1–q3 are the tables of ``RULES`` (see :mod:`labsupport.check.rules`; q1's layout
mistakes are chapter 6's too, from :mod:`labsupport.check.layout_mistakes`): a failure shows the symptom on
the smallest layout that shows it and asks a question; the fix comes on a repeat of the same mistake, the
formula after that.  q4 names each failing scenario with a question."""
from __future__ import annotations

import itertools
import warnings
from typing import Any, Callable

import numpy as np
from omegaconf import OmegaConf

from labsupport.config import ConfigError, ParallelLayout, parallel_layout
from labsupport.distributed.gpu_grid import megatron_coords
from labsupport.distributed.training_memory import training_memory_gb
from labsupport.check import layout_mistakes as layout
from labsupport.check._core import chapter_summary, check, check_seed, expect, parts, Sealed, short
from labsupport.check.layout_mistakes import many
from labsupport.check.texts import load_texts
from labsupport.check.texts import language as language  # check.language("ko"): feedback in Korean
from labsupport.check.rules import first_showing, Rule, Rules

CHAPTER = "ch00"
TEXTS = load_texts(CHAPTER)


summary = chapter_summary(CHAPTER)

# ---------------------------------------------------------------------------------------------
# q1: the data-parallel size
def _layout_cfg(devices: int, nodes: int, tp: int, pp: int):
    return OmegaConf.create({"trainer": {"devices": devices, "num_nodes": nodes},
                             "model": {"tensor_model_parallel_size": tp, "pipeline_model_parallel_size": pp}})


def _reference_layout(devices: int, nodes: int, tp: int, pp: int) -> ParallelLayout | None:
    try:
        return parallel_layout(_layout_cfg(devices, nodes, tp, pp))
    except ConfigError:
        return None


def _q1_run(fn: Callable, case: tuple[int, int, int, int]) -> tuple[Any, list[str]]:
    """The learner's result for one layout (or the ValueError it raised) and the warnings it gave."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            got = fn(*case)
        except ValueError as exc:
            got = exc
    return got, [str(w.message) for w in caught]


#: q1's named mistakes; the layout ones are chapter 6's q2's too (labsupport.check.layout_mistakes)
RULES: dict[str, Rules] = {"q1": Rules(
    layout.ACCEPTS_INDIVISIBLE, layout.REFUSES_TP_ACROSS_NODES, layout.RAISES_LEGAL_LAYOUT,
    Rule("float_division"),
    layout.ONE_NODE_ONLY, layout.DIVIDES_BY_TP_ONLY,
    Rule("never_warns"),
    Rule("warns_more_than_once"),
    Rule("warns_inside_a_node"),
    texts=TEXTS["q1"])}


def _q1_kind(case: tuple[int, int, int, int], got: Any, warned: list[str]) -> str | None:
    """What is wrong with ``got`` for this layout (None: nothing): one name per distinct wrong behaviour (a
    rule of RULES["q1"], or not_an_int / wrong_size, which fail plainly)."""
    devices, nodes, tp, pp = case
    layout_ = _reference_layout(*case)
    number = isinstance(got, (int, float, np.integer, np.floating)) and not isinstance(got, bool)
    if layout_ is None:
        return None if isinstance(got, ValueError) else "accepts_indivisible" if number else "not_an_int"
    if isinstance(got, ValueError):
        return "refuses_tp_across_nodes" if layout_.tp_spans_nodes else "raises_legal_layout"
    if isinstance(got, (float, np.floating)) and got == layout_.data_parallel:
        return "float_division"
    if not isinstance(got, (int, np.integer)) or isinstance(got, bool):
        return "not_an_int"
    if got != layout_.data_parallel:
        if nodes > 1 and got == devices // (tp * pp):
            return "one_node_only"
        return "divides_by_tp_only" if pp > 1 and got == devices * nodes // tp else "wrong_size"
    if layout_.tp_spans_nodes and len(warned) != 1:
        return "warns_more_than_once" if warned else "never_warns"
    return "warns_inside_a_node" if not layout_.tp_spans_nodes and warned else None


#: the small layouts a failure is shrunk to: fewest GPUs first
_Q1_SMALL = sorted(itertools.product([1, 2, 4], [1, 2, 3], [1, 2, 3, 4], [1, 2, 3]),
                   key=lambda c: (c[0] * c[1], c[2] * c[3], c[2], c[3], c[0]))


def _q1_fail(fn: Callable, kind: str, case: tuple[int, int, int, int], got: Any, warned: list[str]) -> None:
    """Fail with ``kind`` shown on the smallest layout that shows it (the random one when none does)."""
    shown = first_showing(lambda c: _q1_run(fn, c), _Q1_SMALL, lambda c, r: _q1_kind(c, *r), kind)
    (case, (got, warned)) = shown or (case, (got, warned))
    devices, nodes, tp, pp = case
    call = f"data_parallel_size(devices={devices}, num_nodes={nodes}, tp={tp}, pp={pp})"
    layout_ = _reference_layout(*case)
    expect(kind != "not_an_int", f"{call} returned {short(got)} ({type(got).__name__}); expected "
                                 + ("an int" if layout_ else "ValueError, or an int for a layout that divides"))
    facts = {**layout.layout_facts(devices, nodes, tp, pp, upper=False), "call": call, "got": short(got),
             "error": short(str(got)), "type": type(got).__name__,
             "also_divides": f" ({many(nodes, 'node')} × {devices})",
             "times": len(warned), "warning": short(warned[0], 80) if warned else "", "tp_gpus": many(tp, "GPU")}
    if layout_ is not None:
        facts["spans"] = f"its TP group of {tp} GPUs spans {layout_.tp_nodes} nodes of {many(devices, 'GPU')}"
    if kind in ("one_node_only", "divides_by_tp_only", "wrong_size"):
        facts.update(replicas=many(got, "replica"), need=many(got * tp * pp, "GPU"))
        expect(kind != "wrong_size", f"{call} returned {short(got)}: {facts['replicas']} × tp × pp = {facts['need']}, "
                                     f"but the job has {devices * nodes}")
    RULES["q1"].fail(kind, **facts)


@check(CHAPTER, "q1", hint=TEXTS["q1"].hint)
def q1(data_parallel_size) -> str:
    """Checked: DP for 30 valid random layouts (an int; 5 of them with TP across nodes), ValueError for 30 that
    do not divide, exactly one warning for the valid layouts whose TP spans nodes and none for the others."""
    rng = np.random.default_rng(check_seed())
    quota = {"inside": 25, "spanning": 5, "bad": 30}     # exactly these many of each: the note states them
    while any(quota.values()):
        case = (int(rng.choice([1, 2, 4, 8])), int(rng.integers(1, 33)),
                int(rng.choice([1, 2, 3, 4, 8, 16])), int(rng.choice([1, 2, 3, 4, 5])))
        layout = _reference_layout(*case)
        group = "bad" if layout is None else "spanning" if layout.tp_spans_nodes else "inside"
        if not quota[group]:
            continue
        got, warned = _q1_run(data_parallel_size, case)
        kind = _q1_kind(case, got, warned)
        if kind:
            _q1_fail(data_parallel_size, kind, case, got, warned)
        quota[group] -= 1
    return "30 valid random layouts (5 with TP across nodes) and 30 that do not divide"


# ---------------------------------------------------------------------------------------------
# q2: memory per model size
RULES["q2"] = Rules(
    Rule("bytes_not_gb"),
    Rule("gib_not_gb"),
    Rule("zero_16_bytes"),
    Rule("no_sharding"),
    Rule("shards_everything"),
    Rule("bytes_per_param"),
    texts=TEXTS["q2"])
_Q2_SMALL = [(1e9, "bf16_weights", 1), (1e9, "megatron_adam", 1), (1e9, "megatron_distopt", 4)]


def _num(x: float) -> str:
    """A parameter count as a learner writes it: 1e9, 7.3e9."""
    return f"{x:.4g}".replace("e+0", "e").replace("e+", "e")


def _q2_kind(got: Any, n: float, method: str, dp: int) -> str | None:
    """What is wrong with ``got`` (None: nothing): bytes, GiB, ZeRO's 16 bytes, the sharding, a byte count."""
    want = training_memory_gb(n, method, dp)
    if not isinstance(got, (int, float, np.floating, np.integer)) or isinstance(got, bool) or not np.isfinite(got):
        return "not_a_number"
    if abs(got - want) <= 1e-6 * want:
        return None
    if np.isclose(got, want * 1e9, rtol=1e-6):
        return "bytes_not_gb"
    if np.isclose(got, want * 1e9 / 2 ** 30, rtol=1e-6):
        return "gib_not_gb"
    per_param = float(got) * 1e9 / n
    if method != "bf16_weights" and np.isclose(per_param, 16.0, rtol=1e-6):
        return "zero_16_bytes"
    if method == "megatron_distopt" and dp > 1:
        if np.isclose(per_param, 18.0, rtol=1e-6):
            return "no_sharding"
        if np.isclose(per_param, 18.0 / dp, rtol=1e-6):
            return "shards_everything"
    if abs(per_param - round(per_param)) <= 1e-6 * max(per_param, 1.0) and 1 <= round(per_param) <= 32:
        return "bytes_per_param"
    return "wrong_value"


def _q2_fail(fn: Callable, kind: str, n: float, method: str, dp: int, got: Any) -> None:
    """Fail with ``kind`` on one billion parameters (the result reads as bytes per parameter) when that shows it."""
    small = [c for c in _Q2_SMALL if c[1] == method]
    shown = first_showing(lambda c: fn(*c), small, lambda c, g: _q2_kind(g, *c), kind)
    (n, method, dp), got = shown or ((n, method, dp), got)
    call = f"memory_gb({_num(n)}, {method!r}, dp={dp})"
    want = training_memory_gb(n, method, dp)
    expect(kind != "not_a_number", f"{call} returned {short(got)}; expected a number (decimal GB)")
    expect(kind in RULES["q2"], f"{call} returned {short(got)}, expected {want:.4g}")
    RULES["q2"].fail(kind, call=call, got_num=_num(float(got)), got_6g=f"{float(got):.6g}", got_4g=f"{float(got):.4g}",
                     ratio=f"{float(got) / want:.4f}", want=f"{want:.4g}", dp=dp,
                     kept=f"{float(got) * 1e9 / n:.4g} bytes per parameter")


@check(CHAPTER, "q2", hint=TEXTS["q2"].hint)
def q2(memory_gb) -> str:
    """Checked: ``memory_gb(n_params, method, dp)`` for 30 random model sizes, the three methods, and a
    random data-parallel size dp (it changes only ``"megatron_distopt"``)."""
    rng = np.random.default_rng(check_seed())
    for _ in range(30):
        n = float(rng.choice([1, 3, 7, 8, 13, 34, 70, 405])) * 1e9 * float(rng.uniform(0.5, 1.5))
        dp = int(rng.choice([1, 2, 4, 8, 16, 64]))
        for method in ("bf16_weights", "megatron_adam", "megatron_distopt"):
            got = memory_gb(n, method, dp)
            kind = _q2_kind(got, n, method, dp)
            if kind:
                _q2_fail(memory_gb, kind, n, method, dp, got)
    return "30 random model sizes × 3 methods, random data-parallel sizes"


# ---------------------------------------------------------------------------------------------
# q3: the data-parallel group
_SAME_SLICE = "the DP group keeps tp_rank and pp_rank of rank and takes every dp_rank"
RULES["q3"] = Rules(
    Rule("tensor_parallel_group", fix=f"those GPUs split one layer (the tensor-parallel group); {_SAME_SLICE}"),
    Rule("pipeline_group", fix=f"those are the pipeline stages of one replica; {_SAME_SLICE}"),
    Rule("dp_varies_fastest"),
    texts=TEXTS["q3"])
#: small layouts (tp, pp, dp) a failure is shrunk to; a named group needs every size ≥ 2 to be told apart
_Q3_SMALL = [(1, 1, 2), (2, 1, 2), (1, 2, 2), (2, 2, 2), (2, 1, 3), (2, 2, 3), (3, 2, 2), (2, 3, 2), (4, 2, 2)]


def _dp_group(rank: int, tp: int, pp: int, dp: int) -> list[int]:
    t, p, _ = megatron_coords(rank, tp, pp, dp)
    return sorted(t + tp * (d + dp * p) for d in range(dp))


def _q3_kind(got: Any, rank: int, tp: int, pp: int, dp: int) -> str | None:
    if not (isinstance(got, (list, tuple)) and all(isinstance(x, (int, np.integer)) and not isinstance(x, bool)
                                                   for x in got)):
        return "not_a_list"
    got = sorted(int(x) for x in got)
    if got == _dp_group(rank, tp, pp, dp):
        return None
    t, p, d = megatron_coords(rank, tp, pp, dp)
    if got == sorted(x + tp * (d + dp * p) for x in range(tp)):
        return "tensor_parallel_group"
    if got == sorted(t + tp * (d + dp * q) for q in range(pp)):
        return "pipeline_group"
    if got == sorted(x + dp * (rank // dp % tp) + dp * tp * (rank // (dp * tp)) for x in range(dp)):
        return "dp_varies_fastest"
    return "wrong_group"


def _coords(ranks: list[int], tp: int, pp: int, dp: int) -> str:
    """Each rank's (tp_rank, dp_rank, pp_rank), for the symptom."""
    out = []
    for r in ranks[:6]:
        if 0 <= r < tp * pp * dp:
            t, p, d = megatron_coords(r, tp, pp, dp)
            out.append(f"GPU {r} = (tp {t}, dp {d}, pp {p})")
        else:
            out.append(f"GPU {r} does not exist (world {tp * pp * dp})")
    return "; ".join(out) + ("; …" if len(ranks) > 6 else "")


def _q3_fail(fn: Callable, kind: str, case: tuple[int, int, int, int], got: Any) -> None:
    """Fail with ``kind`` on the smallest layout and rank that shows it (a named group needs every size ≥ 2)."""
    small = [(rank, tp, pp, dp) for tp, pp, dp in _Q3_SMALL if kind == "wrong_group" or min(tp, pp, dp) >= 2
             for rank in range(tp * pp * dp)]
    case, got = first_showing(lambda c: fn(*c), small, lambda c, g: _q3_kind(g, *c), kind) or (case, got)
    rank, tp, pp, dp = case
    call = f"data_parallel_group(rank={rank}, tp={tp}, pp={pp}, dp={dp})"
    expect(kind != "not_a_list", f"{call} returned {short(got)}; expected a list of ints")
    got = sorted(int(x) for x in got)
    t, p, d = megatron_coords(rank, tp, pp, dp)
    symptom = f"{call} returned {short(got)}: {_coords(got, tp, pp, dp)}"
    expect(kind in RULES["q3"], symptom + ("" if rank in got else f"; GPU {rank} itself = (tp {t}, dp {d}, pp {p})"))
    RULES["q3"].fail(kind, symptom=symptom)


@check(CHAPTER, "q3", hint=TEXTS["q3"].hint)
def q3(data_parallel_group) -> str:
    """Checked: for 40 random layouts and ranks, the sorted list of global ranks that all-reduce gradients with
    ``rank`` (same tp_rank and pp_rank, every dp_rank), including ``rank`` itself."""
    rng = np.random.default_rng(check_seed())
    for _ in range(40):
        tp, pp, dp = (int(rng.choice(v)) for v in ([1, 2, 4, 8], [1, 2, 3, 4], [1, 2, 3, 4, 8]))
        rank = int(rng.integers(0, tp * pp * dp))
        got = data_parallel_group(rank, tp, pp, dp)
        kind = _q3_kind(got, rank, tp, pp, dp)
        if kind:
            _q3_fail(data_parallel_group, kind, (rank, tp, pp, dp), got)
    return "40 random layouts and ranks"


# ---------------------------------------------------------------------------------------------
# q4: the book's exercise 5, NeMo or Hugging Face for three scenarios (§6.2.8)
REASONS = {
    "megatron_parallelism": "TP/PP/DP (and sequence/context parallelism) of Megatron-Core, proven at thousands of GPUs",
    "data_pipeline_at_scale": "the binary-indexed, blended, packed data path of chapters 2-4",
    "hf_peft_ecosystem": "the Hugging Face model hub, PEFT (LoRA) and Trainer, or NVIDIA's NeMo AutoModel on the same "
                         "Hub models: little code at small scale",
    "fits_one_node": "the job fits one node, so large-scale parallelism is not needed",
    "speech_collections": "NeMo ships the speech collections (ASR, TTS, SpeechLM); since NeMo 3.0 speech is all it "
                          "ships",
    "nvidia_stack": "integration with NVIDIA's stack (Transformer Engine, NIM, Triton)",
}


#: q4's accepted [scenario, framework] pairs, sealed (see _core.Sealed).
_CHOICE = Sealed.load("labsupport:ch00:q4:choice")
#: q4: a scenario's answer must give at least one of its reasons here ...
_NEEDED = Sealed.load("labsupport:ch00:q4:needed")
#: ... and none of these.
_WRONG = Sealed.load("labsupport:ch00:q4:wrong")


@check(CHAPTER, "q4", hint=TEXTS["q4"].hint)
def q4(exercise_5: Callable) -> tuple[str, dict[str, str]]:
    """``exercise_5()`` → ``{"a"|"b"|"c": {"choice": nemo|hf|either, "reasons": [REASONS keys]}, "why": text}``."""
    answer = exercise_5()
    expect(isinstance(answer, dict), f"exercise_5() must return a dict, got {type(answer).__name__}")
    allowed = ("nemo", "hf", "either")
    for key in ("a", "b", "c"):
        item = answer.get(key)
        expect(isinstance(item, dict) and "choice" in item and "reasons" in item,
               f"answer[{key!r}] must be a dict with 'choice' and 'reasons', got {short(item)}")
        expect(item["choice"] in allowed, f"answer[{key!r}]['choice'] = {short(item['choice'])}; use one of {allowed}")
        unknown = [r for r in item["reasons"] if r not in REASONS]
        expect(not unknown, f"answer[{key!r}]['reasons'] has unknown keys {unknown}; use keys of check.REASONS")
        expect(item["reasons"], f"answer[{key!r}]['reasons'] is empty; give at least one reason key")
    a, b, c = answer["a"], answer["b"], answer["c"]
    why = answer.get("why", "")
    with parts() as part:  # name every failing part at once
        part(["a", a["choice"]] in _CHOICE,
             "(a) continued pre-training on 1024 GPUs: which framework was built for that scale?")
        part(any(["a", r] in _NEEDED for r in a["reasons"]),
             "(a) what makes 1024 GPUs work at all? (a reason about parallelism)")
        part(["b", b["choice"]] in _CHOICE,
             "(b) LoRA of a 7B model on one 8-GPU node: is a large-scale framework needed?")
        part(any(["b", r] in _NEEDED for r in b["reasons"]), "(b) name why the simpler stack suffices")
        part(not any(["b", r] in _WRONG for r in b["reasons"]),
             "(b) one node does not need Megatron's parallelism to fit a 7B LoRA")
        part(["c", c["choice"]] in _CHOICE and any(["c", r] in _NEEDED for r in c["reasons"]),
             "(c) speech recognition + LLM: which framework ships speech collections?")
        part(isinstance(why, str) and len(why.split()) >= 5, "add a 'why' field: a few sentences giving your reasons")
    return "scenario choices and reasons correct. Compare your reasons with this model answer: " + MODEL_ANSWER_Q4, \
        {"why": why}


#: Shown once q4 passes, to compare the free-text reasons with.
MODEL_ANSWER_Q4 = (
    "(a) Megatron-Core, through Megatron-Bridge today (the book's generation: NeMo 2.x's llm collection, pinned "
    "nemo-toolkit<3): 1024 GPUs need TP/PP/DP (and sequence/context parallelism) that are proven at that scale, plus "
    "the indexed, blended, packed data path of chapters 2–4. (b) Hugging Face (PEFT/LoRA), NVIDIA's NeMo AutoModel "
    "on the same Hub models, or either: a 7B LoRA fits one node without model parallelism, and the HF route needs the "
    "least code; Megatron-Bridge also does LoRA. (c) NeMo: since NeMo 3.0 it is NVIDIA's speech toolkit (ASR, TTS, "
    "SpeechLM), so one framework covers speech recognition and the speech-LLM pipeline.")
