"""Checks for chapter 3 (data blending): one step of Megatron's greedy blending rule, epochs per
dataset, weights under an epoch cap, book exercise 2 (the coding assistant's blend), and resuming
a blend from its per-dataset counts (a transfer exercise).

Every check draws fresh random inputs and compares the learner's function with the
``labsupport.datasets.blending`` reference: :func:`~labsupport.datasets.blending.greedy_step`,
:func:`~labsupport.datasets.blending.expected_epochs` and :func:`~labsupport.datasets.blending.cap_weights`.
The mistakes a check recognises by name are the rows of :data:`RULES`, one table per question (see
:mod:`labsupport.check.rules`), each shown on the smallest input where the learner's function makes it; what
the learner reads (feedback, messages, the options of exercise 2) is in ``labsupport/check/texts/ch03.toml``.
"""
from __future__ import annotations

import copy
import functools
import itertools
import math
import numbers
import random
from typing import Any, Callable, Iterator, Sequence

from labsupport.datasets.blending import (cap_weights as _cap_weights, expected_epochs as _expected_epochs,
                                          greedy_step as _greedy_step, reference_blending_indices)
from labsupport.check._core import chapter_summary, check, check_seed, expect, parts, Sealed, short
from labsupport.check.texts import load_texts
from labsupport.check.texts import language as language  # check.language("ko"): feedback in Korean
from labsupport.check.rules import choices, explain, first_showing, in_words, Rule, Rules, smallest

CHAPTER = "ch03"
TEXTS = load_texts(CHAPTER)
T1, T2, T3, T4, T5 = (TEXTS[f"q{n}"] for n in range(1, 6))   # each question's texts: T1.say("modified", …)
#: Shown once q4 passes, to compare the free-text reasons with.
MODEL_ANSWER_Q4 = T4.messages["model_answer"]

#: Book exercise 2's options, key → text (texts/ch03.toml [q4.options]): (a) what changing the blend ratios does,
#: (b) the risks of over-sampling a small high-quality code set at weight 0.5, (c) how to set and validate the ratios.
EXERCISE_2_EFFECTS, EXERCISE_2_RISKS, EXERCISE_2_STEPS = (dict(T4.options[p]) for p in ("effects", "risks", "steps"))
#: q4's answer keys (a), (b), (c), sealed (see _core.Sealed).
_EFFECTS, _RISKS, _STEPS = (Sealed.load(f"labsupport:ch03:q4:{part}") for part in "abc")


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


# --- q1: one step of the greedy rule ------------------------------------------------------------
def _errors(w: Sequence[float], counts: Sequence[int], step: int) -> list[float]:
    x = float(max(step, 1))
    return [wd * x - c for wd, c in zip(w, counts)]


_Q1 = Rules(
    Rule("tie_to_last", wrong=lambda w, c, s: max(range(len(w)), key=lambda d: (_errors(w, c, s)[d], d))),
    Rule("float_order"),
    Rule("step_zero", wrong=lambda w, c, s: _greedy_step(w, c, s) if s else c.index(min(c)),  # x = 0: errors −c
         confirm=2),
    Rule("furthest_ahead", wrong=lambda w, c, s: min(range(len(w)), key=lambda d: (_errors(w, c, s)[d], d)), confirm=2),
    texts=T1)


def _q1_small_states() -> Iterator[tuple[list[float], list[int], int]]:
    """Small blend states, smallest first: two or three datasets, steps 0…4, counts 0…2."""
    for w in ([0.5, 0.5], [0.25, 0.75], [0.75, 0.25], [0.25, 0.25, 0.5], [0.5, 0.25, 0.25]):
        for step in range(5):
            for counts in sorted(itertools.product(range(3), repeat=len(w)), key=sum):
                yield list(w), list(counts), step


def _q1_name(w: list[float], counts: list[int], step: int, got: int) -> str:
    """Which recognised mistake a wrong pick ``got`` on this state is, or ''."""
    errs, want = _errors(w, counts, step), _greedy_step(w, counts, step)
    if not 0 <= got < len(w):
        return ""
    if errs[got] == errs[want] and got > want:
        return "tie_to_last"
    if math.isclose(errs[got], errs[want], rel_tol=1e-12, abs_tol=1e-9):
        return "float_order"                  # equal up to rounding: right on paper, computed another way
    if step == 0 and got == _Q1["step_zero"].wrong(w, counts, step):
        return "step_zero"
    if got == _Q1["furthest_ahead"].wrong(w, counts, step):
        return "furthest_ahead"
    return ""


def _q1_facts(state: tuple, got: int) -> dict[str, Any]:
    w, counts, step = state
    errs, want, x = _errors(w, counts, step), _greedy_step(w, counts, step), max(step, 1)
    mine = errs[int(got)] if 0 <= got < len(errs) else math.nan
    return {"call": f"greedy_step({short(w, 400)}, {short(counts, 200)}, {step}) returned {short(got)}",
            "errors": T1.say("errors", x=x, errs=short(errs, 400)), "x": x, "want": want,
            "got": short(got), "errs": short(errs, 400), "top": short(max(errs)), "got_error": short(mine),
            "tied": in_words([d for d, e in enumerate(errs) if e == max(errs)]), "gap": f"{abs(errs[want] - mine):.3g}",
            "alt": short([wd - c / float(x) for wd, c in zip(w, counts)], 400),
            "e_want": f"{errs[want]:.6g}", "e_got": f"{mine:.6g}"}   # short: equal to 6 digits, apart by rounding


def _q1_mistake(greedy_step: Callable, w: list[float], counts: list[int], step: int, got: int) -> None:
    """Name the mistake a wrong pick shows, on the smallest state where the learner's function shows it."""
    name = _q1_name(w, counts, step, got)
    if not name:
        return
    rule = _Q1[name]
    if rule.wrong is None:                    # float_order: the earliest order-sensitive state it gets wrong
        found = first_showing(lambda s: int(greedy_step(*copy.deepcopy(s))), _order_sensitive_states(),
                              lambda s, pick: pick != _greedy_step(*s), True)
    else:
        found = smallest(greedy_step, _q1_small_states(), _greedy_step, rule.wrong, lambda a, b: int(a) == int(b),
                         tries=8, confirm=rule.confirm)
        if found is None and rule.confirm:
            return                            # the failing case only looked like that rule
    state, got = found or ((w, counts, step), got)
    rule.fail(**_q1_facts(state, int(got)))


def _q1_states(rng: random.Random) -> Iterator[tuple[list[float], list[int], int]]:
    """q1's 300 random blend states: 60 with exact ties built on purpose, 5 first samples (step 0), then
    states the blend really reaches and any states, by turns."""
    for k in range(300):
        n = rng.choice([2, 2, 3, 3, 4, 5, 8])
        if k < 60:                                              # exact ties, built on purpose
            raw = [rng.randint(1, 4) for _ in range(n)]
            raw[-1] += 16 - sum(raw) % 16 if sum(raw) % 16 else 0
            w = [r / sum(raw) for r in raw]                    # dyadic weights: w * step is exact
            step = sum(raw) * rng.randint(1, 50)
            tied = rng.sample(range(n), rng.randint(2, n))         # at least two share the largest error
            counts = [round(wd * step) + (0 if d in tied else rng.randint(1, 3)) for d, wd in enumerate(w)]
        elif k < 65:                                             # the first sample: step 0, nothing taken yet
            w = sorted(_weights(rng, n))                        # the largest weight last: x = 0 would pick 0
            step, counts = 0, [0] * n
            if w[0] == w[-1]:
                w = [(d + 1.0) / (n * (n + 1) / 2) for d in range(n)]
        elif k % 2 == 0:                                        # a state the blend really reaches
            w = _weights(rng, n)
            step = rng.randint(0, 60)
            di, _ = reference_blending_indices(w, step)
            counts = [int((di == d).sum()) for d in range(n)]
        else:                                               # any state
            w = _weights(rng, n)
            step = rng.randint(0, 10_000)
            counts = [rng.randint(0, max(1, step)) for _ in range(n)]
        yield w, counts, step


@check(CHAPTER, "q1", hint=T1.hint)
def q1(greedy_step) -> str:
    states, order_cases = list(_q1_states(random.Random(check_seed()))), _order_sensitive_states()
    for w, counts, step in states + order_cases:
        want = _greedy_step(w, counts, step)
        args = (list(w), list(counts), step)
        got = greedy_step(*args)
        call = f"greedy_step({short(w, 400)}, {short(counts, 200)}, {step})"
        expect(list(args[1]) == counts and list(args[0]) == w, T1.say("modified", call=call))
        expect(isinstance(got, numbers.Integral) and not isinstance(got, bool),
               T1.say("not_an_index", call=call, got=short(got)))
        if int(got) != want:
            _q1_mistake(greedy_step, w, counts, step, int(got))
            expect(False, T1.say("wrong", **_q1_facts((w, counts, step), got)))
    return T1.say("passed", states=len(states), order=len(order_cases))


def _order_sensitive_states(limit: int = 12) -> list[tuple[list[float], list[int], int]]:
    """Real blend states where ``w*x - c`` (Megatron's order) and the rearranged ``w - c/x`` pick
    different datasets: the reference's own walk through two blends (earliest step first)."""
    found = []
    for w in ([0.1, 0.2, 0.7], [0.7, 0.2, 0.1]):
        counts = [0] * len(w)
        for step in range(3000):
            d = _greedy_step(w, counts, step)
            alt = [wd - c / float(max(step, 1)) for wd, c in zip(w, counts)]     # the same error divided by x
            if alt.index(max(alt)) != d and len(found) < limit:
                found.append((list(w), list(counts), step))
            counts[d] += 1
    return sorted(found, key=lambda state: state[2])


# --- q2: epochs per dataset ---------------------------------------------------------------------
def _close(a: Any, b: Sequence[float], rel: float = 1e-9, abs_tol: float = 1e-12) -> bool:
    """Is ``a`` a list of numbers equal to ``b`` element by element, up to ``rel`` (or ``abs_tol``)?"""
    try:
        return len(a) == len(b) and all(math.isclose(float(x), float(y), rel_tol=rel, abs_tol=abs_tol)
                                        for x, y in zip(a, b))
    except (TypeError, ValueError):
        return False


_Q2_SMALL = [([1, 1], [2, 2], 8), ([1, 1], [1, 1], 1), ([1, 3], [1, 3], 8), ([1, 1], [2, 4], 8)]
_Q2 = Rules(
    Rule("not_normalised", wrong=lambda w, n, t: [wd * t / s for wd, s in zip(w, n)]),
    Rule("upside_down", wrong=lambda w, n, t: [s / (wd / sum(w) * t) for wd, s in zip(w, n)]),
    Rule("tokens_not_epochs", wrong=lambda w, n, t: [wd / sum(w) * t for wd in w]), texts=T2)


def _q2_facts(case: tuple, got: Any) -> dict[str, Any]:
    weights, sizes, total = case
    return {"call": f"epochs({short(weights, 200)}, {short(sizes, 200)}, {short(total)}) returned {short(got, 200)}",
            "read": short(sum(float(g) * s for g, s in zip(got, sizes))), "total": short(total),
            "weights": short(weights), "sizes": short(sizes), "want": short(_expected_epochs(*case), 200),
            "taken": short([wd / sum(weights) * total for wd in weights])}


@check(CHAPTER, "q2", hint=T2.hint)
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
        call = f"epochs({short(weights, 200)}, {short(sizes, 200)}, {total})"
        expect(hasattr(got, "__len__") and len(got) == n, T2.say("wrong_length", call=call, got=short(got), n=n))
        for d, g in enumerate(got):
            expect(isinstance(g, (int, float)) or hasattr(g, "__float__"), T2.say("not_a_number", call=call, d=d,
                                                                                 got=short(g)))
        got = [float(v) for v in got]
        for d, (g, wv) in enumerate(zip(got, want)):
            if not math.isclose(g, wv, rel_tol=1e-9):
                explain(epochs, _Q2.values(), (weights, sizes, total), got, _expected_epochs, _close,
                      lambda rule: _Q2_SMALL, _q2_facts)
                expect(False, T2.say("wrong_value", call=call, d=d, got=short(g), want=short(wv)))
        cases += 1
    return T2.say("passed", cases=cases)


# --- q3: weights under an epoch cap -------------------------------------------------------------
#: Is ``got`` a list of numbers equal to ``values`` up to 1e-9 (absolute)?
_close_list = functools.partial(_close, rel=0.0, abs_tol=1e-9)


def _caps(weights: list[float], sizes: list[float], total: float, max_epochs: float) -> list[float]:
    return [max_epochs * s / total for s in sizes]


def _cap_once_no_share(weights, sizes, total, max_epochs):
    """Mistake: every dataset over its cap set to the cap, and the weight it gave up given to nobody."""
    w = [x / sum(weights) for x in weights]
    return [min(x, c) for x, c in zip(w, _caps(weights, sizes, total, max_epochs))]


def _cap_one_round(weights, sizes, total, max_epochs):
    """Mistake: cap once, share the rest once, never look again."""
    w = [x / sum(weights) for x in weights]
    cap = _caps(weights, sizes, total, max_epochs)
    over = [x > c for x, c in zip(w, cap)]
    room = 1 - sum(c for c, o in zip(cap, over) if o)
    free = sum(x for x, o in zip(w, over) if not o)
    return [c if o else (x * room / free if free else 0.0) for x, c, o in zip(w, cap, over)]


def _uncapped_ratio(got: Any, args: tuple) -> tuple[int, int] | None:
    """Two datasets below their caps whose weights no longer stand in their original ratio, though the weights
    sum to 1; or None."""
    weights, caps = args[0], _caps(*args)
    try:
        if abs(sum(float(g) for g in got) - 1) > 1e-9:
            return None
        free = [d for d, (g, c) in enumerate(zip(got, caps)) if weights[d] > 0 and float(g) < c * (1 - 1e-9)]
        return next(((a, b) for a, b in itertools.combinations(free, 2)
                     if not math.isclose(float(got[a]) * weights[b], float(got[b]) * weights[a], rel_tol=1e-9)), None)
    except (TypeError, ValueError, IndexError):
        return None


_Q3_CASCADE = ([0.5, 0.3, 0.2], [20, 35, 100], 100, 1)
_Q3_SMALL = {"weight_lost": [([0.5, 0.5], [1, 10], 4, 1), _Q3_CASCADE], "one_round": [_Q3_CASCADE]}
_Q3_RATIO_CASE = ([0.6, 0.3, 0.1], [1, 100, 100], 4, 1)     # caps [0.25, 25, 25]: 1 and 2 share 0.75 as 3 : 1
_Q3_NO_BLEND = ([1, 1], [1, 1], 4, 1)                       # two 1-token datasets, a 4-token run
_Q3 = Rules(Rule("weight_lost", wrong=_cap_once_no_share), Rule("one_round", wrong=_cap_one_round),
            Rule("ratio_not_kept"), Rule("no_value_error"), texts=T3)


def _q3_facts(args: tuple, got: Any) -> dict[str, Any]:
    weights, sizes, total, max_epochs = args
    got, caps = [float(g) for g in got], _caps(*args)
    d = next((d for d, (g, c) in enumerate(zip(got, caps)) if g > c * (1 + 1e-9)), 0)
    a, b = _uncapped_ratio(got, args) or (0, 0)
    return {"call": f"cap_weights({short(weights)}, {short(sizes)}, {short(total)}, {short(max_epochs)}) returned "
                    f"{short(got, 200)}", "sum": short(round(sum(got), 12)), "caps": short(caps),
            "want": short(_cap_weights(*args), 200), "d": d, "got_d": short(got[d]), "cap_d": short(caps[d]),
            "read": short(round(got[d] * total / sizes[d], 6)), "max_epochs": short(max_epochs), "a": a, "b": b,
            "wa": short(weights[a]), "wb": short(weights[b]), "ga": short(got[a]), "gb": short(got[b])}


def _q3_mistake(cap_weights: Callable, got: Any, args: tuple) -> None:
    """Name a wrong blend that a rule's wrong implementation gives, on the smallest case that shows it."""
    explain(cap_weights, [_Q3["weight_lost"], _Q3["one_round"]], args, got, _cap_weights, _close_list,
            lambda rule: _Q3_SMALL[rule.name], _q3_facts)


@check(CHAPTER, "q3", hint=T3.hint)
def q3(cap_weights) -> str:
    # the worked example of the exercise: capping dataset 0 pushes dataset 1 over its cap
    want = _cap_weights(*_Q3_CASCADE)
    got = cap_weights(*copy.deepcopy(_Q3_CASCADE))
    if not _close_list(got, want):
        call = f"cap_weights{_Q3_CASCADE}"
        expect(hasattr(got, "__len__") and len(got) == 3, T3.say("wrong_length", call=call, got=short(got), n=3))
        _q3_mistake(cap_weights, got, _Q3_CASCADE)
        expect(False, T3.say("example_wrong", call=call, got=short([float(g) for g in got], 200),
                             want=short(want, 200)))
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
        args = (weights, sizes, total, max_epochs)
        call = f"cap_weights({short(weights, 200)}, {short(sizes, 200)}, {total}, {short(max_epochs)})"
        if want is None:
            try:
                got = cap_weights(*copy.deepcopy(args))
            except ValueError:
                bad += 1
                continue
            found = first_showing(lambda c: cap_weights(*copy.deepcopy(c)), [_Q3_NO_BLEND], lambda c, g: True, True)
            args, got = found or (args, got)       # the smallest case, unless the learner's code raises there
            _Q3.fail("no_value_error", args=f"cap_weights({short(args[0], 200)}, {short(args[1], 200)}, {args[2]}, "
                     f"{short(args[3])})", got=short(got, 200), caps=short(round(sum(_caps(*args)), 6)))
        got = cap_weights(*copy.deepcopy(args))
        expect(hasattr(got, "__len__") and len(got) == n, T3.say("wrong_length", call=call, got=short(got), n=n))
        got = [float(g) for g in got]
        if not _close_list(got, want):
            _q3_mistake(cap_weights, got, args)
        expect(abs(sum(got) - 1.0) < 1e-9, T3.say("sum", call=call, sum=short(sum(got))))
        ep = _expected_epochs(got, sizes, total)
        worst = max(range(n), key=lambda d: ep[d])
        expect(ep[worst] <= max_epochs * (1 + 1e-9), T3.say("over_cap", call=call, d=worst, epochs=short(ep[worst]),
                                                             max_epochs=short(max_epochs)))
        if not _close_list(got, want) and _uncapped_ratio(got, args):   # fits the caps, sums to 1, ratios lost
            found = first_showing(lambda c: cap_weights(*copy.deepcopy(c)), [_Q3_RATIO_CASE],
                                  lambda c, g: _uncapped_ratio(g, c) is not None, True)
            _Q3.fail("ratio_not_kept", **_q3_facts(*(found or (args, got))))
        for d in range(n):
            expect(abs(got[d] - want[d]) <= 1e-9, T3.say("wrong_value", call=call, d=d, got=short(got[d]),
                                                         want=short(want[d])))
        good += 1
    return T3.say("passed", good=good, bad=bad)


# --- q4: book exercise 2 ------------------------------------------------------------------------
_Q4_BOOK = (10**11, 2 * 10**9, 0.5)     # the book's example: 2 B code tokens at 0.5 of a 100 B-token run
_Q4 = Rules(Rule("epochs_upside_down", wrong=lambda t, c, w: c / (w * t)),
            Rule("epochs_without_weight", wrong=lambda t, c, w: t / c), texts=T4)


def _same_number(a: Any, b: float) -> bool:
    return isinstance(a, (int, float)) and not isinstance(a, bool) and math.isclose(a, b, rel_tol=1e-9)


def _q4_facts(case: tuple, got: Any) -> dict[str, Any]:
    total, code, weight = case
    return {"call": f"exercise_2({short(total)}, {short(code)}, {short(weight)}): b_code_epochs = {short(got)}",
            "weight": short(weight), "total": short(total), "taken": short(weight * total), "code": short(code)}


@check(CHAPTER, "q4", hint=T4.hint)
def q4(exercise_2) -> tuple[str, dict[str, str]]:
    rng = random.Random(check_seed())
    manual: dict[str, str] = {}
    for k in range(3):
        total = rng.choice([10**11, 2 * 10**11, 5 * 10**11, 10**12])
        code = rng.choice([2 * 10**9, 5 * 10**9, 10**10, 2.5 * 10**10])
        weight = rng.choice([0.5, 0.5, 0.4, 0.6])
        answer = exercise_2(total, code, weight)
        expect(isinstance(answer, dict), T4.say("not_a_dict", type=type(answer).__name__))
        for key in ("a", "b_code_epochs", "b", "c", "a_why", "b_why", "c_why"):
            expect(key in answer, T4.say("missing_key", key=key))
        want, got = weight * total / code, answer["b_code_epochs"]
        problems: list[str] = []                # every failing part, named at once
        for key, options, right in (("a", EXERCISE_2_EFFECTS, _EFFECTS), ("b", EXERCISE_2_RISKS, _RISKS),
                                    ("c", EXERCISE_2_STEPS, _STEPS)):
            chosen = answer[key]
            expect(isinstance(chosen, (list, tuple, set)) and all(isinstance(v, str) for v in chosen),
                   T4.say("not_options", key=key, chosen=short(chosen)))
            unknown = sorted(set(chosen) - set(options))
            expect(not unknown, T4.say("unknown_options", key=key, unknown=unknown, options=sorted(options)))
            wrong, missing = choices(chosen, right)     # the extras by name, the missing ones counted (issue #29)
            if wrong or missing:
                problems.append(T4.say("options", key=key, wrong=T4.say("wrong_options", wrong=wrong) if wrong else "",
                                       missing=T4.say("missing_options", missing=missing, s="" if missing == 1 else "s",
                                                      sep="; and " if wrong else "") if missing else ""))
        for key in ("a_why", "b_why", "c_why"):
            manual[key] = text = answer[key]
            if not (isinstance(text, str) and len(text.split()) >= 10):
                problems.append(T4.say("too_short", key=key))
        ok = _same_number(got, want)
        if not ok:                              # a named wrong epoch count, shown on the book's example
            also = f" | also: {' | '.join(problems)}" if problems else ""
            explain(lambda *a: exercise_2(*a)["b_code_epochs"], _Q4.values(), (total, code, weight), got,
                  lambda t, c, w: w * t / c, _same_number, lambda rule: [_Q4_BOOK],
                  lambda case, g: {**_q4_facts(case, g), "also": also})
        with parts() as part:
            part(ok, T4.say("wrong_epochs", call=_q4_facts((total, code, weight), got)["call"], want=short(want)))
            for text in problems:
                part(False, text)
    return T4.say("passed", model_answer=MODEL_ANSWER_Q4), manual


# --- q5: resuming a blend -----------------------------------------------------------------------
def _resume_right(weights: list[float], counts: list[int], n: int) -> list[int]:
    """The uninterrupted blend's next ``n`` picks: the reference resumed at step ``sum(counts)`` from ``counts``."""
    return reference_blending_indices(weights, n, start=sum(counts), counts=counts)[0].tolist()


def _q5_small() -> Iterator[tuple[list[float], list[int], int]]:
    """Small real crash states, smallest first: a blend stopped after 1…12 samples, 1…4 more wanted."""
    for crash in range(1, 13):
        for w in ([0.5, 0.5], [0.25, 0.75], [0.75, 0.25], [0.25, 0.25, 0.5]):
            di, _ = reference_blending_indices(w, crash)
            counts = [int((di == d).sum()) for d in range(len(w))]
            for n in range(1, 5):
                yield list(w), counts, n


def _same_picks(a: Any, b: list[int]) -> bool:
    try:
        return [int(v) for v in a] == b
    except (TypeError, ValueError):
        return False


_Q5 = Rules(Rule("restart_at_zero", wrong=lambda w, c, n: reference_blending_indices(w, n, counts=c)[0].tolist()),
            Rule("counts_frozen", wrong=lambda w, c, n: [_greedy_step(w, c, s) for s in range(sum(c), sum(c) + n)]),
            texts=T5)


def _q5_facts(case: tuple, got: Any) -> dict[str, Any]:
    w, counts, n = case
    return {"call": T5.say("goes_on", call=f"resume_blend({short(w, 200)}, {short(counts, 200)}, {n})",
                           got=short([int(g) for g in got], 200), want=short(_resume_right(w, counts, n), 200)),
            "taken": sum(counts), "counts": short(counts), "n": n}


#: Every named mistake of this chapter's checks, by question (see labsupport.check.rules).
RULES: dict[str, Rules] = {"q1": _Q1, "q2": _Q2, "q3": _Q3, "q4": _Q4, "q5": _Q5}


@check(CHAPTER, "q5", hint=T5.hint)
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
        call = f"resume_blend({short(w, 200)}, {short(counts, 200)}, {more})"
        got = resume_blend(list(w), list(counts), more)
        expect(hasattr(got, "__len__") and len(got) == more, T5.say("wrong_length", call=call, got=short(got), n=more))
        got = [int(g) for g in got]
        if got != want:
            explain(resume_blend, _Q5.values(), (w, counts, more), got, _resume_right, _same_picks,
                  lambda rule: _q5_small(), _q5_facts)
            first = next(i for i, (a, b) in enumerate(zip(got, want)) if a != b)
            expect(False, T5.say("wrong_choice", call=call, i=first, sample=crash + first, got=got[first],
                                 want=want[first]))
        cases += 1
    return T5.say("passed", cases=cases)
