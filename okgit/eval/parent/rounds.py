"""The final gate's statistics: interleaved rounds of baseline and candidate.

A/A noise is the baseline's own spread across rounds (each round a fresh process), never
below MIN_NOISE. The candidate is `optimized` only if it beats the baseline of the same round
by more than that noise in every round; the sign test's p-value says how surprising its wins
would be if the two were equally fast. It is `slower` when its median is slower than the
baseline's past that noise: such a candidate is never handed out as a result.
"""

from __future__ import annotations

import statistics
from math import comb

from okgit.eval.types import Comparison

MIN_NOISE = 0.005


def sign_test_p(wins: int, rounds: int) -> float:
    """One-sided: P(at least `wins` wins of `rounds` | each round a fair coin)."""
    return sum(comb(rounds, k) for k in range(wins, rounds + 1)) / 2**rounds if rounds else 1.0


def aa_noise(baseline_us: list[float]) -> float:
    if len(baseline_us) < 2:
        return MIN_NOISE
    mid = statistics.median(baseline_us)
    return max(MIN_NOISE, max(abs(b / mid - 1.0) for b in baseline_us))


def summarize(baseline_us: list[float], candidate_us: list[float], detail: str = "") -> Comparison:
    noise = aa_noise(baseline_us)
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
        slower=speedup < 1.0 - noise,
        detail=detail or f"won {wins}/{len(baseline_us)} rounds; A/A noise {noise:.2%}",
    )
