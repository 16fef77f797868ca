"""Exercise checks of chapter 6 (end to end): ``from labsupport.check import ch06 as check``.

q1 the data-parallel sampler's slice · q2 the global-batch arithmetic of a config · q3 diagnose
a symptom from a measured log (which row of §6.2.7's table, which fix) · q4 which step, rank and
micro-batch read a domain's k-th sample after a resume (chapter 3's blend + the sampler +
``consumed_samples``) · q5, a transfer exercise: a restart with a changed blend — does the data-plan
guard refuse it, and what would the first micro-batch be if it were accepted.  (The book's exercise
5, NeMo or Hugging Face, is chapter 0's q4, where that trade-off is taught.)  Each check calls the
learner's function on fresh random inputs and compares with ``labsupport.training`` /
``labsupport.config`` / ``labsupport.datasets.blending``.
"""
from __future__ import annotations

from typing import Any, Callable

import numpy as np
from omegaconf import OmegaConf

from labsupport.check._core import Sealed, chapter_summary, check, check_seed, expect, mistake, short
from labsupport.config import ConfigError, parallel_layout
from labsupport.datasets.blending import build_blending_indices, normalize_weights
from labsupport.training.data_plan import DataPlanError, check_plan, consumed_digest, plan_of
from labsupport.training.sampler import MegatronPretrainingSampler, num_microbatches

CHAPTER = "ch06"

_SAMPLER = "labsupport.training.sampler"
_BLENDING = "labsupport.datasets.blending"
#: The labsupport functions each question's check compares with: the grader flags an answer that
#: uses them, and hides them from the student's process while it grades (labsupport.workbook.grading).
REFERENCES = {
    "q1": [f"{_SAMPLER}:rank_slice", f"{_SAMPLER}:MegatronPretrainingSampler",
           f"{_SAMPLER}:MegatronPretrainingSampler.__iter__"],
    "q2": [f"{_SAMPLER}:num_microbatches"],
    "q4": [f"{_SAMPLER}:rank_slice", f"{_SAMPLER}:MegatronPretrainingSampler",
           f"{_SAMPLER}:MegatronPretrainingSampler.__iter__", f"{_BLENDING}:build_blending_indices",
           f"{_BLENDING}:reference_blending_indices", f"{_BLENDING}:greedy_step"],
    "q5": [f"{_SAMPLER}:rank_slice", f"{_SAMPLER}:MegatronPretrainingSampler",
           f"{_SAMPLER}:MegatronPretrainingSampler.__iter__", f"{_BLENDING}:build_blending_indices",
           f"{_BLENDING}:reference_blending_indices", f"{_BLENDING}:greedy_step",
           "labsupport.training.data_plan:check_plan", "labsupport.training.data_plan:consumed_digest"],
}


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
def _dyadic_weights(rng: np.random.Generator, n: int, scale: int = 1) -> list[int]:
    """``n`` integer data_prefix weights whose normalised values are exact binary fractions (their
    sum is a power of two times ``scale``), so ``w × step`` has no rounding and ties are real."""
    total = int(rng.choice([4, 8, 16]))
    while True:
        cuts = sorted(int(c) for c in rng.choice(np.arange(1, total), n - 1, replace=False))
        raw = [b - a for a, b in zip([0] + cuts, cuts + [total])]
        if all(raw):
            return [r * scale for r in raw]


def _blend(weights: list[float], size: int) -> tuple[np.ndarray, np.ndarray]:
    """Chapter 3's blend of ``size`` samples: (dataset_index, dataset_sample_index)."""
    return build_blending_indices(normalize_weights(weights), size)


def _locate_reference(weights: list[float], domain: int, k: int, consumed: int, micro: int, dp: int,
                      global_bs: int) -> dict[str, int] | None:
    """Where the sampler of a run resumed at ``consumed`` reads ``domain``'s sample ``k``: each
    rank's MegatronPretrainingSampler is walked from ``consumed`` until it hands out that index."""
    size = max(consumed, 1) * 2 + 64
    while True:
        di, si = _blend(weights, size)
        hit = np.flatnonzero((di == domain) & (si == k))
        if hit.size:
            break
        size *= 2
    index = int(hit[0])
    if index < consumed:
        return None
    group, acc = micro * dp, num_microbatches(global_bs, micro, dp)
    total = (index // group + 1) * group
    for rank in range(dp):
        for j, batch in enumerate(MegatronPretrainingSampler(total, consumed, micro, rank, dp)):
            if index in batch:
                return {"blend_index": index, "step": consumed // global_bs + j // acc + 1, "rank": rank,
                        "microbatch": j % acc}
    raise AssertionError(f"blend index {index} was handed to no rank")  # the sampler covers every index


def _q4_mistake(got: dict, want: dict, case: dict) -> None:
    """Name a wrong field the check recognises (raises a Mistake), or return to fail plainly."""
    i, consumed, micro, dp, global_bs = (want["blend_index"], case["consumed_samples"], case["micro_batch_size"],
                                         case["data_parallel_size"], case["global_batch_size"])
    within = i - (want["step"] - 1) * global_bs          # the sample's position inside its step's global batch
    where = (f"{case['call']}: the sample at blend index {i} (position {within} of step {want['step']}'s "
             f"global batch of {global_bs}; micro {micro}, DP {dp})")
    said = f"{where}: you said"
    if got["blend_index"] != i and got["blend_index"] in (case["_next"], case["_previous"]):
        held = case["k"] + (1 if got["blend_index"] == case["_next"] else -1)
        mistake("k_off_by_one",
                symptom=f"{case['call']}: blend index {short(got['blend_index'])} holds sample {held} of domain "
                        f"{case['domain']}, not sample {case['k']}",
                ask="Samples of a domain are numbered from 0: which occurrence of the domain is sample k?",
                fix="Sample k of domain d is the (k + 1)-th blend position whose dataset is d "
                    "(dataset_sample_index = k).",
                formula="blend_index = the i with dataset_index[i] == d and dataset_sample_index[i] == k")
    if got["step"] == want["step"] - 1:
        mistake("step_from_zero",
                symptom=f"{said} step {short(got['step'])}; the first {global_bs} samples (indices "
                        f"0…{global_bs - 1}) are read by step 1",
                ask="Which step reads blend index 0 — is the first optimizer step number 0 or 1?",
                fix="Steps count from 1: step = blend_index // global_batch_size + 1.",
                formula="step = i // global_batch_size + 1 (the resumed run goes on counting)")
    if got["step"] != want["step"] and got["step"] == (i - consumed) // global_bs + 1:
        mistake("step_from_resume",
                symptom=f"{said} step {short(got['step'])}; the checkpoint was written after step "
                        f"{consumed // global_bs}",
                ask=f"consumed_samples = {consumed}: how many steps had run before the resume, and does the "
                    "resumed run start its step count again?",
                fix="The resumed run continues the step count: step = blend_index // global_batch_size + 1, "
                    "not counted from consumed_samples.",
                formula="step = i // global_batch_size + 1")
    if got["step"] != want["step"] and got["step"] == i // (micro * dp) + 1:
        mistake("step_is_microstep",
                symptom=f"{said} step {short(got['step'])}; blend indices 0…{global_bs - 1} are all read in step 1",
                ask=f"An optimizer step takes the whole global batch ({global_bs} samples): how many "
                    "micro-batch groups is that?",
                fix=f"Gradient accumulation: one step = global_batch_size samples = {global_bs // (micro * dp)} "
                    "groups of micro × DP.",
                formula="step = i // global_batch_size + 1; microbatch = (i mod global) // (micro × DP)")
    if got["rank"] != want["rank"] and got["rank"] == within % dp and micro > 1:
        mistake("rank_strided", symptom=f"{said} rank {short(got['rank'])}",
                ask="In exercise 1, does a rank read a contiguous block of the micro × DP group, or every DP-th "
                    "index?",
                fix="Each rank takes a contiguous block of micro samples: rank = (position in the group) // micro.",
                formula="rank = (i mod (micro × DP)) // micro")
    if got["rank"] != want["rank"] and got["rank"] == within // micro and within // micro >= dp:
        mistake("rank_beyond_dp", symptom=f"{said} rank {short(got['rank'])}, but with DP = {dp} the ranks are "
                                          f"0…{dp - 1}",
                ask="The global batch is several micro × DP groups read one after another (gradient "
                    "accumulation): where does the second group start over?",
                fix="Take the position inside its micro × DP group first: rank = (i mod (micro × DP)) // micro.",
                formula="rank = (i mod (micro × DP)) // micro; microbatch = (i mod global) // (micro × DP)")


@check(CHAPTER, "q4", hint=(
    "reread chapter 6's 'Data parallelism for real' and chapter 3's greedy rule: first find where the blend puts "
    "the sample, then which step, micro-batch and rank the sampler hands that position to",
    "the blend position is fixed by chapter 3's rule alone (weights normalised); a resumed sampler starts at "
    "consumed_samples, so anything before it was read before the checkpoint (None); after it, each step is one "
    "global batch of accumulation × (micro × DP) positions and your exercise 1 says which rank reads which",
    "i = the blend position with dataset d and sample k (greedy rule, x = max(i, 1), lowest index on ties); None if "
    "i < consumed_samples; step = i // global + 1; microbatch = (i mod global) // (micro × DP); "
    "rank = (i mod (micro × DP)) // micro"))
def q4(locate_sample: Callable) -> str:
    """``locate_sample(weights, domain, k, consumed_samples, micro_batch_size, data_parallel_size,
    global_batch_size)`` → ``{"blend_index", "step", "rank", "microbatch"}`` or None."""
    rng = np.random.default_rng(check_seed())
    cases: list[tuple] = []
    before = after = 0
    while before < 5 or after < 25:
        n = int(rng.integers(2, 5))
        weights = _dyadic_weights(rng, n, int(rng.choice([1, 1, 3, 5])))
        micro, dp = int(rng.integers(1, 6)), int(rng.choice([1, 2, 3, 4, 5, 6]))
        global_bs = micro * dp * int(rng.integers(1, 5))
        domain, k = int(rng.integers(0, n)), int(rng.integers(0, 80))
        consumed = global_bs * int(rng.choice([0, 2, 3, 5, 7, 11]))   # not 1 step: 'counted from 1' and
        # 'counted from the resume' would give the same wrong step
        want = _locate_reference(weights, domain, k, consumed, micro, dp, global_bs)
        if (want is None and before >= 5) or (want is not None and after >= 25):
            continue
        before, after = before + (want is None), after + (want is not None)
        cases.append((weights, n, micro, dp, global_bs, domain, k, consumed, want))
    # smallest first, so that a failure shows the smallest input that shows it
    cases.sort(key=lambda c: (c[6] + c[7] + c[4], sum(c[0]), c[1]))
    for weights, n, micro, dp, global_bs, domain, k, consumed, want in cases:
        call = (f"locate_sample(weights={weights}, domain={domain}, k={k}, consumed_samples={consumed}, "
                f"micro_batch_size={micro}, data_parallel_size={dp}, global_batch_size={global_bs})")
        got = locate_sample(list(weights), domain, k, consumed, micro, dp, global_bs)
        if want is None:
            expect(got is None, f"{call} returned {short(got)}; that sample sits before consumed_samples = "
                                f"{consumed}: it was read before the checkpoint, expected None")
            continue
        expect(isinstance(got, dict), f"{call} returned {short(got)}; expected a dict with blend_index, step, "
                                      "rank, microbatch (None only for a sample read before the resume)")
        for key in want:
            expect(key in got, f"{call}: the dict lacks {key!r}")
        got = {key: got[key] for key in want}
        if got != want:
            di, si = _blend(weights, want["blend_index"] + 4 * max(weights) * n + 64)
            occ = np.flatnonzero(di == domain)
            case = {"call": call, "consumed_samples": consumed, "micro_batch_size": micro, "data_parallel_size": dp,
                    "global_batch_size": global_bs, "domain": domain, "k": k,
                    "_next": int(occ[k + 1]) if k + 1 < occ.size else -1, "_previous": int(occ[k - 1]) if k else -1}
            _q4_mistake(got, want, case)
            wrong = ", ".join(f"{key} = {short(got[key])} (expected {want[key]})"
                              for key in want if got[key] != want[key])
            expect(False, f"{call}: {wrong}")
    return f"{after} samples read after a resume and {before} read before it, random blends and layouts"


# ------------------------------------------------------------------------------------- q5
class _Samples:
    """One domain's GPT samples as the data-plan guard sees them: sample s is document s (one
    epoch, no shuffle), so a sample's identity is (domain, s)."""

    def __init__(self, n: int) -> None:
        self.num_samples, self.num_epochs = n, 1
        self.shuffle_index = np.arange(n)
        self.sample_index = np.stack([np.arange(n + 1), np.zeros(n + 1, dtype=np.int64)], axis=1)
        self.document_index = np.arange(n + 2)

    def __len__(self) -> int:
        return self.num_samples


class _Blend:
    """A blend of :class:`_Samples` with chapter 3's indices, for :func:`check_plan`."""

    def __init__(self, weights: list[float], size: int) -> None:
        self.dataset_index, self.dataset_sample_index = _blend(weights, size)
        self.weights = normalize_weights(weights)
        self.names = [f"domain{d}" for d in range(len(weights))]
        self.datasets = [_Samples(size + 1) for _ in weights]
        self.size = size

    def __len__(self) -> int:
        return self.size


def _restart_reference(old: list[float], new: list[float], consumed: int, micro: int, rank: int,
                       dp: int) -> dict[str, Any]:
    """The real guard (:func:`check_plan`) on the checkpoint's plan, and the micro-batch
    MegatronPretrainingSampler hands ``rank`` first from the new blend at ``consumed``."""
    size = consumed + micro * dp
    before, after = _Blend(old, size), _Blend(new, size)
    settings = type("S", (), {"seed": 1234, "seq_length": 128, "flags": {}, "max_steps": 1,
                              "global_batch_size": micro * dp, "names": before.names, "weights": before.weights})
    saved = plan_of(settings, before, consumed, consumed_digest(before, consumed).hexdigest())
    try:
        check_plan(saved, settings, after, consumed, "checkpoint", allow=False)
        refused = False
    except DataPlanError:
        refused = True
    batch = next(iter(MegatronPretrainingSampler(size, consumed, micro, rank, dp)))
    first = [[int(after.dataset_index[i]), int(after.dataset_sample_index[i])] for i in batch]
    trained = {(int(d), int(s))
               for d, s in zip(before.dataset_index[:consumed], before.dataset_sample_index[:consumed])}
    return {"refused": refused, "first_microbatch": first,
            "already_trained": sum((d, s) in trained for d, s in first)}


def _pairs(value: Any) -> list[list[int]] | None:
    try:
        return [[int(d), int(s)] for d, s in value]
    except (TypeError, ValueError):
        return None


def _q5_mistake(got: dict, want: dict, case: dict) -> None:
    """Name a wrong field the check recognises (raises a Mistake), or return to fail plainly."""
    old, new, consumed, micro, rank, dp = (case[k] for k in ("old", "new", "consumed", "micro", "rank", "dp"))
    call, size = case["call"], consumed + micro * dp
    di0, si0 = _blend(old, size)
    di1, si1 = _blend(new, size)
    if got["refused"] != want["refused"] and want["refused"]:
        p = int(np.flatnonzero((di0[:consumed] != di1[:consumed]) | (si0[:consumed] != si1[:consumed]))[0])
        mistake("refusal_missed",
                symptom=f"{call}: blend position {p}, already trained on, held sample [{int(di0[p])}, {int(si0[p])}] "
                        f"and now holds [{int(di1[p])}, {int(si1[p])}]; you said not refused",
                ask="What does the data-plan guard recompute on resume — and is it the same here?",
                fix="It hashes which (domain, sample) sits at each of the first consumed_samples blend positions; "
                    "if any of them changed, it refuses.",
                formula="refused = blend(new)[:consumed] ≠ blend(old)[:consumed] as (domain, sample) pairs, "
                        "blend = chapter 3's greedy rule on w / Σw")
    if got["refused"] != want["refused"]:
        same = ("nothing had been trained on yet (consumed_samples = 0)" if not consumed else
                "the first consumed_samples blend positions hold the same samples under both weights"
                + (" (they normalise to the same shares)" if normalize_weights(old) == normalize_weights(new) else ""))
        mistake("refused_weights_not_samples", symptom=f"{call}: you said refused, but {same}",
                ask="Does the guard compare the config's weights, or the samples already trained on?",
                fix="It refuses only when one of the first consumed_samples (domain, sample) pairs changed; "
                    "normalise the weights and compare the two blends' first consumed_samples positions.",
                formula="refused = blend(new)[:consumed] ≠ blend(old)[:consumed], blend = chapter 3's greedy rule "
                        "on w / Σw")
    first = _pairs(got["first_microbatch"])
    positions = list(range(consumed + rank * micro, consumed + (rank + 1) * micro))
    if first == [[int(di0[i]), int(si0[i])] for i in positions]:
        mistake("old_blend", symptom=f"{call}: rank {rank} reads blend positions {positions} first; you gave the "
                                     f"samples the OLD weights {old} put there",
                ask="After the restart (accepted with allow_new_data_plan=true), which blend does the sampler "
                    "index into?",
                fix=f"Build the blend from the NEW weights {new} and read positions {positions} from it.",
                formula="first_microbatch = blend(new)[consumed + rank × micro … "
                        "consumed + (rank + 1) × micro − 1]")
    if consumed and first == [[int(di1[i]), int(si1[i])] for i in range(rank * micro, (rank + 1) * micro)]:
        mistake("from_zero", symptom=f"{call}: you gave the new blend's positions {rank * micro}…"
                                     f"{(rank + 1) * micro - 1}; consumed_samples = {consumed}",
                ask="Where does the resumed sampler start walking the blend?",
                fix="At consumed_samples: rank r reads positions consumed + r × micro … + micro − 1 (exercise 1).",
                formula="first_microbatch = blend(new)[consumed + rank × micro … "
                        "consumed + (rank + 1) × micro − 1]")


@check(CHAPTER, "q5", hint=(
    "reread chapter 6's 'Exact resume' (its 'A changed data plan' cell): what does a checkpoint record about the "
    "data, and what does the resuming run recompute and compare?",
    "the guard rebuilds the blend with the new weights and compares the samples at the positions already trained "
    "on (0 … consumed_samples − 1) with those the checkpoint recorded; accepted anyway, the sampler still starts "
    "at consumed_samples — in the NEW blend — so some samples it hands out may have been trained on already",
    "normalise both weight lists; old, new = chapter 3's blend of each; refused = old[:consumed] ≠ new[:consumed] "
    "as (domain, sample) pairs; first_microbatch = new[consumed + rank × micro … + micro − 1]; already_trained = "
    "how many of those pairs are in old[:consumed]"))
def q5(restart_with_new_blend: Callable) -> str:
    """``restart_with_new_blend(old_weights, new_weights, consumed_samples, micro_batch_size, rank,
    data_parallel_size)`` → ``{"refused": bool, "first_microbatch": [[domain, sample], …],
    "already_trained": int}``."""
    rng = np.random.default_rng(check_seed())
    # 6 of each kind: refused and re-reading trained samples, refused without, accepted with the
    # same shares under other numbers, accepted otherwise (nothing trained yet, or the same prefix)
    room = {"refused, re-read": 6, "refused": 6, "rescaled": 4, "accepted": 4}
    cases: list[tuple] = []
    while any(room.values()):
        n = int(rng.integers(2, 5))
        old = _dyadic_weights(rng, n)
        if rng.random() < 0.25:
            new = [w * int(rng.choice([2, 3, 5])) for w in old]                 # the same shares, other numbers
        else:
            new = _dyadic_weights(rng, n, int(rng.choice([1, 3])))
        micro, dp = int(rng.integers(1, 5)), int(rng.choice([1, 2, 3, 4, 5]))
        consumed = micro * dp * int(rng.integers(0, 9))
        rank = int(rng.integers(0, dp))
        want = _restart_reference(old, new, consumed, micro, rank, dp)
        kind = (("refused, re-read" if want["already_trained"] else "refused") if want["refused"] else
                "rescaled" if normalize_weights(old) == normalize_weights(new) else "accepted")
        if room[kind]:
            room[kind] -= 1
            cases.append((old, new, consumed, micro, rank, dp, want))
    # smallest first, so that a failure shows the smallest input that shows it
    cases.sort(key=lambda c: (c[2] + c[3] * c[5], sum(c[0]) + sum(c[1]), len(c[0])))
    for old, new, consumed, micro, rank, dp, want in cases:
        call = (f"restart_with_new_blend(old_weights={old}, new_weights={new}, consumed_samples={consumed}, "
                f"micro_batch_size={micro}, rank={rank}, data_parallel_size={dp})")
        got = restart_with_new_blend(list(old), list(new), consumed, micro, rank, dp)
        expect(isinstance(got, dict) and {"refused", "first_microbatch", "already_trained"} <= set(got),
               f"{call} returned {short(got)}; expected {{'refused': bool, 'first_microbatch': [[domain, sample], "
               "...], 'already_trained': int}")
        expect(isinstance(got["refused"], (bool, np.bool_)), f"{call}: refused = {short(got['refused'])}; expected "
                                                              "True or False")
        case = {"call": call, "old": old, "new": new, "consumed": consumed, "micro": micro, "rank": rank, "dp": dp}
        first = _pairs(got["first_microbatch"])
        expect(first is not None, f"{call}: first_microbatch = {short(got['first_microbatch'])}; expected a list "
                                  "of [domain, sample] pairs")
        if bool(got["refused"]) != want["refused"] or first != want["first_microbatch"]:
            _q5_mistake({**got, "refused": bool(got["refused"])}, want, case)
            expect(bool(got["refused"]) == want["refused"], f"{call}: refused = {short(got['refused'])}, "
                                                           f"expected {want['refused']}")
            expect(False, f"{call}: first_microbatch = {short(first)}, expected {want['first_microbatch']}")
        expect(got["already_trained"] == want["already_trained"],
               f"{call}: already_trained = {short(got['already_trained'])}, expected {want['already_trained']} "
               f"(of the first micro-batch {want['first_microbatch']})")
    return (f"{len(cases)} random restarts: 12 refused (6 of them re-reading trained samples), 8 accepted "
            "(4 with the same shares under other weights)")
