"""The pure core of serving: variant choice and rollouts (serving/traffic.py). Latency histograms, A/B
statistics and shadow agreement: test_ab_stats.py."""

import json
import random

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from scipy import stats as scipy_stats

from serving import traffic
from serving.traffic import (
    ADVANCE,
    COMPLETE,
    HOLD,
    ROLLBACK,
    CanaryPlan,
    Guardrails,
    RollingPlan,
    RolloutState,
    Stats,
    VariantWeight,
    canary_next,
    canary_start,
    choose,
    rolling_next,
    rolling_start,
    validate_variants,
)
from tests.models_registry.test_ab_stats import histogram

KEYS = [f"user-{i}" for i in range(2000)]


def assignment(variants, keys=KEYS):
    return {key: choose(variants, routing_key=key, rng=random.Random(0)).variant for key in keys}


# --- variant choice -----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "variants",
    [
        [("a", 50, False), ("b", 50, False)],
        [("a", 100, False), ("b", 0, False), ("mirror", 0, True)],
        [{"name": "champion", "version": 1, "weight": 90}, {"name": "challenger", "version": 2, "weight": 10}],
        [VariantWeight(f"v{i}", 10) for i in range(10)],
    ],
)
def test_it_accepts_valid_variants(variants):
    assert validate_variants(variants) == {}


@pytest.mark.parametrize(
    "variants,errors",
    [
        ([], {"variants": ["A deployment needs at least one variant."]}),
        ([("a", 60, False), ("a", 40, False)], {"name": ["Variant name 'a' is used twice."]}),
        ([("a b", 100, False)], {"name": ["Variant name 'a b' must be 1 to 40 letters, digits, '-' or '_'."]}),
        (
            [("a", 150, False), ("b", -50, False)],
            {
                "weight": [
                    "Variant 'a': weight must be an integer percent from 0 to 100, not 150.",
                    "Variant 'b': weight must be an integer percent from 0 to 100, not -50.",
                ]
            },
        ),
        (
            [{"name": "a", "weight": "100"}],
            {"weight": ["Variant 'a': weight must be an integer percent from 0 to 100, not '100'."]},
        ),
        (
            [{"name": "a", "weight": 99.5}],
            {"weight": ["Variant 'a': weight must be an integer percent from 0 to 100, not 99.5."]},
        ),
        (
            [("a", 60, False), ("b", 30, False)],
            {"weight": ["The weights of the variants that answer must sum to 100, not 90."]},
        ),
        ([("a", 100, False), ("s", 10, True)], {"weight": ["Variant 's' is a shadow: its weight must be 0, not 10."]}),
        (
            [("s", 0, True)],
            {"variants": ["At least one variant must not be a shadow: shadows only get copies of requests."]},
        ),
        (
            [(f"v{i}", 100 if i == 0 else 0, False) for i in range(11)],
            {"variants": ["A deployment has at most 10 variants, not 11."]},
        ),
    ],
)
def test_it_explains_invalid_variants(variants, errors):
    assert validate_variants(variants) == errors


def test_it_refuses_to_choose_when_nobody_answers():
    with pytest.raises(ValueError, match="No variant has a weight above 0"):
        choose([("a", 0, False), ("s", 0, True)], rng=random.Random(0))


def binomial_interval(n, p):
    return scipy_stats.binom.interval(0.999, n, p)


def test_it_splits_sticky_keys_70_30_within_statistical_tolerance():
    counts = list(assignment([("a", 70, False), ("b", 30, False)]).values()).count("b")
    low, high = binomial_interval(len(KEYS), 0.3)
    assert low <= counts <= high


def test_it_splits_requests_without_a_key_70_30_within_statistical_tolerance():
    rng = random.Random(42)
    variants = [("a", 70, False), ("b", 30, False)]
    chosen = [choose(variants, rng=rng).variant for _ in range(2000)]
    low, high = binomial_interval(2000, 0.3)
    assert low <= chosen.count("b") <= high


def test_it_ignores_the_key_when_the_deployment_is_not_sticky():
    variants = [("a", 50, False), ("b", 50, False)]
    chosen = {choose(variants, routing_key="same", sticky=False, rng=random.Random(seed)).variant for seed in range(50)}
    assert chosen == {"a", "b"}


def test_it_mirrors_to_every_shadow_and_never_lets_one_answer():
    variants = [("b", 0, True), ("primary", 100, False), ("a", 0, True), ("idle", 0, False)]
    for key in KEYS[:200]:
        assert choose(variants, routing_key=key, rng=random.Random(0)) == traffic.Choice("primary", ("a", "b"))


weights_of_three = (
    st.tuples(st.integers(0, 100), st.integers(0, 100))
    .filter(lambda w: sum(w) <= 100)
    .map(lambda w: (w[0], w[1], 100 - sum(w)))
    .filter(any)
)


@settings(max_examples=200, deadline=None)
@given(key=st.text(max_size=30), weights=weights_of_three, seed=st.integers(0, 10**6))
def test_a_sticky_key_always_lands_on_the_same_variant(key, weights, seed):
    variants = [VariantWeight(name, weight) for name, weight in zip("abc", weights)]
    first = choose(variants, routing_key=key, rng=random.Random(seed)).variant
    assert choose(list(reversed(variants)), routing_key=key, rng=random.Random(seed + 1)).variant == first
    assert weights["abc".index(first)] > 0


def test_the_sticky_hash_is_stable_across_processes_and_releases():
    # blake2b, not hash() (salted per process): if these numbers changed, users would switch variants
    assert [traffic.sticky_bucket(key) for key in ("", "user-1", "Zoë")] == [9876, 3768, 6922]


@settings(max_examples=60, deadline=None)
@given(before=st.integers(0, 100), after=st.integers(0, 100))
def test_raising_a_variants_weight_only_moves_keys_into_it(before, after):
    keys = KEYS[:500]
    low, high = min(before, after), max(before, after)
    old = assignment([("stable", 100 - low, False), ("canary", low, False)], keys)
    new = assignment([("stable", 100 - high, False), ("canary", high, False)], keys)
    moved = {key for key in keys if old[key] != new[key]}
    assert all(new[key] == "canary" for key in moved)


@settings(max_examples=60, deadline=None)
@given(
    weights=st.lists(st.integers(0, 40), min_size=3, max_size=6),
    raised=st.integers(0, 5),
    shift=st.integers(1, 40),
    from_right=st.booleans(),
)
def test_taking_weight_from_a_neighbour_in_name_order_only_moves_keys_into_the_raised_variant(
    weights, raised, shift, from_right
):
    assume(sum(weights) <= 100)
    weights[-1] += 100 - sum(weights)
    raised %= len(weights)
    neighbour = raised + 1 if from_right else raised - 1
    assume(0 <= neighbour < len(weights))
    shift = min(shift, weights[neighbour])
    names = [f"v{i}" for i in range(len(weights))]
    after = list(weights)
    after[raised] += shift
    after[neighbour] -= shift
    keys = KEYS[:500]
    old = assignment([VariantWeight(n, w) for n, w in zip(names, weights)], keys)
    new = assignment([VariantWeight(n, w) for n, w in zip(names, after)], keys)
    assert {new[key] for key in keys if old[key] != new[key]} <= {names[raised]}


# --- canary and rolling rollouts ----------------------------------------------------------------------------


class Traffic:
    """Counters of one variant that grow the way a router would flush them."""

    def __init__(self):
        self.requests, self.errors, self.latency_counts = 0, 0, []

    def serve(self, n, *, errors=0, ms=20.0):
        self.requests += n
        self.errors += errors
        for _ in range(n):
            traffic.observe(self.latency_counts, ms)
        return self


def roundtrip(state):
    return RolloutState.from_json(json.loads(json.dumps(state.to_json())))


PLAN = CanaryPlan(
    steps=[10, 25, 50, 100],
    step_seconds=60,
    min_requests=100,
    guardrails=Guardrails(max_error_rate_increase=0.05, max_p95_latency_ratio=1.5),
)


def test_a_healthy_canary_advances_through_its_steps_and_completes():
    baseline, canary, now = Traffic().serve(1000, errors=10), Traffic(), 1_000.0
    state = canary_start(PLAN, baseline_stats=baseline, canary_stats=canary, now=now)
    assert state.weight == 10
    kinds = []
    for _ in range(3):
        baseline.serve(900, errors=9)
        canary.serve(150, errors=1, ms=22)
        assert canary_next(PLAN, roundtrip(state), baseline, canary, now + 30).kind == HOLD  # step not over yet
        now += 61
        action = canary_next(PLAN, roundtrip(state), baseline, canary, now)
        kinds.append((action.kind, action.weight))
        state = action.state
    assert kinds == [(ADVANCE, 25), (ADVANCE, 50), (COMPLETE, 100)]
    assert state.status == "completed"
    assert canary_next(PLAN, state, baseline, canary.serve(100, errors=100), now + 999).kind == HOLD


def test_a_canary_holds_until_it_has_enough_requests():
    baseline, canary = Traffic().serve(1000), Traffic()
    state = canary_start(PLAN, baseline_stats=baseline, canary_stats=canary, now=0)
    action = canary_next(PLAN, state, baseline, canary.serve(99, errors=99), 10_000)
    assert (action.kind, action.weight, action.reason) == (HOLD, 10, "canary has 99 of 100 requests needed at 10%")


def test_a_canary_whose_error_rate_breaches_the_guardrail_rolls_back_saying_why():
    baseline, canary = Traffic().serve(5000, errors=5000), Traffic()  # history before the step does not count
    state = canary_start(PLAN, baseline_stats=baseline, canary_stats=canary, now=0)
    baseline.serve(1000, errors=10)
    action = canary_next(PLAN, state, baseline, canary.serve(100, errors=12), 5)
    assert (action.kind, action.weight) == (ROLLBACK, 0)
    assert action.reason == "canary error rate 12.0% vs baseline 1.0% (allowed +5.0 points)"
    assert roundtrip(action.state).status == "rolled_back" and action.state.reason == action.reason


def test_a_canary_whose_p95_latency_breaches_the_guardrail_rolls_back():
    baseline, canary = Traffic(), Traffic()
    state = canary_start(PLAN, baseline_stats=baseline, canary_stats=canary, now=0)
    baseline.serve(1000, ms=100)
    action = canary_next(PLAN, state, baseline, canary.serve(200, ms=400), 5)
    assert action.kind == ROLLBACK
    assert action.reason.startswith("canary p95 latency ") and action.reason.endswith("(allowed x1.5)")
    canary_p95, baseline_p95 = (
        float(part.split(" ms")[0]) for part in action.reason.split("latency ")[1].split(" vs baseline ")
    )
    assert canary_p95 == pytest.approx(400, rel=0.2) and baseline_p95 == pytest.approx(100, rel=0.2)


@pytest.mark.parametrize("steps", [[10, 50], [50, 25, 100], [0, 100], []])
def test_a_canary_plan_needs_increasing_steps_ending_at_100(steps):
    with pytest.raises(ValueError, match="Canary steps must be increasing percents ending at 100"):
        CanaryPlan(steps=steps)


def test_plans_survive_json():
    assert CanaryPlan.from_json(json.loads(json.dumps(PLAN.to_json()))) == PLAN
    rolling = RollingPlan(step_percent=20, guardrails=Guardrails(0.01, 2))
    assert RollingPlan.from_json(json.loads(json.dumps(rolling.to_json()))) == rolling
    assert rolling.steps == (20, 40, 60, 80, 100) and RollingPlan(step_percent=30).steps == (30, 60, 90, 100)


ROLLING = RollingPlan(step_percent=25, step_seconds=60, min_requests=50, progress_deadline_seconds=300)


def test_a_rolling_upgrade_gates_every_step_on_ready_servers_and_health():
    old, new = Traffic().serve(1000), Traffic()
    state = rolling_start(ROLLING, old_stats=old, new_stats=new, now=0)
    action = rolling_next(ROLLING, state, old, new, ready_servers=1, replicas=2, now=10)
    assert (action.kind, action.weight, action.reason) == (
        HOLD,
        0,
        "waiting for the new variant's servers: 1 of 2 ready",
    )
    now, state, applied = 20, roundtrip(action.state), []
    while state.status == "running":
        action = rolling_next(ROLLING, state, old, new, ready_servers=2, replicas=2, now=now)
        if action.kind != HOLD:
            applied.append(action.weight)
        old.serve(100 - action.weight)
        new.serve(action.weight)
        state, now = roundtrip(action.state), now + 61
    assert applied == [25, 50, 75, 100]


def test_a_rolling_upgrade_holds_while_a_server_restarts_and_rolls_back_past_the_deadline():
    old, new = Traffic(), Traffic()
    state = rolling_next(
        ROLLING,
        rolling_start(ROLLING, old_stats=old, new_stats=new, now=0),
        old,
        new,
        ready_servers=1,
        replicas=1,
        now=0,
    ).state
    assert state.weight == 25
    for now in (1000, 1299):
        action = rolling_next(ROLLING, state, old, new, ready_servers=0, replicas=1, now=now)
        assert (action.kind, action.weight) == (HOLD, 25)
        state = roundtrip(action.state)
    action = rolling_next(ROLLING, state, old, new, ready_servers=0, replicas=1, now=1300)
    assert (action.kind, action.weight) == (ROLLBACK, 0)
    assert action.reason == "new variant has 0 of 1 servers ready after 300 s"


def test_a_rolling_upgrade_rolls_back_when_the_new_variant_fails_requests():
    old, new = Traffic(), Traffic()
    state = rolling_next(
        ROLLING,
        rolling_start(ROLLING, old_stats=old, new_stats=new, now=0),
        old,
        new,
        ready_servers=1,
        replicas=1,
        now=0,
    ).state
    action = rolling_next(ROLLING, state, old.serve(150), new.serve(50, errors=5), ready_servers=1, replicas=1, now=1)
    assert (action.kind, action.reason) == (
        ROLLBACK,
        "new variant error rate 10.0% vs baseline 0.0% (allowed +5.0 points)",
    )


def test_stats_count_only_what_happened_since_a_mark():
    later = Stats(requests=30, errors=3, latency_counts=histogram([1, 2, 3]))
    assert later.since(Stats(10, 1, histogram([1]))) == Stats(20, 2, histogram([2, 3]))
