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

from labsupport.check._core import Sealed, chapter_summary, check, check_seed, expect, parts, short
from labsupport.config import ConfigError, parallel_layout
from labsupport.training.sampler import MegatronPretrainingSampler, num_microbatches

CHAPTER = "ch06"


summary = chapter_summary(CHAPTER)


# ------------------------------------------------------------------------------------- q1
def _q1_mistake(got: list[int], consumed: int, micro: int, rank: int, dp: int) -> str:
    """A known wrong slice, named: strided over the ranks, or counted from 0 instead of consumed_samples."""
    if micro > 1 and dp > 1 and got == [consumed + rank + j * dp for j in range(micro)]:
        return " — that is a strided slice (every DP-th index); Megatron gives each rank a contiguous block"
    if consumed and got == [rank * micro + j for j in range(micro)]:
        return f" — that starts from 0; the sampler continues from consumed_samples = {consumed}"
    return ""


@check(CHAPTER, "q1", hint=(  # tiered: a nudge, the idea, then the formula
    "reread chapter 6's 'Data parallelism for real': each step the sampler hands out one group of consecutive "
    "sample indices to all the DP ranks together — where does the group start, and which part is rank r's?",
    "the group is the micro_batch_size × data_parallel_size indices right after the samples already consumed; "
    "the ranks split it into equal contiguous blocks in rank order (not every DP-th index)",
    "the sampler gathers micro_batch_size × data_parallel_size indices starting at "
    "consumed_samples; rank r takes the contiguous slice [r × micro, (r + 1) × micro) of that group, i.e. "
    "consumed_samples + r × micro ... + micro − 1"))
def q1(dp_slice: Callable) -> str:
    """``dp_slice(consumed_samples, micro_batch_size, rank, data_parallel_size)`` → list of indices."""
    rng = np.random.default_rng(check_seed())
    for _ in range(60):
        micro, dp = int(rng.integers(1, 9)), int(rng.choice([1, 2, 3, 4, 8, 16]))
        rank = int(rng.integers(0, dp))
        consumed = int(rng.integers(0, 50)) * micro * dp * int(rng.integers(1, 4))
        want = next(iter(MegatronPretrainingSampler(consumed + 10 * micro * dp, consumed, micro, rank, dp)))
        got = dp_slice(consumed, micro, rank, dp)
        call = f"dp_slice(consumed_samples={consumed}, micro_batch_size={micro}, rank={rank}, data_parallel_size={dp})"
        expect(isinstance(got, (list, tuple, range, np.ndarray)), f"{call} returned {short(got)}; expected a list of ints")
        got = [int(x) for x in got]
        if got != want:
            expect(False, f"{call} returned {short(got)}, expected {want}" + _q1_mistake(got, consumed, micro, rank, dp))
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


def _q2_mistake(key: str, got: Any, cfg: Any, steps: int, want: dict[str, int]) -> str:
    """A known wrong field, named: accumulation without DP, tokens of one micro-batch or one rank, steps for samples."""
    m = cfg.model
    dp = want["data_parallel_size"]
    wrong = {"accumulation_steps": [(m.global_batch_size // m.micro_batch_size,
                                     " — that forgets DP: each micro-batch step feeds DP ranks at once")],
             "tokens_per_step": [(m.micro_batch_size * m.encoder_seq_length,
                                  " — that is one micro-batch; a step takes the whole global batch"),
                                 (m.global_batch_size // dp * m.encoder_seq_length,
                                  " — that is one DP rank's share; count all ranks together")],
             "consumed_samples": [(steps, " — that counts steps; consumed_samples counts samples"),
                                  (steps * m.micro_batch_size * dp,
                                   " — that forgets gradient accumulation: a step consumes the whole global batch")]}
    for value, text in wrong.get(key, []):
        if value != want[key] and got == value:
            return text
    return ""


@check(CHAPTER, "q2", hint=(
    "reread chapter 6's 'One config drives everything': it derives these four numbers from the config; the "
    "data-parallel size is chapter 0's exercise 1",
    "a global batch is micro-batches of micro_batch_size samples, DP of them side by side in each micro-step, "
    "repeated over accumulation steps; tokens per optimizer step count every sample of the global batch; "
    "consumed_samples counts samples, not steps. Impossible layouts raise ValueError.",
    "DP = devices × num_nodes / (TP × PP); accumulation = global / (micro × DP); "
    "tokens per step = global × seq_length; consumed_samples after n steps = n × global. "
    "Raise ValueError when TP × PP does not divide the world or micro × DP does not divide global; TP wider "
    "than a node is legal (slow, chapter 0)."))
def q2(batch_arithmetic: Callable) -> str:
    """``batch_arithmetic(cfg, steps)`` → dict (data_parallel_size, accumulation_steps, tokens_per_step,
    consumed_samples) or ValueError."""
    rng = np.random.default_rng(check_seed())
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
            if not got[key] == value:
                expect(False, f"{call}: {key} = {short(got[key])}, expected {value}"
                       + _q2_mistake(key, got[key], cfg, steps, want))
        good += 1
    return f"{good} valid and {bad} impossible random configs"


# ------------------------------------------------------------------------------------- q3
#: The suspects of book §6.2.7's table and the fixes to choose from (options; the pairing is the exercise).
SUSPECTS = ("tokenize_every_step", "padding", "no_boundary_mask", "tokenizer_mismatch", "small_set_oversampled",
            "load_everything")
FIXES = tuple(sorted(("binary_index", "packing", "reset_attention_mask", "cu_seqlens", "same_tokenizer", "cap_epochs",
                      "mmap")))
#: where the boundary mask must act (chapter 4, "When reset_attention_mask takes effect"): an unfused
#: attention path applies the dataloader's dense mask; a fused/flash path (Transformer Engine's
#: attn_mask_type=causal) ignores it and needs THD cu_seqlens (PackedSeqParams, or megatron-core 0.19's
#: inter-document masking).
ATTENTION_PATHS = ("unfused", "fused")
#: the log field each suspect disturbs (for generating logs; reading it from a submission is flagged)
_FIELD = {"tokenize_every_step": "data_share", "padding": "real_token_share",
          "no_boundary_mask": "cross_document_attention", "tokenizer_mismatch": "decode_roundtrip_ok",
          "small_set_oversampled": "small_domain_gap", "load_everything": "rss_over_corpus"}
#: q3's [suspect, fix] pairs — for no_boundary_mask [suspect, attention_path, fix] — sealed (see _core.Sealed).
_FIX = Sealed("labsupport:ch06:q3:fix", [
    "02b4b74461918efc5c2d049038547f787d1a00fcaf8981c0211c831f0d43ae66",
    "2aae9a97760722640572f04508d81a17f7521c87806b63e838b48d915ac4c6e1",
    "59d92e3140863e3288c4ad2acc6d274f9c2ceec9f8eada51bd75ba483488b9a2",
    "5c4f032669dd839c558dbb8b7e8fb7092e5864f79a54a68f557ee07c95b0fa07",
    "86d2379fc3b9a6afd384c065a515364f401b97d8c623be929aa2918c962f243a",
    "8c68839f601e65e69918b0ad8b42bc43ba383805b08fcf0992a51cb16a1f6af6",
    "956ceccaecab38ef961c9a893bb69be8d4a4d4ad398a7992316f607eaa4c706c",
])


def _healthy_log(rng: np.random.Generator) -> dict[str, Any]:
    path = str(rng.choice(ATTENTION_PATHS))
    return {"data_share": float(rng.uniform(0.01, 0.15)), "real_token_share": float(rng.uniform(0.93, 1.0)),
            "cross_document_attention": 0.0, "decode_roundtrip_ok": True,
            "small_domain_gap": float(rng.uniform(0.0, 0.8)),
            "rss_over_corpus": float(rng.uniform(0.001, 0.2)),
            "attention_path": path, "reset_attention_mask": True if path == "unfused" else bool(rng.integers(2))}


def make_symptom_log(suspect: str, rng: np.random.Generator | None = None) -> dict[str, Any]:
    """A measured log summary with one thing wrong (``suspect``); fields as in the notebook's table:
    ``data_share`` (data-loader time / step time), ``real_token_share`` (tokens with loss / tokens
    computed), ``cross_document_attention`` (share of allowed attention pairs crossing documents),
    ``decode_roundtrip_ok`` (serving decode of training ids gives the text back),
    ``small_domain_gap`` (held-out loss minus the loss on its own training samples, in nats, for the
    most up-weighted domain: memorisation opens the gap), ``rss_over_corpus`` (resident memory / corpus bytes),
    ``attention_path`` ("unfused": applies the dataloader's mask; "fused": takes no mask) and the config's
    ``reset_attention_mask``.  Mixed documents on the unfused path come with the flag off; on the fused
    path the flag does not matter."""
    rng = np.random.default_rng() if rng is None else rng
    log = _healthy_log(rng)
    field = _FIELD[suspect]
    log[field] = {"data_share": float(rng.uniform(0.5, 0.95)), "real_token_share": float(rng.uniform(0.1, 0.6)),
                  "cross_document_attention": float(rng.uniform(0.01, 0.3)), "decode_roundtrip_ok": False,
                  "small_domain_gap": float(rng.uniform(2.0, 6.0)),
                  "rss_over_corpus": float(rng.uniform(1.0, 1.5))}[field]
    if suspect == "no_boundary_mask":
        log["reset_attention_mask"] = False if log["attention_path"] == "unfused" else bool(rng.integers(2))
    return log


@check(CHAPTER, "q3", hint=(
    "reread chapter 6's 'The symptom → suspect table, live' (§6.2.7): exactly one field of each log is far from "
    "a healthy run — find it, then the row of the table it belongs to",
    "compare each field with a healthy run: data loading well under half the step, nearly "
    "every computed token has a loss, no attention across documents, the decode round-trips, held-out loss close "
    "to the training loss on the up-weighted domain, memory far below the corpus size",
    "one field, one row: data_share → the tokenizer at every step, real_token_share → padding, "
    "cross_document_attention → no boundary mask, decode_roundtrip_ok → tokenizer mismatch, small_domain_gap → "
    "the small set over-sampled, rss_over_corpus → loading everything; the fix is the mechanism of chapters 1–4 "
    "that removes that cause — for mixed documents it depends on attention_path: an unfused path applies the "
    "dataloader's mask once reset_attention_mask is on, a fused path ignores any mask and needs cu_seqlens"))
def q3(diagnose: Callable) -> str:
    """``diagnose(log)`` → ``{"suspect": one of SUSPECTS, "fix": one of FIXES}``."""
    rng = np.random.default_rng(check_seed())
    cases = [s for s in SUSPECTS for _ in range(5)]
    rng.shuffle(cases)
    for suspect in cases:
        log = make_symptom_log(suspect, rng)
        got = diagnose(dict(log))
        expect(isinstance(got, dict) and {"suspect", "fix"} <= set(got),
               f"diagnose(...) returned {short(got)}; expected {{'suspect': ..., 'fix': ...}}")
        if got["suspect"] != suspect:
            named = ""
            if isinstance(got["suspect"], str) and got["suspect"] in _FIELD:
                field = _FIELD[got["suspect"]]
                named = f" — {field} = {short(log[field])} is healthy in this log; which field is not?"
            expect(False, f"diagnose({short(log, 200)}) named suspect {short(got['suspect'])}, expected {suspect!r}"
                   + named)
        key = [suspect, log["attention_path"], got["fix"]] if suspect == "no_boundary_mask" else [suspect, got["fix"]]
        where = f" on the {log['attention_path']} attention path" if suspect == "no_boundary_mask" else ""
        expect(key in _FIX, f"suspect {suspect!r} is right, but fix {short(got['fix'])} does not remove it{where}; "
                            f"choose from {FIXES}")
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


#: q4's accepted [scenario, framework] pairs, sealed (see _core.Sealed).
_CHOICE = Sealed("labsupport:ch06:q4:choice", [
    "64f6ee08e818d49b3ec913cdb24951e263698a39991fafb906067d5b8cc21f52",
    "7739ec5683dab7bcb740d88137291e6752be739c374cc22b385ea9b7e6e2e518",
    "eb3d0b2f4762618565f884c0a80b60dbb56e314288fb5845835074e7c7d4a823",
    "eb683cedcae679289e2ae60924852cf37a812b5e8ee6e6cb88db4cb3044928b1",
])
#: q4: a scenario's answer must give at least one of its reasons here ...
_NEEDED = Sealed("labsupport:ch06:q4:needed", [
    "20bfa1ef86ea46dc7d098623f0c0fd8696a7623d91969fe9b0832e3df751932a",
    "4b59e0021afc60c226a8938370057b2b155cfe14d69448b31a2ed57cbce8593e",
    "6f55e6573edb1afef157a0c703a2f1af04b396a743edaca1f1af122922e4e7b2",
    "f48336fc3c2c4add076fe6c30abdfdc7f4f0e5b188e67cd8d87813894f27e768",
])
#: ... and none of these.
_WRONG = Sealed("labsupport:ch06:q4:wrong", [
    "1c8c7457bc65a4b6d0f7de10be28a5dc6653a3f18ff0054488314d64a2d720cb",
])


@check(CHAPTER, "q4", hint=(
    "reread chapter 0's 'Trade-offs: NeMo/Megatron or Hugging Face' (book §6.2.8): for each scenario, what does "
    "the job need that only one framework gives?",
    "scale decides: model and data parallelism across many nodes is what Megatron-Core was built for; a job that "
    "fits one node gains more from the simpler ecosystem (and NeMo still works); a pipeline beyond text asks "
    "which framework ships those collections",
    "Book §6.2.8: very large distributed pre-training favours NeMo/Megatron-Core; a LoRA on "
    "one node is simpler in the HF ecosystem (NeMo works too); NeMo has speech collections. Give reasons as keys "
    "of REASONS."))
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
        part(["a", a["choice"]] in _CHOICE, "(a) continued pre-training on 1024 GPUs: which framework was built for that scale?")
        part(any(["a", r] in _NEEDED for r in a["reasons"]), "(a) what makes 1024 GPUs work at all? (a reason about parallelism)")
        part(["b", b["choice"]] in _CHOICE, "(b) LoRA of a 7B model on one 8-GPU node: is a large-scale framework needed?")
        part(any(["b", r] in _NEEDED for r in b["reasons"]), "(b) name why the simpler stack suffices")
        part(not any(["b", r] in _WRONG for r in b["reasons"]), "(b) one node does not need Megatron's parallelism to fit a 7B LoRA")
        part(["c", c["choice"]] in _CHOICE and any(["c", r] in _NEEDED for r in c["reasons"]),
             "(c) speech recognition + LLM: which framework ships speech collections?")
        part(isinstance(why, str) and len(why.split()) >= 5, "add a 'why' field: a few sentences giving your reasons")
    return "scenario choices and reasons correct. Compare your reasons with this model answer: " + MODEL_ANSWER_Q4, \
        {"why": why}


#: Shown once q4 passes, to compare the free-text reasons with.
MODEL_ANSWER_Q4 = (
    "(a) NeMo/Megatron-Core: 1024 GPUs need TP/PP/DP (and sequence/context parallelism) that are proven at that "
    "scale, plus the indexed, blended, packed data path of chapters 2–4. (b) Hugging Face (PEFT/LoRA) or either: a "
    "7B LoRA fits one node without model parallelism, and the HF ecosystem needs the least code; NeMo also supports "
    "LoRA. (c) NeMo: it ships speech (ASR/TTS) collections beside the LLM ones, so one framework covers the pipeline.")
