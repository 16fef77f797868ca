"""labsupport.check.ch03: each check passes the reference, fails plausible mistakes, and
reports an untouched stub as not attempted."""
from __future__ import annotations

from labsupport.check import ch03 as check
from labsupport.datasets.blending import cap_weights, greedy_step


def stub(*args):
    raise NotImplementedError("exercise")


def _greedy(error):
    def step(weights, counts, s):
        x = max(s, 1)
        best, best_error = 0, error(weights[0], counts[0], x)
        for d in range(1, len(weights)):
            e = error(weights[d], counts[d], x)
            if e > best_error:
                best, best_error = d, e
        return best
    return step


def test_q1_tells_the_order_of_the_float_operations_apart():
    assert check.q1(_greedy(lambda w, c, x: w * x - c)).passed
    assert check.q1(_greedy(lambda w, c, x: -(c - w * x))).passed            # negation is exact: still right
    for wrong in (lambda w, c, x: w - c / x, lambda w, c, x: w * (x - c / w)):
        assert check.q1(_greedy(wrong)).status == "failed"
    # the fixed states exist and each one tells w*x - c from w - c/x (the random ties may catch it earlier)
    states = check._order_sensitive_states()
    assert len(states) >= 5
    for w, counts, step in states:
        assert greedy_step(w, counts, step) != _greedy(lambda a, c, x: a - c / x)(w, counts, step)
    assert check.q1(stub).status == "not attempted"


def test_q3_cap_weights():
    assert check.q3(lambda *a: cap_weights(*a)).passed

    def one_pass(weights, sizes, total, max_epochs):     # caps once and never looks again
        w = [x / sum(weights) for x in weights]
        cap = [max_epochs * s / total for s in sizes]
        over = [x > c for x, c in zip(w, cap)]
        if sum(c for c, x in zip(cap, w) if x > 0) < 1:
            raise ValueError("no blend fits")
        room = 1 - sum(c for c, o in zip(cap, over) if o)
        free = sum(x for x, o in zip(w, over) if not o)
        return [c if o else x * room / free for x, c, o in zip(w, cap, over)]

    assert check.q3(one_pass).status == "failed"
    assert check.q3(stub).status == "not attempted"


def test_q5_resume_blend():
    def resume(weights, counts, n):
        counts, out = list(counts), []
        for step in range(sum(counts), sum(counts) + n):
            d = greedy_step(weights, counts, step)
            out.append(d)
            counts[d] += 1
        return out

    def from_zero(weights, counts, n):                  # forgets where the blend was
        counts, out = list(counts), []
        for step in range(n):
            d = greedy_step(weights, counts, step)
            out.append(d)
            counts[d] += 1
        return out

    assert check.q5(resume).passed
    result = check.q5(from_zero)
    assert result.status == "failed" and result.mistake == "restart_at_zero" and "which sample number" in result.hint
    assert check.q5(stub).status == "not attempted"
