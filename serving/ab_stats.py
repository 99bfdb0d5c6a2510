"""Measuring a deployment's variants: latency histograms (fixed log-spaced buckets, summed and subtracted as
plain lists of counts), A/B statistics (two-proportion and always-valid sequential tests of success rates) and
shadow agreement (whether a shadow's answer matches the primary's). Pure: no Django, no I/O
(docs/architecture.md "The stack", "The serving path").

serving/traffic.py, which judges rollouts on these numbers, re-exports every public name here, so callers may
keep writing ``traffic.percentile``, ``traffic.compare`` or ``traffic.agree``.
"""

from __future__ import annotations

import math
from bisect import bisect_left
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

# --- Latency histograms -----------------------------------------------------------------------------------


def _log_bounds(low: float, high: float, buckets: int) -> tuple[float, ...]:
    return tuple(float(f"{low * (high / low) ** (i / buckets):.3g}") for i in range(buckets + 1))


# Upper bounds in ms, each about 18 % above the previous one. counts[i] holds observations in
# (LATENCY_BUCKETS_MS[i-1], LATENCY_BUCKETS_MS[i]]; the last count (one more than the bounds) is "over 60 s".
LATENCY_BUCKETS_MS = _log_bounds(0.1, 60_000.0, 80)
HISTOGRAM_SIZE = len(LATENCY_BUCKETS_MS) + 1


def empty_histogram() -> list[int]:
    return [0] * HISTOGRAM_SIZE


def as_histogram(counts: Iterable[int] | None) -> list[int]:
    counts = list(counts or ())
    if len(counts) > HISTOGRAM_SIZE:
        raise ValueError(f"A latency histogram has {HISTOGRAM_SIZE} counts, not {len(counts)}.")
    return counts + [0] * (HISTOGRAM_SIZE - len(counts))


def observe(counts: list[int], ms: float) -> list[int]:
    """Count one latency into ``counts`` in place (an empty list becomes a histogram) and return it."""
    if len(counts) < HISTOGRAM_SIZE:
        counts.extend([0] * (HISTOGRAM_SIZE - len(counts)))
    counts[bisect_left(LATENCY_BUCKETS_MS, ms)] += 1
    return counts


def merge(a: Iterable[int] | None, b: Iterable[int] | None) -> list[int]:
    return [x + y for x, y in zip(as_histogram(a), as_histogram(b))]


def subtract(later: Iterable[int] | None, earlier: Iterable[int] | None) -> list[int]:
    """What was observed between two snapshots of the same counters."""
    return [max(x - y, 0) for x, y in zip(as_histogram(later), as_histogram(earlier))]


def percentile(counts: Iterable[int] | None, q: float) -> float | None:
    """The q-th percentile (0..100) in ms, interpolated linearly inside its bucket; None without observations.
    Beyond the last bound it answers the last bound (60 s): the histogram only knows "longer"."""
    full = as_histogram(counts)
    total = sum(full)
    if not total:
        return None
    target = min(max(q, 0.0), 100.0) / 100 * total
    seen = 0
    for index, count in enumerate(full):
        if count and seen + count >= target:
            if index == len(LATENCY_BUCKETS_MS):
                return LATENCY_BUCKETS_MS[-1]
            low = LATENCY_BUCKETS_MS[index - 1] if index else 0.0
            high = LATENCY_BUCKETS_MS[index]
            return low + (high - low) * max(target - seen, 0) / count
        seen += count
    return LATENCY_BUCKETS_MS[-1]  # pragma: no cover - the loop always reaches the last observation


def latency_summary(counts: Iterable[int] | None) -> dict[str, float | None]:
    return {f"p{q}": percentile(counts, q) for q in (50, 95, 99)}


# --- A/B statistics ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Outcomes:
    successes: int
    trials: int
    name: str = ""  # the variant's name, for Comparison.winner ("a" / "b" when empty)

    @property
    def rate(self) -> float:
        return self.successes / self.trials if self.trials else 0.0


@dataclass(frozen=True)
class Comparison:
    p_value: float  # two-proportion z-test (pooled): valid only when looked at once, at a planned size
    sequential_p_value: float  # always valid (mSPRT): may be watched after every request
    significant: bool  # sequential_p_value <= alpha
    winner: str | None  # the variant with the higher rate, only when significant
    rate_a: float
    rate_b: float
    difference: float  # rate_b - rate_a
    ci_low: float  # (1 - alpha) confidence interval of the difference, always valid like the sequential test
    ci_high: float


def compare(a: Outcomes, b: Outcomes, *, alpha: float = 0.05, tau: float = 0.05) -> Comparison:
    """Compare the success rates of two variants.

    The sequential test is the mixture SPRT of Johari et al., "Always Valid Inference" (2017), on the normal
    approximation of the difference of proportions, mixing over the true difference with N(0, tau^2); tau is
    the size of difference one expects (0.05 = 5 points). Under no difference, the chance that its p-value ever
    drops to alpha, however often it is looked at, is at most alpha. It is declared only at the look it holds:
    a caller that shows it over time may keep the running minimum."""
    if not 0 < alpha < 1 or tau <= 0:
        raise ValueError("alpha must lie between 0 and 1 and tau be above 0.")
    for outcomes in (a, b):
        if outcomes.trials < 0 or not 0 <= outcomes.successes <= outcomes.trials:
            raise ValueError(f"Outcomes need 0 <= successes <= trials, not {outcomes.successes} of {outcomes.trials}.")
    rate_a, rate_b = a.rate, b.rate
    difference = rate_b - rate_a
    p_value = sequential = 1.0
    ci_low, ci_high = -1.0, 1.0
    if a.trials and b.trials:
        pooled = (a.successes + b.successes) / (a.trials + b.trials)
        null_variance = pooled * (1 - pooled) * (1 / a.trials + 1 / b.trials)
        if null_variance > 0:
            p_value = min(1.0, math.erfc(abs(difference) / math.sqrt(2 * null_variance)))
            sequential = min(1.0, 1 / _mixture_likelihood_ratio(difference, null_variance, tau))
        # Agresti-Caffo: one success and one failure more per variant, so that 0 of 40 has a width too
        adjusted_a, adjusted_b = (a.successes + 1) / (a.trials + 2), (b.successes + 1) / (b.trials + 2)
        variance = adjusted_a * (1 - adjusted_a) / (a.trials + 2) + adjusted_b * (1 - adjusted_b) / (b.trials + 2)
        half_width = _always_valid_half_width(variance, tau, alpha)
        ci_low, ci_high = max(difference - half_width, -1.0), min(difference + half_width, 1.0)
    significant = sequential <= alpha
    winner = None
    if significant and difference:
        winner = (b.name or "b") if difference > 0 else (a.name or "a")
    return Comparison(
        p_value=p_value,
        sequential_p_value=sequential,
        significant=significant,
        winner=winner,
        rate_a=rate_a,
        rate_b=rate_b,
        difference=difference,
        ci_low=ci_low,
        ci_high=ci_high,
    )


def _mixture_likelihood_ratio(difference: float, variance: float, tau: float) -> float:
    mixed = variance + tau * tau
    exponent = tau * tau * difference * difference / (2 * variance * mixed)
    return math.exp(min(exponent, 700.0)) * math.sqrt(variance / mixed)


def _always_valid_half_width(variance: float, tau: float, alpha: float) -> float:
    """The differences theta with likelihood ratio below 1/alpha: |estimate - theta| <= this."""
    if variance <= 0:
        return 0.0
    mixed = variance + tau * tau
    return math.sqrt(variance * mixed / (tau * tau) * (2 * math.log(1 / alpha) + math.log(mixed / variance)))


# --- Shadow agreement -------------------------------------------------------------------------------------


def agree(primary_prediction: Any, shadow_prediction: Any, *, tolerance: float = 1e-6) -> bool:
    """Whether a shadow's answer matches the primary's: numbers within ``tolerance`` (absolute or relative),
    strings and booleans equal, lists and dicts element by element."""
    p, s = primary_prediction, shadow_prediction
    if isinstance(p, bool) or isinstance(s, bool) or isinstance(p, str) or isinstance(s, str) or p is None or s is None:
        return type(p) is type(s) and p == s
    if isinstance(p, (int, float)) and isinstance(s, (int, float)):
        if math.isnan(p) or math.isnan(s):
            return math.isnan(p) and math.isnan(s)
        return math.isclose(p, s, rel_tol=tolerance, abs_tol=tolerance)
    if isinstance(p, (list, tuple)) and isinstance(s, (list, tuple)):
        return len(p) == len(s) and all(agree(x, y, tolerance=tolerance) for x, y in zip(p, s))
    if isinstance(p, dict) and isinstance(s, dict):
        return p.keys() == s.keys() and all(agree(p[k], s[k], tolerance=tolerance) for k in p)
    return False
