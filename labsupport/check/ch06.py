"""Exercise checks of chapter 6 (end to end): ``from labsupport.check import ch06 as check``.

q1 the data-parallel sampler's slice · q2 the global-batch arithmetic of a config · q3 diagnose
a symptom from a measured log (which row of §6.2.7's table, which fix) · q4 book exercise 5
(NeMo or Hugging Face, §6.2.8) as structured answers.  Each check calls the learner's function
on fresh random inputs and compares with ``labsupport.training`` / ``labsupport.config``.
"""
from __future__ import annotations

from typing import Any, Callable

import numpy as np
from omegaconf import OmegaConf

from labsupport.check._core import check, expect, short
from labsupport.check._core import summary as _summary
from labsupport.config import ConfigError, parallel_layout
from labsupport.training.sampler import MegatronPretrainingSampler, num_microbatches

CHAPTER = "ch06"


def summary() -> None:
    """Print this chapter's check results and score (last cell of the solutions notebook)."""
    _summary(CHAPTER)


# ------------------------------------------------------------------------------------- q1
@check(CHAPTER, "q1", hint="the sampler gathers micro_batch_size × data_parallel_size indices starting at "
       "consumed_samples; rank r takes the contiguous slice [r × micro, (r + 1) × micro) of that group")
def q1(dp_slice: Callable) -> str:
    """``dp_slice(consumed_samples, micro_batch_size, rank, data_parallel_size)`` → list of indices."""
    rng = np.random.default_rng()
    for _ in range(60):
        micro, dp = int(rng.integers(1, 9)), int(rng.choice([1, 2, 3, 4, 8, 16]))
        rank = int(rng.integers(0, dp))
        consumed = int(rng.integers(0, 50)) * micro * dp * int(rng.integers(1, 4))
        want = next(iter(MegatronPretrainingSampler(consumed + 10 * micro * dp, consumed, micro, rank, dp)))
        got = dp_slice(consumed, micro, rank, dp)
        call = f"dp_slice(consumed_samples={consumed}, micro_batch_size={micro}, rank={rank}, data_parallel_size={dp})"
        expect(isinstance(got, (list, tuple, range, np.ndarray)), f"{call} returned {short(got)}; expected a list of ints")
        expect([int(x) for x in got] == want, f"{call} returned {short(list(got))}, expected {want}")
    return "60 random (consumed, micro, rank, DP) cases"


# ------------------------------------------------------------------------------------- q2
def _arith_cfg(devices: int, nodes: int, tp: int, pp: int, micro: int, global_bs: int, seq: int):
    return OmegaConf.create({"trainer": {"devices": devices, "num_nodes": nodes},
                             "model": {"tensor_model_parallel_size": tp, "pipeline_model_parallel_size": pp,
                                       "micro_batch_size": micro, "global_batch_size": global_bs,
                                       "encoder_seq_length": seq}})


def _arith_reference(cfg, steps: int) -> dict[str, int] | None:
    try:
        dp = parallel_layout(cfg).data_parallel
        acc = num_microbatches(cfg.model.global_batch_size, cfg.model.micro_batch_size, dp)
    except (ConfigError, ValueError):
        return None
    return {"data_parallel_size": dp, "accumulation_steps": acc,
            "tokens_per_step": cfg.model.global_batch_size * cfg.model.encoder_seq_length,
            "consumed_samples": steps * cfg.model.global_batch_size}


@check(CHAPTER, "q2", hint="DP = devices × num_nodes / (TP × PP); accumulation = global / (micro × DP); "
       "tokens per step = global × seq_length; consumed_samples after n steps = n × global. "
       "Raise ValueError when TP × PP does not divide the world, TP > devices, or micro × DP does not divide global.")
def q2(batch_arithmetic: Callable) -> str:
    """``batch_arithmetic(cfg, steps)`` → dict (data_parallel_size, accumulation_steps, tokens_per_step,
    consumed_samples) or ValueError."""
    rng = np.random.default_rng()
    good = bad = 0
    while good < 30 or bad < 15:
        devices, nodes = int(rng.choice([1, 2, 4, 8])), int(rng.choice([1, 2, 4, 16]))
        tp, pp = int(rng.choice([1, 2, 4, 8])), int(rng.choice([1, 2, 3, 4]))
        micro = int(rng.choice([1, 2, 4]))
        global_bs = micro * int(rng.choice([1, 2, 3, 4, 8, 16, 32, 64, 256]))
        seq = int(rng.choice([512, 2048, 4096]))
        steps = int(rng.integers(0, 10_000))
        cfg = _arith_cfg(devices, nodes, tp, pp, micro, global_bs, seq)
        want = _arith_reference(cfg, steps)
        if (want is None and bad >= 15) or (want is not None and good >= 30):
            continue
        call = (f"batch_arithmetic(devices={devices}, num_nodes={nodes}, TP={tp}, PP={pp}, micro={micro}, "
                f"global={global_bs}, seq={seq}; steps={steps})")
        if want is None:
            try:
                got = batch_arithmetic(cfg, steps)
            except ValueError:
                bad += 1
                continue
            expect(False, f"{call} returned {short(got)}; that layout cannot run, expected ValueError")
        got = batch_arithmetic(cfg, steps)
        expect(isinstance(got, dict), f"{call} returned {type(got).__name__}; expected a dict")
        for key, value in want.items():
            expect(key in got, f"{call}: the dict lacks {key!r}")
            expect(got[key] == value, f"{call}: {key} = {short(got[key])}, expected {value}")
        good += 1
    return f"{good} valid and {bad} impossible random configs"


# ------------------------------------------------------------------------------------- q3
#: (suspect, fix, the log field that shows it, a normal value, an abnormal value range)
SYMPTOM_ROWS = {
    "tokenize_every_step": ("binary_index", "data_share"),
    "padding": ("packing", "real_token_share"),
    "no_boundary_mask": ("reset_attention_mask", "cross_document_attention"),
    "tokenizer_mismatch": ("same_tokenizer", "decode_roundtrip_ok"),
    "small_set_oversampled": ("cap_epochs", "small_domain_gap"),
    "load_everything": ("mmap", "rss_over_corpus"),
}
SUSPECTS = tuple(SYMPTOM_ROWS)
FIXES = tuple(v[0] for v in SYMPTOM_ROWS.values())


def _healthy_log(rng: np.random.Generator) -> dict[str, Any]:
    return {"data_share": float(rng.uniform(0.01, 0.15)), "real_token_share": float(rng.uniform(0.93, 1.0)),
            "cross_document_attention": 0.0, "decode_roundtrip_ok": True,
            "small_domain_gap": float(rng.uniform(0.0, 0.8)),
            "rss_over_corpus": float(rng.uniform(0.001, 0.2))}


def make_symptom_log(suspect: str, rng: np.random.Generator | None = None) -> dict[str, Any]:
    """A measured log summary with one thing wrong (``suspect``); fields as in the notebook's table:
    ``data_share`` (data-loader time / step time), ``real_token_share`` (tokens with loss / tokens
    computed), ``cross_document_attention`` (share of allowed attention pairs crossing documents),
    ``decode_roundtrip_ok`` (serving decode of training ids gives the text back),
    ``small_domain_gap`` (held-out loss minus the loss on its own training samples, in nats, for the
    most up-weighted domain: memorisation opens the gap), ``rss_over_corpus`` (resident memory / corpus bytes)."""
    rng = np.random.default_rng() if rng is None else rng
    log = _healthy_log(rng)
    field = SYMPTOM_ROWS[suspect][1]
    log[field] = {"data_share": float(rng.uniform(0.5, 0.95)), "real_token_share": float(rng.uniform(0.1, 0.6)),
                  "cross_document_attention": float(rng.uniform(0.01, 0.3)), "decode_roundtrip_ok": False,
                  "small_domain_gap": float(rng.uniform(2.0, 6.0)),
                  "rss_over_corpus": float(rng.uniform(1.0, 1.5))}[field]
    return log


@check(CHAPTER, "q3", hint="compare each field with a healthy run: data loading well under half the step, nearly "
       "every computed token has a loss, no attention across documents, the decode round-trips, held-out loss close "
       "to the training loss on the up-weighted domain, memory far below the corpus size")
def q3(diagnose: Callable) -> str:
    """``diagnose(log)`` → ``{"suspect": one of SUSPECTS, "fix": one of FIXES}``."""
    rng = np.random.default_rng()
    cases = [s for s in SUSPECTS for _ in range(5)]
    rng.shuffle(cases)
    for suspect in cases:
        log = make_symptom_log(suspect, rng)
        got = diagnose(dict(log))
        expect(isinstance(got, dict) and {"suspect", "fix"} <= set(got),
               f"diagnose(...) returned {short(got)}; expected {{'suspect': ..., 'fix': ...}}")
        expect(got["suspect"] == suspect,
               f"diagnose({short(log, 200)}) named suspect {short(got['suspect'])}, expected {suspect!r}")
        expect(got["fix"] == SYMPTOM_ROWS[suspect][0],
               f"suspect {suspect!r} is right, but fix {short(got['fix'])} is not; expected {SYMPTOM_ROWS[suspect][0]!r}")
    return f"{len(cases)} random logs, each with one symptom"


# ------------------------------------------------------------------------------------- q4
REASONS = {
    "megatron_parallelism": "TP/PP/DP (and sequence/context parallelism) of Megatron-Core, proven at thousands of GPUs",
    "data_pipeline_at_scale": "the binary-indexed, blended, packed data path of chapters 2-4",
    "hf_peft_ecosystem": "the Hugging Face model hub, PEFT (LoRA) and Trainer: little code at small scale",
    "fits_one_node": "the job fits one node, so large-scale parallelism is not needed",
    "speech_collections": "NeMo ships ASR/TTS collections beside the LLM collection",
    "nvidia_stack": "integration with NVIDIA's stack (Transformer Engine, NIM, Triton)",
}


@check(CHAPTER, "q4", hint="Book §6.2.8: very large distributed pre-training favours NeMo/Megatron-Core; a LoRA on "
       "one node is simpler in the HF ecosystem (NeMo works too); NeMo has speech collections. Give reasons as keys of REASONS.")
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
    expect(a["choice"] == "nemo", "(a) continued pre-training on 1024 GPUs: which framework was built for that scale?")
    expect("megatron_parallelism" in a["reasons"], "(a) what makes 1024 GPUs work at all? (a reason about parallelism)")
    expect(b["choice"] in ("hf", "either"), "(b) LoRA of a 7B model on one 8-GPU node: is a large-scale framework needed?")
    expect({"hf_peft_ecosystem", "fits_one_node"} & set(b["reasons"]), "(b) name why the simpler stack suffices")
    expect("megatron_parallelism" not in b["reasons"], "(b) one node does not need Megatron's parallelism to fit a 7B LoRA")
    expect(c["choice"] == "nemo" and "speech_collections" in c["reasons"],
           "(c) speech recognition + LLM: which framework ships speech collections?")
    why = answer.get("why", "")
    expect(isinstance(why, str) and len(why.split()) >= 5, "add a 'why' field: a few sentences giving your reasons")
    return "scenario choices and reasons correct", {"why": why}
