"""Checks for chapter 3 (data blending): one step of Megatron's greedy blending rule, epochs per
dataset, weights under an epoch cap, book exercise 2 (the coding assistant's blend), and resuming
a blend from its per-dataset counts (a transfer exercise).

Every check draws fresh random inputs and compares the learner's function with the
``labsupport.datasets.blending`` reference: :func:`~labsupport.datasets.blending.greedy_step`,
:func:`~labsupport.datasets.blending.expected_epochs` and :func:`~labsupport.datasets.blending.cap_weights`.
"""
from __future__ import annotations

import math
import random
from typing import Any

from labsupport.datasets.blending import cap_weights as _cap_weights
from labsupport.datasets.blending import expected_epochs as _expected_epochs
from labsupport.datasets.blending import greedy_step as _greedy_step
from labsupport.datasets.blending import reference_blending_indices
from labsupport.check._core import chapter_summary, check, check_seed, expect, parts, Sealed, short

CHAPTER = "ch03"

#: Book exercise 2 (a): what changing the blend ratios does.
EXERCISE_2_EFFECTS = {
    "more_code_skill": "a larger code share gives the model more code to learn from: code ability improves",
    "less_other": "at a fixed token budget the extra code tokens replace web/books tokens: general language "
                  "and world knowledge can get worse",
    "batch_mix": "the ratio is the mix of every batch the model sees, so it steers what the model becomes good at",
    "no_effect": "the ratio does not matter as long as the total number of tokens stays the same",
    "faster_steps": "a larger code share makes each training step faster",
}
#: Book exercise 2 (b): the risks of over-sampling a small high-quality code set at weight 0.5.
EXERCISE_2_RISKS = {
    "memorise": "each code sample is seen many times (many epochs): the model memorises it and can repeat it "
                "verbatim (licences, secrets, personal data)",
    "overfit": "held-out code loss stops improving or rises while training loss keeps falling; ability outside "
               "the small set suffers",
    "little_new": "the later passes add little new information: the tokens are spent but the model sees no "
                  "new code",
    "gpu_oom": "the GPU runs out of memory",
    "tokenizer_breaks": "the tokenizer starts producing broken tokens",
}
#: Book exercise 2 (c): how to set and validate the ratios.
EXERCISE_2_STEPS = {
    "dedup_filter": "deduplicate and quality-filter each dataset first (NeMo Curator), then measure how many "
                    "tokens are really left",
    "epoch_budget": "compute epochs per dataset (weight × total tokens / dataset tokens) and keep small sets under "
                    "a cap of a few epochs",
    "per_domain_eval": "hold out a validation set per domain and watch each domain's loss plus a code benchmark "
                       "during training",
    "ablations": "run short ablations with a few candidate ratios and compare their evaluations before the big run",
    "realised_blend": "check the realised blend from the built indices (samples drawn per dataset, epochs), e.g. "
                      "with blend_report",
    "equal_weights": "always give every dataset the same weight",
    "max_quality": "put as much weight as possible on the highest-quality set",
}
#: q4's answer keys, sealed (see _core.Sealed): (a) ...
_EFFECTS = Sealed("labsupport:ch03:q4:a", [
    "5650d39ca730b49e123b94a6ba9b0c86f328e77cd0c95f873d216e344291c3be",
    "78721d3a27439b47011e040c0062e950224436d1afab149b5049c7d9c9dcfd8c",
    "ab4bcc558e588a3ce791f8080af87dbb2e809dd7ebd5beb82c34caf22e28a8c1",
])
#: (b) ...
_RISKS = Sealed("labsupport:ch03:q4:b", [
    "19facad9360507c5a3c9c567d4cf178ee4c166206f1058d919921dbe15687a41",
    "cbb7fbb3efda04372b19ab3fb0d357d4ff55defbd52779c7b3434757efade5fa",
    "d424c3204721d98c202acf94ece8f1c8d863d468ae0dacc70bfcf4148345258d",
])
#: (c).
_STEPS = Sealed("labsupport:ch03:q4:c", [
    "097a7df62ed27d8a768dc0e046f5af1f80e335a8082c565d43bfc41c0c3ee22d",
    "165b1cc8519530c799398f4731b2a593e4c8af51a5fc9d24359c63dc106a54f7",
    "526f6bdb7d0c897bbd914fd8ce2b10f0e2c506dfed7249c608da95c88a2267e4",
    "bdf3f0879bf9bc4c82071de886f005ebf7833f6a4462aba5cb2d2fa354540a35",
    "d4d771763b239684924799c2336defa633583705b32e36fab9b85071546fe550",
])


summary = chapter_summary(CHAPTER)


def _weights(rng: random.Random, n: int) -> list[float]:
    kind = rng.random()
    if kind < 0.2:
        return [1.0 / n] * n                                   # equal weights: ties everywhere
    if kind < 0.35:
        return [1.0 / 3.0] * n                                 # thirds (unnormalised for n != 3)
    if kind < 0.55:
        raw = [rng.randint(1, 4) for _ in range(n)]            # small integers: exact ties
        return [r / sum(raw) for r in raw]
    raw = [rng.random() + 1e-3 for _ in range(n)]
    return [r / sum(raw) for r in raw]


# ---------------------------------------------------------------------------------------------
@check(CHAPTER, "q1", hint=(  # tiered: a nudge, the idea, then the formula
    "the blend gives the next sample to the dataset furthest behind its share so far; reread chapter 3's 'The "
    "greedy rule, by hand' for how Megatron's helpers.cpp measures 'behind' and how it breaks ties",
    "'behind' is an error: the samples dataset d should have had by now (its weight times the step, never less "
    "than 1) minus those it had. The largest error wins; an exact tie goes to the lowest index; and the order of "
    "the float operations matters, because real blend states contain errors equal up to rounding.",
    "x = max(step, 1); error_d = weights[d] * x - counts[d]; return the d with the largest error, and on an exact "
    "tie the lowest index (scan from d = 0, replace only when strictly greater). Compute the error exactly that "
    "way: w*x first, then subtract the count."))
def q1(greedy_step) -> str:
    rng = random.Random(check_seed())
    cases = 0
    for k in range(300):
        n = rng.choice([2, 2, 3, 3, 4, 5, 8])
        if k < 60:                                              # exact ties, built on purpose
            raw = [rng.randint(1, 4) for _ in range(n)]
            raw[-1] += 16 - sum(raw) % 16 if sum(raw) % 16 else 0
            w = [r / sum(raw) for r in raw]                    # dyadic weights: w * step is exact
            step = sum(raw) * rng.randint(1, 50)
            tied = rng.sample(range(n), rng.randint(2, n))         # at least two share the largest error
            counts = [round(wd * step) + (0 if d in tied else rng.randint(1, 3)) for d, wd in enumerate(w)]
        elif k % 2 == 0:                                        # a state the blend really reaches
            w = _weights(rng, n)
            step = rng.randint(0, 60)
            di, _ = reference_blending_indices(w, step)
            counts = [int((di == d).sum()) for d in range(n)]
        else:                                                   # any state
            w = _weights(rng, n)
            step = rng.randint(0, 10_000)
            counts = [rng.randint(0, max(1, step)) for _ in range(n)]
        want = _greedy_step(w, counts, step)
        x = float(max(step, 1))
        errs = [wd * x - c for wd, c in zip(w, counts)]
        args = (list(w), list(counts), step)
        got = greedy_step(*args)
        call = f"greedy_step({short(w, 60)}, {counts}, {step})"
        expect(list(args[1]) == counts and list(args[0]) == w, f"{call} modified its inputs")
        expect(hasattr(got, "__index__") and not isinstance(got, bool),
               f"{call} returned {short(got)}; expected a dataset index (int)")
        expect(int(got) == want, f"{call} returned {got}, expected {want} (errors {short([round(e, 4) for e in errs], 80)})")
        cases += 1
    order_cases = _order_sensitive_states()
    for w, counts, step in order_cases:
        want = _greedy_step(w, counts, step)
        got = greedy_step(list(w), list(counts), step)
        expect(hasattr(got, "__index__") and int(got) == want,
               f"greedy_step({w}, {counts}, {step}) returned {short(got)}, expected {want}: a state the blend really "
               "reaches where two errors are equal up to rounding. Megatron computes weights[d] * x first and "
               "then subtracts counts[d]; w − c/x or w·(x − c/w) round differently and pick another dataset")
    return f"{cases} random states, 60 of them with exact ties, and {len(order_cases)} states where the order of the float operations decides"


def _order_sensitive_states(limit: int = 12) -> list[tuple[list[float], list[int], int]]:
    """Real blend states where ``w*x - c`` (Megatron's order) and the rearranged ``w - c/x`` pick
    different datasets: the reference's own walk through two blends."""
    alternative = lambda w, c, x: w - c / x                      # noqa: E731 - the same error divided by x
    found = []
    for w in ([0.1, 0.2, 0.7], [0.7, 0.2, 0.1]):
        counts = [0] * len(w)
        for step in range(3000):
            d = _greedy_step(w, counts, step)
            x = float(max(step, 1))
            alt = [alternative(wd, c, x) for wd, c in zip(w, counts)]
            if alt.index(max(alt)) != d and len(found) < limit:
                found.append((list(w), list(counts), step))
            counts[d] += 1
    return found


# ---------------------------------------------------------------------------------------------
def _q2_mistake(got: list[float], weights: list[float], sizes: list[int], total: int) -> str:
    """A known wrong epoch list, named: weights not normalised, or dataset_tokens / supplied tokens."""
    norm = sum(weights)
    candidates = (
        ([w * total / n for w, n in zip(weights, sizes)],
         f" — the weights were not normalised: they sum to {norm:.4g}, divide each by the sum first"),
        ([n / (w / norm * total) for w, n in zip(weights, sizes)], " — that is upside down: tokens supplied / tokens "
         "in the dataset"),
    )
    for values, text in candidates:
        if all(math.isclose(g, v, rel_tol=1e-9) for g, v in zip(got, values)):
            return text
    return ""


@check(CHAPTER, "q2", hint=(
    "reread chapter 3's 'Primer: GPT samples and epochs' and the exercise's example: a 2 B-token code set at "
    "weight 0.5 of a 100 B-token run is seen 25 times — which three numbers make 25?",
    "a dataset's share of the run is its normalised weight; it supplies that share of all training tokens, and "
    "an epoch is one pass over its own tokens: epochs = tokens it supplies / tokens it has",
    "normalise the weights (w / sum(w)); the blend takes w_d × total_tokens tokens "
    "from dataset d, so it sees it w_d × total_tokens / dataset_tokens[d] times. Return one float per dataset."))
def q2(epochs) -> str:
    rng = random.Random(check_seed())
    cases = 0
    for k in range(60):
        n = rng.randint(2, 6)
        weights = [rng.choice([rng.random() * 10, rng.randint(1, 9), 0.5]) + 1e-3 for _ in range(n)]
        if k < 20:
            weights[1] = sum(weights[:1] + weights[2:])         # "code" at exactly half of the blend
        sizes = [rng.choice([rng.randint(10**6, 10**9), rng.randint(10**9, 10**12)]) for _ in range(n)]
        total = rng.choice([10**9, 10**11, 3 * 10**12, rng.randint(10**8, 10**13)])
        want = _expected_epochs(weights, sizes, total)
        got = epochs(list(weights), list(sizes), total)
        call = f"epochs({short([round(v, 3) for v in weights], 50)}, {short(sizes, 60)}, {total})"
        expect(hasattr(got, "__len__") and len(got) == n, f"{call} returned {short(got)}; expected {n} numbers")
        for d, (g, wv) in enumerate(zip(got, want)):
            expect(isinstance(g, (int, float)) or hasattr(g, "__float__"), f"{call}[{d}] is {short(g)}, not a number")
        for d, (g, wv) in enumerate(zip(got, want)):
            if not math.isclose(float(g), wv, rel_tol=1e-9):
                expect(False, f"{call}[{d}] = {float(g):.6g}, expected {wv:.6g}"
                       + _q2_mistake([float(v) for v in got], weights, sizes, total))
        cases += 1
    return f"{cases} random blends"


# ---------------------------------------------------------------------------------------------
def _close_list(got: Any, values: list[float]) -> bool:
    """Is ``got`` a list of numbers equal to ``values`` up to 1e-9?"""
    try:
        return len(got) == len(values) and all(abs(float(g) - v) <= 1e-9 for g, v in zip(got, values))
    except (TypeError, ValueError):
        return False


@check(CHAPTER, "q3", hint=(
    "redo exercise 3's worked example (weights [0.5, 0.3, 0.2]) by hand and compare each round with your code: "
    "the weight a capped dataset gives up does not disappear, and one round is not always enough",
    "turn exercise 2 around: a weight above max_epochs × dataset_tokens / total_tokens reads the dataset too "
    "often. Capped datasets stay at their caps; the weight left is shared among the others in their original "
    "proportions; repeat while one is over. No blend fits when the caps of the used datasets add up to < 1.",
    "cap_d = max_epochs × dataset_tokens[d] / total_tokens. Normalise the weights; set "
    "every dataset over its cap to exactly its cap (it stays there) and share 1 − (sum of the caps set so far) "
    "among the other datasets in proportion to their ORIGINAL weights; that can push another dataset over "
    "its cap, so repeat until none is over. Raise ValueError when the caps of the datasets with weight > 0 "
    "add up to less than 1."))
def q3(cap_weights) -> str:
    # the worked example of the exercise: capping dataset 0 pushes dataset 1 over its cap
    cascade = ([0.5, 0.3, 0.2], [20, 35, 100], 100, 1)
    want = _cap_weights(*cascade)
    got = cap_weights(*[list(a) if isinstance(a, list) else a for a in cascade])
    expect(hasattr(got, "__len__") and len(got) == 3 and all(abs(float(g) - v) <= 1e-9 for g, v in zip(got, want)),
           f"cap_weights{cascade} returned {short(got)}, expected {[round(v, 4) for v in want]}: after capping "
           "dataset 0 at 0.2, sharing the rest 0.3 : 0.2 gives dataset 1 0.48 > its cap 0.35 — cap it too and "
           "share again" + (" (you capped dataset 0 but gave nobody the weight it gave up)"
                            if _close_list(got, [0.2, 0.3, 0.2]) else ""))
    rng = random.Random(check_seed())
    good = bad = 0
    while good < 50 or bad < 8:
        n = rng.randint(2, 6)
        weights = [rng.random() + 0.01 for _ in range(n)]
        sizes = [rng.randint(10**7, 10**10) for _ in range(n)]
        total = rng.randint(10**9, 10**11)
        max_epochs = rng.choice([1, 2, 4, 4, 8, rng.uniform(0.5, 10)])
        try:
            want = _cap_weights(weights, sizes, total, max_epochs)
        except ValueError:
            want = None
        if (want is None and bad >= 8) or (want is not None and good >= 50):
            continue
        call = f"cap_weights({short([round(v, 3) for v in weights], 50)}, {short(sizes, 50)}, {total}, {max_epochs:g})"
        if want is None:
            try:
                got = cap_weights(list(weights), list(sizes), total, max_epochs)
            except ValueError:
                bad += 1
                continue
            expect(False, f"{call} returned {short(got)}; no blend fits under the cap there, expected ValueError")
        got = cap_weights(list(weights), list(sizes), total, max_epochs)
        expect(hasattr(got, "__len__") and len(got) == n, f"{call} returned {short(got)}; expected {n} weights")
        got = [float(g) for g in got]
        expect(abs(sum(got) - 1.0) < 1e-9, f"{call} returned weights summing to {sum(got):.6f}, expected 1")
        ep = _expected_epochs(got, sizes, total)
        worst = max(range(n), key=lambda d: ep[d])
        expect(ep[worst] <= max_epochs * (1 + 1e-9), f"{call}: dataset {worst} is still seen {ep[worst]:.3f} times")
        for d in range(n):
            expect(abs(got[d] - want[d]) <= 1e-9, f"{call}[{d}] = {got[d]:.6f}, expected {want[d]:.6f} "
                   "(keep the uncapped datasets in their original proportions)")
        good += 1
    return f"{good} random blends and {bad} impossible caps"


# ---------------------------------------------------------------------------------------------
def _q4_mistake(got: Any, total: float, code: float, weight: float) -> str:
    """A known wrong epoch count, named: upside down, or without the code weight."""
    if not isinstance(got, (int, float)) or isinstance(got, bool):
        return ""
    if math.isclose(got, code / (weight * total), rel_tol=1e-9):
        return " (that is code_tokens / (weight × total): upside down)"
    if math.isclose(got, total / code, rel_tol=1e-9):
        return " (that is total / code_tokens: the code set gets only code_weight of the run)"
    return ""


@check(CHAPTER, "q4", hint=(
    "reread chapter 3's 'The coding-assistant scenario' (exercise 2, 과샘플링): (a) what does the ratio change "
    "at a fixed token budget, (b) how often is the small code set read (your exercise 2), (c) what comes before "
    "and after choosing the ratios?",
    "(a) the ratio is the mix of every batch, so more of one domain means less of the others; (b) the epoch count "
    "of the code set and what many passes over the same files do to a model; (c) clean the data, budget the "
    "epochs, measure each domain, try ratios small before the big run, and verify what the sampler realised.",
    "(a) the ratio is the mix the model learns from; at a fixed budget more code means "
    "less of the rest. (b) epochs = code_weight × total_tokens / code_tokens; many epochs means memorising. "
    "(c) clean first, budget epochs, evaluate per domain, ablate, check the realised blend."))
def q4(exercise_2) -> tuple[str, dict[str, str]]:
    rng = random.Random(check_seed())
    manual: dict[str, str] = {}
    for k in range(3):
        total = rng.choice([10**11, 2 * 10**11, 5 * 10**11, 10**12])
        code = rng.choice([2 * 10**9, 5 * 10**9, 10**10, 2.5 * 10**10])
        weight = rng.choice([0.5, 0.5, 0.4, 0.6])
        answer = exercise_2(total, code, weight)
        expect(isinstance(answer, dict), f"exercise_2(...) must return a dict, got {type(answer).__name__}")
        for key in ("a", "b_code_epochs", "b", "c", "a_why", "b_why", "c_why"):
            expect(key in answer, f"missing key {key!r}")
        for key, options in (("a", EXERCISE_2_EFFECTS), ("b", EXERCISE_2_RISKS), ("c", EXERCISE_2_STEPS)):
            value = answer[key]
            expect(isinstance(value, (list, tuple, set)) and all(isinstance(v, str) for v in value),
                   f"{key} must be a list of option keys, got {short(value)}")
            unknown = sorted(set(value) - set(options))
            expect(not unknown, f"{key}: unknown option(s) {unknown}; choose from {sorted(options)}")
        want = weight * total / code
        got = answer["b_code_epochs"]
        with parts() as part:  # name every failing part at once
            part(isinstance(got, (int, float)) and not isinstance(got, bool) and math.isclose(got, want, rel_tol=1e-9),
                 f"exercise_2({total:g}, {code:g}, {weight}): b_code_epochs = {short(got)}, expected {want:g}"
                 + _q4_mistake(got, total, code, weight))
            for key, right in (("a", _EFFECTS), ("b", _RISKS), ("c", _STEPS)):
                chosen = set(answer[key])
                wrong = sorted(c for c in chosen if c not in right)
                if part(not wrong, f"{key}: {wrong} is not right"):
                    part(len(chosen) == len(right), f"{key}: {len(right) - len(chosen)} correct option(s) missing")
            for key in ("a_why", "b_why", "c_why"):
                text = answer[key]
                part(isinstance(text, str) and len(text.split()) >= 10,
                     f"{key}: a few sentences (10+ words) in your own words")
                manual[key] = text
    return ("(a), (b) with the epoch count, (c) correct on 3 random scenarios. Compare your reasons with this "
            "model answer: " + MODEL_ANSWER_Q4, manual)


#: Shown once q4 passes, to compare the free-text reasons with.
MODEL_ANSWER_Q4 = (
    "(a) The ratio is the mix the model learns from: at a fixed token budget more code means more coding skill and "
    "less of everything else, in every batch. (b) At 0.5 the small code set is read code_weight × total / code_tokens "
    "times — many epochs of the same files, which the model memorises instead of generalising from. (c) Deduplicate "
    "and filter first, budget the epochs per domain (cap the weight), evaluate each domain on held-out data, run "
    "small ablations of the ratios, and check the blend the sampler actually realised.")


# ---------------------------------------------------------------------------------------------
def _q5_mistake(got: list[int], weights: list[float], counts: list[int], n: int) -> str:
    """A known wrong continuation, named: the step counter restarted at 0, or the counts never updated."""
    def walk(start: int, update: bool) -> list[int]:
        c, out = list(counts), []
        for step in range(start, start + n):
            d = _greedy_step(weights, c, step)
            out.append(d)
            c[d] += update
        return out

    if sum(counts) and got == walk(0, True):
        return f" (you restarted the step at 0; the next sample number is sum(counts) = {sum(counts)})"
    if n > 1 and got == walk(sum(counts), False):
        return " (the counts never grew: add 1 to the count of each dataset you pick)"
    return ""


@check(CHAPTER, "q5", hint=(
    "reread chapter 3's 'Resuming after a restart': the counts are all the checkpoint kept — what do they tell "
    "you about where the blend stopped?",
    "every blended sample so far came from exactly one dataset, so the counts give the number of the next "
    "sample; from there the greedy rule runs on as if nothing happened, its counts growing with each pick",
    "the blend's whole state is its counts: the next sample number is sum(counts). From "
    "there apply the greedy rule n times, adding 1 to the count of each dataset you pick."))
def q5(resume_blend) -> str:
    rng = random.Random(check_seed())
    cases = 0
    for _ in range(40):
        n = rng.randint(2, 6)
        w = _weights(rng, n)
        crash = rng.randint(0, 3000)
        more = rng.randint(1, 200)
        full, _ = reference_blending_indices(w, crash + more)
        counts = [int((full[:crash] == d).sum()) for d in range(n)]
        want = full[crash:].tolist()
        call = f"resume_blend({short(w, 50)}, {counts}, {more})"
        got = resume_blend(list(w), list(counts), more)
        expect(hasattr(got, "__len__") and len(got) == more, f"{call} returned {short(got)}; expected {more} dataset indices")
        got = [int(g) for g in got]
        if got != want:
            first = next(i for i, (a, b) in enumerate(zip(got, want)) if a != b)
            expect(False, f"{call}: choice {first} (blended sample {crash + first}) is {got[first]}, the uninterrupted "
                   f"blend chose {want[first]} — which sample number does the blend continue from?"
                   + _q5_mistake(got, w, counts, more))
        cases += 1
    return f"{cases} random crashes, each continued exactly"
