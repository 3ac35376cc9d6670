"""The final gate's statistics: interleaved rounds of baseline and candidate.

A/A noise is the baseline's own spread across rounds (each round a fresh process), never
below MIN_NOISE. The candidate is `optimized` only if it beats the baseline of the same round
by more than that noise in every round; the sign test's p-value says how surprising its wins
would be if the two were equally fast. It is `slower` when its median is slower than the
baseline's past the baseline's typical spread (`typical_noise`): such a candidate is never
handed out as a result.

The two questions take the noise two ways on purpose. The A/A noise is the largest deviation, so
one round the machine disturbed makes `optimized` harder, as it should. Taken for `slower` too, that
one round let a candidate at half the baseline's speed through as `matched` (L1/87 on an H200: the
baseline's rounds 5521, 3432, 3424, 3425 and 3439 us, the candidate's 6694-6859 us, "won 0/5 rounds;
A/A noise 60.89%"). The typical spread is robust to such rounds (a median), so a candidate slower
in the middle of its rounds is called slower whatever one or two rounds did.
"""

from __future__ import annotations

import statistics
from math import comb

from okgit.eval.types import Comparison

MIN_NOISE = 0.005
TYPICAL_FACTOR = 3.0  # a median deviation, widened to cover the undisturbed rounds' own spread
# A round this many times the others' typical spread off their median, and at least DISTURBED_NOISE:
# a round the machine disturbed. On the H200's sweep (2026-12-04) 6 of 23 gated problems had one in
# the baseline's rounds, and 3 of those winners were called `matched` for it: L1/66's baseline took
# 15514 us in one round and 4881-4890 in the four others, and a candidate 1.8x faster in every round
# was `matched` on a 218% noise (okgit.final_gate runs such rounds again).
DISTURBED = 10.0
DISTURBED_NOISE = 0.05


def sign_test_p(wins: int, rounds: int) -> float:
    """One-sided: P(at least `wins` wins of `rounds` | each round a fair coin)."""
    return sum(comb(rounds, k) for k in range(wins, rounds + 1)) / 2**rounds if rounds else 1.0


def _deviations(baseline_us: list[float]) -> list[float]:
    """Each round's relative deviation from the baseline's median ([0.0] with fewer than two rounds)."""
    if len(baseline_us) < 2:
        return [0.0]
    mid = statistics.median(baseline_us)
    return [abs(b / mid - 1.0) for b in baseline_us]


def aa_noise(baseline_us: list[float]) -> float:
    return max(MIN_NOISE, max(_deviations(baseline_us)))


def typical_noise(baseline_us: list[float]) -> float:
    """TYPICAL_FACTOR times the median round's deviation from the baseline's median, never below
    MIN_NOISE: the spread of the rounds the machine left alone, however far off the others were."""
    return max(MIN_NOISE, TYPICAL_FACTOR * statistics.median(_deviations(baseline_us)))


def summarize(baseline_us: list[float], candidate_us: list[float], detail: str = "") -> Comparison:
    noise = aa_noise(baseline_us)
    typical = min(noise, typical_noise(baseline_us))
    wins = sum(c < b for b, c in zip(baseline_us, candidate_us, strict=True))
    clear = all(c < b * (1.0 - noise) for b, c in zip(baseline_us, candidate_us, strict=True))
    speedup = statistics.median(baseline_us) / statistics.median(candidate_us)
    return Comparison(
        rounds=len(baseline_us),
        baseline_us=baseline_us,
        candidate_us=candidate_us,
        noise=noise,
        wins=wins,
        sign_test_p=sign_test_p(wins, len(baseline_us)),
        speedup=speedup,
        optimized=clear and bool(baseline_us),
        slower=speedup < 1.0 - typical,
        detail=detail or f"won {wins}/{len(baseline_us)} rounds; A/A noise {noise:.2%}"
        + (f" (typical {typical:.2%})" if typical < noise else ""),
    )


def far_off(rounds_us: list[float]) -> bool:
    """Whether one of an arm's rounds stands far off the others (DISTURBED)."""
    return max(_deviations(rounds_us)) >= max(DISTURBED_NOISE, DISTURBED * typical_noise(rounds_us))
