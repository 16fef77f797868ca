"""The numpy engine of :func:`labsupport.datasets.blending.build_blending_indices` — chapter 3
(데이터 블렌딩, book §6.2.5), the part Megatron writes in C++ (``helpers.cpp``): the fallback where
numba (the default engine, :mod:`labsupport.datasets.blending_numba`) cannot be imported, and
``engine="numpy"``.

The rule itself lives in ``blending.py`` (:func:`~labsupport.datasets.blending.greedy_step`,
:func:`~labsupport.datasets.blending.reference_blending_indices`): for step ``i`` with
``x = max(i, 1)`` pick the dataset with the largest ``fl(fl(w_d * x) - count_d)``, the first on
exact ties.  It is sequential — each step needs the counts of the step before — and a Python
loop costs tens of nanoseconds per step and dataset (chapter 3 measures it).  This module gets the same output at
compiled speed with numpy only, in three phases:

1. **Guess** (:func:`_guess_counts`): the ``size`` steps are cut into ``P`` chunks of ``B``
   steps.  Each chunk starts ``K`` steps early from a guessed count vector: the exact counts
   after a short prefix plus the largest remainder of ``w * steps``.  The greedy pulls a nearby
   state back onto its own trajectory within a few cycles of every dataset picked often.
2. **Run side by side** (:class:`_Lockstep`): every numpy operation advances all ``P`` chunks by
   one step (counts laid out ``(P, n)``, one row per chunk; ``argmax`` along a row returns the
   first maximum, as the C++ scan does).  Each chunk records its picks, the sample index of each
   pick, the winning error of each step and its counts every ``M`` steps.
3. **Prove, chunk by chunk** (:meth:`_Chunks.prove`): chunk 0 starts from the true state
   (zeros).  When chunk ``j`` is proven, its true end state is known; the difference ``D``
   between that and chunk ``j+1``'s guessed start touches a few datasets ``S`` only (those
   whose guess was off by one, typically datasets with tiny weights, picked every 10⁵ steps or
   never).  Along chunk ``j+1``'s recorded picks the errors of every other dataset are the same
   under both states, so a recorded step stays right exactly when no dataset of ``S``, with its
   true count, beats the recorded winner (:meth:`_Chunks._first_wrong_step`, vectorised over the
   chunk).  The recorded sample indices are shifted by ``D``; from the first wrong step, if any,
   the chunk is re-run exactly in Python (scanning only the datasets that can win) up to its
   next recorded count vector, where the check starts again.
4. **Run again what a rare dataset spoiled**: a guess off by one in a dataset the chunk never
   picks leaves the chunk's other datasets one pick off to its end, so it would be re-run whole
   in Python.  From the first such chunk the proof only *predicts* states (recorded counts
   moved by ``D``, which keeps the rare datasets right), runs the spoiled chunks again side by
   side from their predecessors' predicted states ``K`` steps early, and proves from there.

By induction every chunk is the sequential loop's output, whatever the weights: a wrong guess
costs a vectorised check, never a wrong answer.  Errors are evaluated with the same IEEE
operations as the C++ (``fl(fl(w * x) - count)``: numpy's separate multiply and subtract, no
fused multiply-add; the shipped ``helpers_cpp`` contains no FMA instruction).

Where the time goes: phase 2 is ``B + K`` numpy steps of about six array operations over
``P × n`` numbers — the same ``size × n`` multiply-subtract-compare work as the C++ loop, done
in ~3 memory passes instead of one register loop, plus the warm-up (``K/B``, up to 25 %) and a
per-call overhead.  Phases 3–4 cost little when every dataset is picked at least every few
hundred steps; with many datasets of weight 1e-3…1e-7 many chunk starts are guessed wrong in
one of them, and the time goes into running those chunks again and into Python re-runs.  The
previous engine re-ran a whole chunk whenever its guessed count vector differed in any dataset,
one chunk after the other: 50–230× the C++ time on such weights.
"""
from __future__ import annotations

import math

import numpy as np

from labsupport.datasets.blending_loop import sequential_steps

__all__ = ["chunked_blending_indices"]

#: the longest chunk (steps), whatever the size: more chunks side by side instead
MAX_CHUNK_STEPS = 4096


class _Lockstep:
    """Advances P chunks of the greedy by one step per call.

    Counts ``C`` (n, P) float64 (exact integers), one column per chunk; ``x`` (P,) holds each
    chunk's ``max(step, 1)``.  The first maximum of each column: for n ≤ 4 a strict ``>`` scan
    from d = 0 across all chunks at once, as in the C++; for n > 4 the column maxima, then the
    first row equal to its column's maximum (``n - max((E == m) * (n - d))``) — long contiguous
    operations, where ``argmax`` along short rows would pay a call per row.  ``x`` is also kept
    broadcast as ``X`` (n, P) because a full-array multiply is faster than a broadcasting one.
    From :data:`ROWS_FROM` datasets on, rows are long enough: the counts are laid out (P, n) and
    ``argmax`` along each row gives the first maximum directly.
    """

    #: datasets from which a chunk's counts are one row and argmax finds the winner
    ROWS_FROM = 128

    def __init__(self, w: np.ndarray, x0: np.ndarray, counts: np.ndarray) -> None:
        n, P = w.size, x0.size
        self.n, self.P = n, P
        self.small = n <= 4
        self.rows = n >= self.ROWS_FROM
        self.x = np.array(x0, dtype=np.float64)
        if self.rows:
            self.C = np.array(counts, dtype=np.float64)                   # (P, n)
            self.E = np.empty((P, n))
        else:
            self.C = np.ascontiguousarray(counts.T, dtype=np.float64)   # (n, P)
            self.E = np.empty((n, P))
        self.m = np.empty(P)
        self.idx = np.empty(P, dtype=np.intp)
        self.flat = np.empty(P, dtype=np.intp)
        self.before = np.empty(P)
        self.cols = np.arange(P, dtype=np.intp)
        if self.rows:
            self.w = w
            self.cols *= n
        elif self.small:
            self.wcol = w[:, None]
            self.gt = np.empty(P, dtype=bool)
        else:
            self.W = np.repeat(w[:, None], P, axis=1)
            self.X = np.repeat(self.x[None, :], n, axis=0)
            self.eq = np.empty((n, P), dtype=bool)
            small = np.uint8 if n < 255 else np.uint16
            self.rev = (n - np.arange(n)).astype(small)[:, None]
            self.tmp = np.empty((n, P), dtype=small)
            self.r = np.empty(P, dtype=small)

    def counts(self) -> np.ndarray:
        """The count vectors, (P, n) (a view)."""
        return self.C if self.rows else self.C.T

    def set_x(self, j: int, x: float) -> None:
        self.x[j] = x
        if not (self.small or self.rows):
            self.X[:, j] = x

    def set_chunk(self, j: int, counts: np.ndarray, x: float) -> None:
        """Put chunk ``j`` at a known state: its counts and x."""
        self.counts()[j] = counts
        self.set_x(j, x)

    def step(self) -> tuple[np.ndarray, np.ndarray]:
        """One step of every chunk: returns (picked dataset (P,), its count before the step (P,));
        counts updated in place, x += 1."""
        E, idx, n = self.E, self.idx, self.n
        if self.rows:
            np.multiply(self.w, self.x[:, None], out=E)
            np.subtract(E, self.C, out=E)
            np.argmax(E, axis=1, out=idx)
        elif self.small:
            np.multiply(self.wcol, self.x, out=E)
            np.subtract(E, self.C, out=E)
            np.greater(E[1], E[0], out=self.gt)
            np.copyto(idx, self.gt, casting="unsafe")
            if n > 2:
                np.maximum(E[0], E[1], out=self.m)
                for d in range(2, n):
                    np.greater(E[d], self.m, out=self.gt)
                    np.copyto(idx, d, where=self.gt)
                    if d + 1 < n:
                        np.maximum(self.m, E[d], out=self.m)
        else:
            np.multiply(self.W, self.X, out=E)
            np.subtract(E, self.C, out=E)
            np.maximum.reduce(E, axis=0, out=self.m)
            np.equal(E, self.m, out=self.eq)
            eq = self.eq.view(np.uint8) if self.tmp.dtype == np.uint8 else self.eq
            np.multiply(eq, self.rev, out=self.tmp)
            np.maximum.reduce(self.tmp, axis=0, out=self.r)
            np.subtract(n, self.r, out=idx, casting="unsafe")
            self.X += 1.0
        self.x += 1.0
        if self.rows:
            np.add(self.cols, idx, out=self.flat)
        else:
            np.multiply(idx, self.P, out=self.flat)
            self.flat += self.cols
        Cf = self.C.reshape(-1)
        np.take(Cf, self.flat, out=self.before)
        Cf[self.flat] = self.before + 1.0
        return idx, self.before


def _effective_weights(w: np.ndarray) -> np.ndarray:
    """Weights summing to 1 that make the same choices as ``w`` (exact arithmetic), for guessing.

    Moving every active dataset's weight by the same amount does not change the argmax of
    ``w_d * x - c_d``, so unnormalised weights act like ``w - lam`` with
    ``lam = (sum - 1) / n_active``; datasets pushed to ≤ 0 are never picked and drop out.
    """
    total = float(w.sum())
    if abs(total - 1.0) < 1e-12:
        return w
    active = np.ones(w.size, dtype=bool)
    while True:
        lam = (float(w[active].sum()) - 1.0) / int(active.sum())
        out = np.where(active, w - lam, 0.0)
        drop = active & (out <= 0)
        if not drop.any() or drop.sum() == active.sum():
            return np.maximum(out, 0.0)
        active &= ~drop


def _largest_remainder(w: np.ndarray, totals: np.ndarray) -> np.ndarray:
    """Counts (P, n) summing to ``totals`` (P,), each row closest to ``w * total``
    (``w`` sums to 1): floors, then one more for the largest remainders."""
    n = w.size
    ideal = totals.astype(np.float64)[:, None] * w[None, :]
    C = np.floor(ideal)
    rem = totals - C.sum(axis=1)
    order = np.argsort(-(ideal - C), axis=1, kind="stable")
    ranks = np.empty_like(order)
    np.put_along_axis(ranks, order, np.arange(n)[None, :], axis=1)
    C += ranks < rem[:, None]
    np.maximum(C, 0, out=C)
    return C


def _guess_counts(w_eff: np.ndarray, steps: np.ndarray, base: np.ndarray, base_step: int) -> np.ndarray:
    """Count vectors (P, n) near the greedy's state at each of ``steps`` (all ≥ ``base_step``):
    ``base`` (the exact counts at ``base_step``) plus the largest remainder of
    ``w_eff * (step - base_step)``.  Counts of datasets that stopped being picked (a zero weight
    taken once on an exact tie, say) are carried over from ``base`` instead of guessed."""
    delta = (steps - base_step).astype(np.float64)
    return _largest_remainder(w_eff, delta) + np.asarray(base, dtype=np.float64)[None, :]


def _sequential_pruned(w: list[float], size: int, counts: list[int], start: int,
                       window: int = 64) -> tuple[list[int], list[int], list[int]]:
    """The sequential loop (``blending.sequential_steps``), same output, scanning only the datasets
    that can win.  Per window of steps, a dataset whose error cannot reach the mean error of all
    datasets (a lower bound of the maximum) before the window ends is skipped: its error stays
    strictly below the winner's, so it is neither picked nor first on a tie."""
    n = len(w)
    total_w = math.fsum(w)
    dl: list[int] = []
    sl: list[int] = []
    done = 0
    while done < size:
        L = min(window, size - done)
        x0 = float(max(start + done, 1))
        x1 = float(start + done + L)
        # the mean error, linear in the step, at both ends of the window, minus a margin far
        # above the rounding error of any error value (a few ulps of x * sum(w) and the counts)
        steps0 = start + done
        lows = [(x0 * total_w - steps0) / n, (x1 * total_w - (steps0 + L)) / n]
        bound = min(lows) - 1e-12 * (1.0 + x1 * (total_w + 1.0))
        cand = [d for d in range(n) if w[d] * x1 - counts[d] >= bound]
        wc = [w[d] for d in cand]
        cc = [counts[d] for d in cand]
        picked, numbers, cc = sequential_steps(wc, L, cc, start + done)   # the loop over the candidates only
        dl.extend(cand[q] for q in picked)
        sl.extend(numbers)
        for q, d in enumerate(cand):
            counts[d] = cc[q]
        done += L
    return dl, sl, counts


class _Chunks:
    """The chunked run of the greedy: chunk j owns steps ``j*B .. j*B+B-1`` of the output."""

    def __init__(self, w: np.ndarray, size: int, chunks: int | None, warmup: int | None) -> None:
        n = w.size
        self.w, self.n, self.size = w, n, size
        self.wl = w.tolist()
        self.w_eff = _effective_weights(w)
        if warmup is None:  # a few cycles of the datasets picked at least every ~500 steps
            often = self.w_eff[self.w_eff >= 2e-3]
            warmup = int(np.clip(8.0 / often.min(), 32, 512)) if often.size else 64
        self.K = K = int(warmup)
        if chunks is None:
            chunks = 4000 if n <= 4 else max(64, 50_000 // (n + 8))
        # at most MAX_CHUNK_STEPS steps a chunk: a chunk spoiled by a rare dataset costs its length
        self.B = B = int(max(4 * K, 64, min(-(-size // int(chunks)), MAX_CHUNK_STEPS)))
        self.P = P = -(-size // B)
        # the records, one row per local step (a step writes one contiguous row), (B, P): picks
        # and their sample indices (the count before the pick, so the winning error of a step
        # is fl(w[pick] * x) - sample index: :meth:`_top`)
        self.D2 = np.empty((B, P), dtype=np.int16)
        self.S2 = np.empty((B, P), dtype=np.int64)
        self.firsts = np.arange(P, dtype=np.int64) * B
        # count vectors every M local steps (at most ~32 MB): a proof restarts there after a re-run
        self.count_dtype = np.int32 if size < 2**31 else np.int64
        self.M = max(64, -(-B * n * P * 4 // (32 << 20)))
        self.snaps = np.empty(((B - 1) // self.M, P, n), dtype=self.count_dtype)
        self.start_state = np.zeros((P, n))
        self.end_state = np.zeros((P, n))
        self.wrong_chunks = self.reruns = self.rerun_steps = self.chunks_run_again = 0

    def run(self, sub: np.ndarray, guess: np.ndarray, warmup: int | None = None) -> None:
        """Phase 2: chunks ``sub`` (ascending ids) side by side from ``guess`` (len(sub), n), the
        guessed counts ``warmup`` (default ``K``) steps before each chunk's first step; chunk 0
        exactly from zeros."""
        K = self.K if warmup is None else warmup
        B, M = self.B, self.M
        s0 = self.firsts[sub] - K
        ls = _Lockstep(self.w, np.maximum(s0, 0).astype(np.float64), guess)
        at_zero = sub[0] == 0
        rows = slice(None) if sub.size == self.P else sub   # a slice writes much faster
        zeros = np.zeros(self.n)
        D2, S2 = self.D2, self.S2
        for t in range(B + K):
            local = t - K
            if local == 0:
                if at_zero:
                    ls.set_chunk(0, zeros, 1.0)               # the true start; x = max(0, 1)
                self.start_state[rows] = ls.counts()
            elif local > 0 and local % M == 0:
                self.snaps[local // M - 1, rows] = ls.counts()
            idx, before = ls.step()
            if local == 0 and at_zero:
                ls.set_x(0, 1.0)                              # step 1 is x = 1 too
            if local >= 0:
                D2[local, rows] = idx
                S2[local, rows] = before
        self.end_state[rows] = ls.counts()

    def prove(self, rounds: int = 1) -> None:
        """Phase 3: make every chunk exact, in order (module docstring).

        Most wrong guesses are fixed by the check and a few short re-runs.  A chunk that keeps
        diverging had a guess off in a dataset it rarely picks (so its other datasets stay one
        pick off to the end).  From the first such chunk on, the pass only predicts each
        chunk's states (:meth:`_predict_state`: the recorded ones moved by ``D``, where the rare
        datasets' counts come out right) and notes the chunks whose guess was off in a rare
        dataset; those run again side by side, each from its predecessor's (predicted) state
        ``K2`` steps before it, and the next pass begins at the first of them; after ``rounds``
        such runs the last pass re-runs in Python whatever still differs.
        """
        B, M, n = self.B, self.M, self.n
        L = ((B - self.K) // M) * M                     # a recorded step K2 = B - L before the end
        if L < M:
            L = B
        rare = self.w_eff * B < 1
        begin, true, prev_at_L = 0, np.zeros(n), None
        for round_ in range(rounds + 1):
            last = round_ == rounds
            first = None
            again, starts = [], []
            # runs of chunks that start exactly where the one before ends are proven together
            chained = np.ones(self.P, dtype=bool)
            chained[1:] = (self.start_state[1:] == self.end_state[:-1]).all(axis=1)
            breaks = np.flatnonzero(~chained)
            j = begin
            while j < self.P:
                start = true
                if first is None and j > 0 and chained[j] and np.array_equal(true, self.end_state[j - 1]):
                    k = int(breaks[np.searchsorted(breaks, j)]) if breaks.size and breaks[-1] >= j else self.P
                    prev_at_L = (k - 1, self.start_state[k - 1], self.end_state[k - 1])
                    true = self.end_state[k - 1].copy()
                    j = k
                    continue
                if first is None:
                    end = self._prove_chunk(j, true, give_up_after=None if last else 4)
                    if end is not None:
                        at_L = (j, start, end)       # proven: its state at L when needed
                    else:
                        if isinstance(prev_at_L, tuple):
                            pj, pstart, pend = prev_at_L
                            prev_at_L = pstart + np.bincount(self.D2[:L, pj], minlength=n) if L < B else pend
                        first, first_true, first_prev = j, true.copy(), prev_at_L
                        again.append(j)
                        starts.append(prev_at_L)
                else:
                    if ((true - self.start_state[j]) * rare).any():
                        again.append(j)
                        starts.append(prev_at_L)
                    end = None
                if end is None:
                    end = self._predict_state(j, start, B, rare)
                    at_L = self._predict_state(j, start, L, rare) if L < B else end
                prev_at_L, true = at_L, end
                j += 1
            if first is None:
                return
            self.chunks_run_again += len(again)
            self.run(np.array(again), np.array(starts), warmup=B - L)
            begin, true, prev_at_L = first, first_true, first_prev

    def _predict_state(self, j: int, true: np.ndarray, local: int, rare: np.ndarray) -> np.ndarray:
        """A guess of chunk ``j``'s counts before its local step ``local`` (``B``: its end, else a
        recorded step) from its true start ``true``: the recorded counts moved by ``D``; a rare
        dataset whose guess was off is picked once if its true error ever beats the recorded
        winner, else not, and the steps that adds or takes go to the dataset most behind (or
        ahead of) its share."""
        D = true - self.start_state[j]
        rec = self.end_state[j] if local >= self.B else self.snaps[local // self.M - 1, j]
        state = rec + D
        slow = np.flatnonzero(D * rare)
        if slow.size == 0:
            return state
        first = int(self.firsts[j])
        x = np.maximum(np.arange(first, first + local, dtype=np.float64), 1.0)
        err = self.w[slow][:, None] * x[None, :] - true[slow][:, None]
        picked = (err > self._top(j, 0, local)[None, :]).any(axis=1).astype(np.float64)
        new = true[slow] + picked
        delta = int((new - state[slow]).sum())
        state[slow] = new
        behind = self.w_eff * float(first + local) - state
        behind[slow] = np.nan
        for _ in range(abs(delta)):
            d = int(np.nanargmin(behind) if delta > 0 else np.nanargmax(behind))
            state[d] -= np.sign(delta)
            behind[d] += np.sign(delta)
        return state

    def _prove_chunk(self, j: int, true: np.ndarray, give_up_after: int | None = None) -> np.ndarray | None:
        """Prove chunk ``j`` from its exact start ``true``, fixing its records in place; returns
        its exact end state — or None, with ``give_up_after``, when it diverged more often than
        that while a rarely picked dataset's count was off."""
        B, M, n = self.B, self.M, self.n
        t0, guess, fails = 0, self.start_state[j], 0
        while True:
            D = true - guess
            moved = np.flatnonzero(D)
            if moved.size == 0:
                return self.end_state[j].copy()
            if t0 == 0:
                self.wrong_chunks += 1
            wrong = self._first_wrong_step(j, t0, moved, D, true)
            stop = B if wrong is None else wrong
            seg = self.D2[t0:stop, j]
            shift = np.zeros(n, dtype=np.int64)
            shift[moved] = D[moved]
            self.S2[t0:stop, j] += shift[seg]
            if wrong is None:
                return self.end_state[j] + D
            fails += 1
            if give_up_after is not None and fails > give_up_after and (self.w_eff[moved] * B < 1).any():
                return None
            state = true + np.bincount(seg, minlength=n)
            stop = min((wrong // M + 1) * M, B)
            dl, sl, counts = _sequential_pruned(self.wl, stop - wrong, state.astype(np.int64).tolist(),
                                                int(self.firsts[j]) + wrong)
            self.D2[wrong:stop, j] = dl
            self.S2[wrong:stop, j] = sl
            self.reruns += 1
            self.rerun_steps += stop - wrong
            true = np.array(counts, dtype=np.float64)
            if stop == B:
                return true
            t0, guess = stop, self.snaps[stop // M - 1, j].astype(np.float64)

    def _top(self, j: int, a: int, b: int) -> np.ndarray:
        """The winning error of chunk ``j``'s recorded local steps ``a..b-1``, recomputed exactly
        as the run computed it: ``fl(fl(w[pick] * x) - count before)``."""
        first = int(self.firsts[j])
        x = np.maximum(np.arange(first + a, first + b, dtype=np.float64), 1.0)
        top = self.w[self.D2[a:b, j]] * x
        top -= self.S2[a:b, j]
        return top

    def _first_wrong_step(self, j: int, t0: int, moved: np.ndarray, D: np.ndarray,
                          true: np.ndarray) -> int | None:
        """The first recorded step of chunk ``j`` (from local step ``t0``, where the true counts
        are ``true`` and the recorded ones ``true - D``) that the true state decides otherwise."""
        picks = self.D2[t0:, j].astype(np.intp)
        top = self._top(j, t0, self.B)
        first = int(self.firsts[j]) + t0
        x = np.maximum(np.arange(first, first + picks.size, dtype=np.float64), 1.0)
        hit = picks[None, :] == moved[:, None]                       # (|S|, L)
        counts = np.cumsum(hit, axis=1, dtype=np.int64)
        counts -= hit                                                # picks before each step
        err = np.multiply(self.w[moved][:, None], x[None, :])        # fl(w * x)
        err -= counts + true[moved][:, None]                         # fl(... - count)
        picked_moved = hit.any(axis=0)
        best = top
        wrong = np.zeros(picks.size, dtype=bool)
        if picked_moved.any():
            # the winner itself moved: still the winner over the unmoved ones only if its true
            # error did not fall below the recorded one
            mine = err[hit.argmax(axis=0), np.arange(picks.size)]
            best = np.where(picked_moved, mine, top)
            wrong |= picked_moved & (mine < top)
        beaten = (err > best) | ((err == best) & (moved[:, None] < picks[None, :]))
        wrong |= (beaten & ~hit).any(axis=0)
        k = int(wrong.argmax())
        return t0 + k if wrong[k] else None


def chunked_blending_indices(w: np.ndarray, size: int, *, chunks: int | None = None,
                             warmup: int | None = None, stats: dict | None = None
                             ) -> tuple[np.ndarray, np.ndarray]:
    """Megatron's blending indices for ``size`` ≥ 1 steps and float64 weights ``w`` (n ≥ 2):
    ``(dataset_index int16[size], dataset_sample_index int64[size])``, exactly the sequential
    loop's.  ``chunks``/``warmup`` override the chunking (tests); ``stats`` receives counters."""
    ch = _Chunks(w, size, chunks, warmup)
    # the exact counts after a short prefix seed the guesses (a dataset taken once on an early
    # exact tie and never again keeps that count everywhere)
    t0 = int(max(0, min(ch.B - ch.K, 512)))
    _, _, seed = _sequential_pruned(ch.wl, t0, [0] * ch.n, 0)
    seed = np.array(seed, dtype=np.float64)
    steps = np.maximum(ch.firsts - ch.K, t0)
    guess = _guess_counts(ch.w_eff, steps, seed, t0)
    everything = np.arange(ch.P)
    ch.run(everything, guess)
    ch.prove()
    if stats is not None:
        stats.update(chunks=ch.P, chunk_steps=ch.B, warmup=ch.K, snapshot_every=ch.M,
                     chunks_guessed_wrong=ch.wrong_chunks, reruns=ch.reruns, rerun_steps=ch.rerun_steps,
                     chunks_run_again=ch.chunks_run_again)
    di = np.ascontiguousarray(ch.D2.T).reshape(-1)[:size]
    si = np.ascontiguousarray(ch.S2.T).reshape(-1)[:size]
    return di, si
