"""The pure core of serving, measuring the variants (serving/ab_stats.py): latency histograms, A/B statistics,
shadow agreement."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats as scipy_stats

from serving import traffic
from serving.traffic import (
    LATENCY_BUCKETS_MS,
    Outcomes,
    agree,
    compare,
)

# --- latency histograms -------------------------------------------------------------------------------------


def histogram(samples):
    counts = []
    for ms in samples:
        traffic.observe(counts, ms)
    return counts


def bucket_of(ms):
    return int(np.searchsorted(LATENCY_BUCKETS_MS, ms, side="left"))


def bucket_edges(ms):
    index = bucket_of(ms)
    return (LATENCY_BUCKETS_MS[index - 1] if index else 0.0), LATENCY_BUCKETS_MS[
        min(index, len(LATENCY_BUCKETS_MS) - 1)
    ]


def test_the_buckets_are_log_spaced_from_a_tenth_of_a_millisecond_to_a_minute():
    bounds = np.array(LATENCY_BUCKETS_MS)
    assert bounds[0] == 0.1 and bounds[-1] == 60_000 and 60 <= len(bounds) <= 100
    ratios = bounds[1:] / bounds[:-1]
    assert ratios.min() > 1.15 and ratios.max() < 1.22


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 10**6), size=st.integers(1000, 3000), q=st.sampled_from([0, 1, 50, 90, 95, 99, 100]))
def test_percentiles_are_within_one_bucket_of_numpy(seed, size, q):
    samples = np.random.default_rng(seed).lognormal(mean=3, sigma=1.5, size=size)
    estimate = traffic.percentile(histogram(samples), q)
    assert abs(bucket_of(estimate) - bucket_of(np.percentile(samples, q))) <= 1


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 10**6), size=st.integers(1, 300), q=st.floats(0, 100))
def test_with_few_samples_a_percentile_lies_in_the_buckets_of_the_samples_around_its_rank(seed, size, q):
    # numpy interpolates between two neighbouring samples; in a sparse tail they can be many buckets apart
    samples = np.sort(np.random.default_rng(seed).lognormal(mean=3, sigma=1.5, size=size))
    rank = (size - 1) * q / 100
    below, above = samples[int(np.floor(rank))], samples[int(np.ceil(rank))]
    assert bucket_edges(below)[0] <= traffic.percentile(histogram(samples), q) <= bucket_edges(above)[1]


def test_a_percentile_is_interpolated_inside_its_bucket():
    samples = np.random.default_rng(7).uniform(10, 1000, size=20_000)  # buckets fully inside the range
    for q in (10, 50, 90):
        assert traffic.percentile(histogram(samples), q) == pytest.approx(
            np.percentile(samples, q), rel=0.02
        )  # buckets: 18 %


def test_merged_histograms_count_as_if_observed_together():
    a, b = [0.05, 3, 3, 70_000], [12.5, 999]
    assert traffic.merge(histogram(a), histogram(b)) == histogram(a + b)
    assert traffic.merge([], histogram(b)) == histogram(b)
    assert sum(histogram(a)) == 4 and len(histogram(a)) == len(LATENCY_BUCKETS_MS) + 1


def test_percentiles_of_nothing_and_of_very_slow_requests():
    assert traffic.percentile([], 50) is None
    assert traffic.latency_summary(histogram([90_000] * 10)) == {"p50": 60_000, "p95": 60_000, "p99": 60_000}


# --- A/B statistics -----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "a,b",
    [
        ((120, 1000), (150, 1000)),
        ((10, 100), (25, 120)),
        ((480, 5000), (560, 5200)),
        ((3, 40), (9, 41)),
        ((500, 1000), (500, 1000)),
        ((0, 50), (4, 60)),
    ],
)
def test_the_fixed_horizon_p_value_is_scipys_two_proportion_z_test(a, b):
    comparison = compare(Outcomes(*a), Outcomes(*b))
    (sa, na), (sb, nb) = a, b
    pooled = (sa + sb) / (na + nb)
    z = (sb / nb - sa / na) / np.sqrt(pooled * (1 - pooled) * (1 / na + 1 / nb))
    assert comparison.p_value == pytest.approx(2 * scipy_stats.norm.sf(abs(z)), rel=1e-9, abs=1e-12)
    table = [[sa, na - sa], [sb, nb - sb]]
    chi2 = scipy_stats.chi2_contingency(table, correction=False) if sa + sb else None
    if chi2 is not None:  # the pooled z-test is the uncorrected chi-square test of the 2x2 table
        assert comparison.p_value == pytest.approx(chi2.pvalue, rel=1e-9)
    assert (comparison.rate_a, comparison.rate_b) == (sa / na, sb / nb)
    assert comparison.difference == pytest.approx(sb / nb - sa / na)


def test_no_data_is_no_evidence():
    comparison = compare(Outcomes(0, 0), Outcomes(0, 0))
    assert (comparison.p_value, comparison.sequential_p_value, comparison.significant, comparison.winner) == (
        1,
        1,
        False,
        None,
    )
    with pytest.raises(ValueError, match="0 <= successes <= trials"):
        compare(Outcomes(5, 3), Outcomes(0, 0))


def test_the_confidence_interval_holds_the_difference_and_is_wider_than_the_fixed_one():
    comparison = compare(Outcomes(1000, 10_000, "a"), Outcomes(1500, 10_000, "b"))
    variance = 0.1 * 0.9 / 10_000 + 0.15 * 0.85 / 10_000
    fixed_half_width = scipy_stats.norm.ppf(0.975) * np.sqrt(variance)
    assert comparison.ci_low < 0.05 - fixed_half_width and comparison.ci_high > 0.05 + fixed_half_width
    assert 0 < comparison.ci_low < comparison.ci_high < 0.1


def peeked_experiments(rate_a, rate_b, *, experiments, per_arm, every, seed):
    """For each simulated experiment: did a look after every ``every`` observations per arm ever find (sequential,
    fixed-horizon) significance, and the last comparison."""
    rng = np.random.default_rng(seed)
    results = []
    for _ in range(experiments):
        successes_a = np.cumsum(rng.random(per_arm) < rate_a)
        successes_b = np.cumsum(rng.random(per_arm) < rate_b)
        sequential = fixed = False
        for n in range(every, per_arm + 1, every):
            comparison = compare(Outcomes(int(successes_a[n - 1]), n, "a"), Outcomes(int(successes_b[n - 1]), n, "b"))
            sequential |= comparison.significant
            fixed |= comparison.p_value <= 0.05
        results.append((sequential, fixed, comparison))
    return results


def test_peeking_at_the_sequential_test_does_not_inflate_false_positives_but_peeking_at_the_fixed_one_does():
    results = peeked_experiments(0.1, 0.1, experiments=300, per_arm=2000, every=100, seed=11)
    sequential_rate = sum(sequential for sequential, _, _ in results) / len(results)
    fixed_rate = sum(fixed for _, fixed, _ in results) / len(results)
    assert sequential_rate <= 0.05 + 0.02
    assert fixed_rate > 0.05 * 2  # 20 looks at a test meant for one: most of the "winners" are noise
    assert all(comparison.winner is None for sequential, _, comparison in results if not sequential)


def test_a_real_difference_is_found_and_the_better_variant_named():
    results = peeked_experiments(0.10, 0.15, experiments=20, per_arm=5000, every=500, seed=5)
    assert all(comparison.significant and comparison.winner == "b" for _, _, comparison in results)
    swapped = compare(Outcomes(1500, 10_000, "control"), Outcomes(1000, 10_000, "new"))
    assert (
        swapped.winner == "control" and swapped.sequential_p_value < 0.05 and swapped.difference == pytest.approx(-0.05)
    )


def test_a_winner_is_named_only_when_the_sequential_test_is_significant():
    comparison = compare(Outcomes(20, 200, "a"), Outcomes(35, 200, "b"))
    assert comparison.p_value < 0.05  # what a fixed-horizon dashboard would call a win
    assert comparison.sequential_p_value > 0.05 and not comparison.significant and comparison.winner is None


# --- shadow agreement ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "primary,shadow,agreed",
    [
        (1, 1.0, True),
        (0.3, 0.1 + 0.2, True),
        (1.0, 1.001, False),
        (1e9, 1e9 + 0.5, True),
        ([1, 2, [0.5, 0.5]], [1, 2, [0.5, 0.5000000001]], True),
        ([1, 2], [1, 2, 3], False),
        ([1, 2], [2, 1], False),
        ("cat", "cat", True),
        ("cat", "dog", False),
        ("1", 1, False),
        (True, 1, False),
        (None, None, True),
        ({"label": "cat", "score": 0.9}, {"label": "cat", "score": 0.9}, True),
        ({"a": 1}, {"b": 1}, False),
        (float("nan"), float("nan"), True),
        (float("nan"), 0.0, False),
    ],
)
def test_a_shadow_agrees_with_the_primary_when_its_answer_matches(primary, shadow, agreed):
    assert agree(primary, shadow) is agreed


def test_the_tolerance_of_agreement_is_adjustable():
    assert agree([0.50, 0.70], [0.51, 0.69], tolerance=0.02) and not agree([0.50, 0.70], [0.51, 0.69])
