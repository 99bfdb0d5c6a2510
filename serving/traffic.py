"""Traffic between a deployment's variants: variant choice, sticky hashing, rollout steps and guardrails.
Pure: no Django, no I/O; the clock (``now``, seconds since the epoch) and randomness (``rng``) are passed in
(docs/architecture.md "The stack", "Models and serving").

Weights are integer percents. Rates are fractions (0.05 = 5 %). Rollout plans and states are dataclasses with
``to_json()`` / ``from_json()`` so that they live in ``Deployment.rollout``. Stats arguments may be anything with
``requests``, ``errors`` and ``latency_counts`` (a ``VariantStats`` row, or ``Stats`` here).

Latency histograms, A/B statistics and shadow agreement are serving/ab_stats.py's; their names are re-exported
here (``traffic.percentile``, ``traffic.compare``, ``traffic.agree``, ...), as callers have always used them.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import Any, NamedTuple

from serving.ab_stats import HISTOGRAM_SIZE as HISTOGRAM_SIZE
from serving.ab_stats import LATENCY_BUCKETS_MS as LATENCY_BUCKETS_MS
from serving.ab_stats import Comparison as Comparison
from serving.ab_stats import Outcomes as Outcomes
from serving.ab_stats import agree as agree
from serving.ab_stats import as_histogram as as_histogram
from serving.ab_stats import compare as compare
from serving.ab_stats import empty_histogram as empty_histogram
from serving.ab_stats import latency_summary as latency_summary
from serving.ab_stats import merge as merge
from serving.ab_stats import observe as observe
from serving.ab_stats import percentile as percentile
from serving.ab_stats import subtract as subtract

MAX_VARIANTS = 10
STICKY_BUCKETS = 10_000
_SLUG = re.compile(r"^[-a-zA-Z0-9_]{1,40}$")  # Variant.name is a SlugField(max_length=40)


# --- Variant choice ---------------------------------------------------------------------------------------


class VariantWeight(NamedTuple):
    name: str
    weight: int
    shadow: bool = False


@dataclass(frozen=True)
class Choice:
    variant: str  # answers the request
    shadows: tuple[str, ...] = ()  # get a copy of the request; their answers are only compared


def _fields(variant: Any) -> tuple[Any, Any, Any]:
    if isinstance(variant, dict):
        return variant.get("name"), variant.get("weight", 0), variant.get("shadow", False)
    if isinstance(variant, tuple) and not hasattr(variant, "name"):
        return VariantWeight(*variant)
    return variant.name, variant.weight, variant.shadow


def validate_variants(variants: Iterable[Any]) -> dict[str, list[str]]:
    """Messages per field (``variants``, ``name``, ``weight``) for a deployment's variants; empty when valid.

    Each variant is a ``VariantWeight``, a ``(name, weight, shadow)`` tuple, a dict as in the API or a row."""
    errors: dict[str, list[str]] = {}

    def add(key: str, message: str) -> None:
        errors.setdefault(key, []).append(message)

    rows = [_fields(v) for v in variants]
    if not rows:
        add("variants", "A deployment needs at least one variant.")
    if len(rows) > MAX_VARIANTS:
        add("variants", f"A deployment has at most {MAX_VARIANTS} variants, not {len(rows)}.")
    seen: set[str] = set()
    total = 0
    for name, weight, shadow in rows:
        if not isinstance(name, str) or not _SLUG.match(name):
            add("name", f"Variant name {name!r} must be 1 to 40 letters, digits, '-' or '_'.")
        elif name in seen:
            add("name", f"Variant name {name!r} is used twice.")
        seen.add(name)
        if isinstance(weight, bool) or not isinstance(weight, int) or not 0 <= weight <= 100:
            add("weight", f"Variant {name!r}: weight must be an integer percent from 0 to 100, not {weight!r}.")
        elif shadow and weight:
            add("weight", f"Variant {name!r} is a shadow: its weight must be 0, not {weight}.")
        elif not shadow:
            total += weight
    if rows and all(shadow for _, _, shadow in rows):
        add("variants", "At least one variant must not be a shadow: shadows only get copies of requests.")
    if "weight" not in errors and any(not shadow for _, _, shadow in rows) and total != 100:
        add("weight", f"The weights of the variants that answer must sum to 100, not {total}.")
    return errors


def sticky_bucket(routing_key: str) -> int:
    """0 .. STICKY_BUCKETS-1; stable across processes and releases (unlike hash(), which is salted)."""
    digest = hashlib.blake2b(routing_key.encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") % STICKY_BUCKETS


def choose(variants: Iterable[Any], *, routing_key: str | None = None, sticky: bool = True, rng: Any) -> Choice:
    """The variant that answers a request, and the shadows that get a copy.

    The buckets lie over the cumulative weights in variant-name order, so a key keeps its variant while the
    weights stay, and when weight moves between neighbours in name order (always so with two variants) only
    keys of the variant that lost weight move, into the one that gained it. Without a key (or not sticky):
    weighted random with ``rng`` (anything with ``random()``, e.g. ``random.Random``)."""
    rows = sorted(_fields(v) for v in variants)
    answering = [(name, weight) for name, weight, shadow in rows if not shadow and weight > 0]
    total = sum(weight for _, weight in answering)
    if not total:
        raise ValueError("No variant has a weight above 0: there is nobody to answer.")
    if sticky and routing_key is not None:
        bucket = sticky_bucket(routing_key)
    else:
        bucket = min(int(rng.random() * STICKY_BUCKETS), STICKY_BUCKETS - 1)
    variant, cumulative = answering[-1][0], 0
    for name, weight in answering:
        cumulative += weight
        if bucket * total < cumulative * STICKY_BUCKETS:
            variant = name
            break
    return Choice(variant=variant, shadows=tuple(name for name, _, shadow in rows if shadow))


# --- Rollouts: canary and rolling -------------------------------------------------------------------------


@dataclass(frozen=True)
class Stats:
    requests: int = 0
    errors: int = 0
    latency_counts: list[int] = field(default_factory=list)

    @classmethod
    def of(cls, stats: Any) -> Stats:
        if stats is None:  # a variant without counters yet
            return cls(latency_counts=empty_histogram())
        return cls(int(stats.requests), int(stats.errors), as_histogram(stats.latency_counts))

    def since(self, earlier: Stats) -> Stats:
        return Stats(
            max(self.requests - earlier.requests, 0),
            max(self.errors - earlier.errors, 0),
            subtract(self.latency_counts, earlier.latency_counts),
        )

    @property
    def error_rate(self) -> float:
        return self.errors / self.requests if self.requests else 0.0


@dataclass(frozen=True)
class Guardrails:
    max_error_rate_increase: float = 0.05  # the new variant's error rate may exceed the baseline's by 5 points
    max_p95_latency_ratio: float = 1.5  # and its p95 latency may be at most 1.5 x the baseline's

    def breach(self, baseline: Stats, new: Stats, *, label: str) -> str | None:
        """Why ``new`` is worse than allowed, naming the numbers; None when it is within the guardrails."""
        if new.error_rate > baseline.error_rate + self.max_error_rate_increase:
            return (
                f"{label} error rate {new.error_rate:.1%} vs baseline {baseline.error_rate:.1%} "
                f"(allowed +{self.max_error_rate_increase * 100:.1f} points)"
            )
        new_p95, baseline_p95 = percentile(new.latency_counts, 95), percentile(baseline.latency_counts, 95)
        if new_p95 is not None and baseline_p95 and new_p95 > baseline_p95 * self.max_p95_latency_ratio:
            return (
                f"{label} p95 latency {new_p95:.1f} ms vs baseline {baseline_p95:.1f} ms "
                f"(allowed x{self.max_p95_latency_ratio:g})"
            )
        return None


def _check_common(step_seconds: float, min_requests: int, guardrails: Guardrails) -> None:
    if step_seconds < 0 or min_requests < 0:
        raise ValueError("step_seconds and min_requests cannot be negative.")
    if guardrails.max_error_rate_increase < 0 or guardrails.max_p95_latency_ratio < 1:
        raise ValueError("Guardrails allow an error-rate increase >= 0 and a p95 latency ratio >= 1.")


@dataclass(frozen=True)
class CanaryPlan:
    steps: tuple[int, ...] = (10, 25, 50, 100)  # the canary's weight at each step
    step_seconds: float = 300  # each step lasts at least this long
    min_requests: int = 100  # canary requests per step before it is judged
    guardrails: Guardrails = Guardrails()

    def __post_init__(self) -> None:
        steps = tuple(self.steps)
        object.__setattr__(self, "steps", steps)
        if not steps or steps[-1] != 100 or any(not 0 < s <= 100 for s in steps) or list(steps) != sorted(set(steps)):
            raise ValueError(f"Canary steps must be increasing percents ending at 100, not {list(steps)}.")
        _check_common(self.step_seconds, self.min_requests, self.guardrails)

    def to_json(self) -> dict[str, Any]:
        return asdict(self) | {"steps": list(self.steps)}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> CanaryPlan:
        return cls(**(data | {"guardrails": Guardrails(**data.get("guardrails", {}))}))


@dataclass(frozen=True)
class RollingPlan:
    step_percent: int = 25  # the new variant's weight grows by this much per step
    step_seconds: float = 120
    min_requests: int = 50  # requests to the new variant per step before it is judged
    progress_deadline_seconds: float = 600  # servers not all ready for this long: roll back
    guardrails: Guardrails = Guardrails()

    def __post_init__(self) -> None:
        if not 0 < self.step_percent <= 100:
            raise ValueError(f"step_percent must be from 1 to 100, not {self.step_percent}.")
        _check_common(self.step_seconds, self.min_requests, self.guardrails)

    @property
    def steps(self) -> tuple[int, ...]:
        return tuple(range(self.step_percent, 100, self.step_percent)) + (100,)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> RollingPlan:
        return cls(**(data | {"guardrails": Guardrails(**data.get("guardrails", {}))}))


RUNNING, COMPLETED, ROLLED_BACK = "running", "completed", "rolled_back"
HOLD, ADVANCE, COMPLETE, ROLLBACK = "hold", "advance", "complete", "rollback"


@dataclass(frozen=True)
class RolloutState:
    """Where a rollout stands; the counters at the start of the step, so each step is judged on its own traffic."""

    step: int  # index into the plan's steps; -1: not started (rolling waits for ready servers)
    weight: int  # the new variant's weight now; the baseline has 100 - weight
    step_started_at: float
    status: str = RUNNING
    baseline_mark: Stats = Stats()
    new_mark: Stats = Stats()
    reason: str = ""
    unready_since: float | None = None  # rolling: since when the new variant has had servers not ready

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> RolloutState:
        return cls(**(data | {"baseline_mark": Stats(**data["baseline_mark"]), "new_mark": Stats(**data["new_mark"])}))


@dataclass(frozen=True)
class RolloutAction:
    kind: str  # hold | advance | complete | rollback
    weight: int  # the new variant's weight to apply (the baseline gets 100 - weight)
    state: RolloutState  # to store in Deployment.rollout
    reason: str


def _start(steps: Sequence[int], step: int, baseline_stats: Any, new_stats: Any, now: float) -> RolloutState:
    return RolloutState(
        step=step,
        weight=steps[step] if step >= 0 else 0,
        step_started_at=now,
        baseline_mark=Stats.of(baseline_stats),
        new_mark=Stats.of(new_stats),
    )


def canary_start(plan: CanaryPlan, *, baseline_stats: Any, canary_stats: Any, now: float) -> RolloutState:
    """The canary begins at the first step's weight."""
    return _start(plan.steps, 0, baseline_stats, canary_stats, now)


def rolling_start(plan: RollingPlan, *, old_stats: Any, new_stats: Any, now: float) -> RolloutState:
    """The new variant begins at weight 0 and gets its first share once its servers are ready."""
    return _start(plan.steps, -1, old_stats, new_stats, now)


def _step_next(
    plan: CanaryPlan | RollingPlan,
    steps: Sequence[int],
    state: RolloutState,
    baseline_stats: Any,
    new_stats: Any,
    now: float,
    label: str,
) -> RolloutAction:
    if state.status != RUNNING:
        return RolloutAction(HOLD, state.weight, state, f"the rollout is {state.status.replace('_', ' ')}")
    baseline = Stats.of(baseline_stats).since(state.baseline_mark)
    new = Stats.of(new_stats).since(state.new_mark)
    if new.requests < plan.min_requests:
        return RolloutAction(
            HOLD,
            state.weight,
            state,
            f"{label} has {new.requests} of {plan.min_requests} requests needed at {state.weight}%",
        )
    breach = plan.guardrails.breach(baseline, new, label=label)
    if breach:
        done = replace(state, status=ROLLED_BACK, weight=0, reason=breach, step_started_at=now)
        return RolloutAction(ROLLBACK, 0, done, breach)
    waited = now - state.step_started_at
    if waited < plan.step_seconds:
        return RolloutAction(
            HOLD,
            state.weight,
            state,
            f"{label} healthy at {state.weight}%; next step in {plan.step_seconds - waited:.0f} s",
        )
    return _advance(steps, state, baseline_stats, new_stats, now, label)


def _advance(
    steps: Sequence[int], state: RolloutState, baseline_stats: Any, new_stats: Any, now: float, label: str
) -> RolloutAction:
    following = _start(steps, state.step + 1, baseline_stats, new_stats, now)
    if following.weight == 100:
        reason = f"{label} healthy at every step: it takes all traffic"
        return RolloutAction(COMPLETE, 100, replace(following, status=COMPLETED, reason=reason), reason)
    reason = f"{label} healthy at {state.weight}%: now {following.weight}%"
    return RolloutAction(ADVANCE, following.weight, replace(following, reason=reason), reason)


def canary_next(
    plan: CanaryPlan, state: RolloutState, baseline_stats: Any, canary_stats: Any, now: float
) -> RolloutAction:
    """Hold, advance to the next weight, complete (100 %), or roll back when a guardrail is breached.

    A step is judged once the canary has ``min_requests`` requests in it; it rolls back as soon as a guardrail
    is breached, and advances once the step has lasted ``step_seconds`` within the guardrails."""
    return _step_next(plan, plan.steps, state, baseline_stats, canary_stats, now, "canary")


def rolling_next(
    plan: RollingPlan,
    state: RolloutState,
    old_stats: Any,
    new_stats: Any,
    *,
    ready_servers: int,
    replicas: int,
    now: float,
) -> RolloutAction:
    """Move traffic from the old variant to the new one a step at a time, each step gated on the new variant's
    servers being ready (all ``replicas``) and its error rate and latency staying within the guardrails."""
    if state.status == RUNNING and ready_servers < replicas:
        since = state.unready_since if state.unready_since is not None else now
        if now - since >= plan.progress_deadline_seconds:
            reason = f"new variant has {ready_servers} of {replicas} servers ready after {now - since:.0f} s"
            done = replace(state, status=ROLLED_BACK, weight=0, reason=reason, step_started_at=now)
            return RolloutAction(ROLLBACK, 0, done, reason)
        reason = f"waiting for the new variant's servers: {ready_servers} of {replicas} ready"
        return RolloutAction(HOLD, state.weight, replace(state, unready_since=since), reason)
    if state.unready_since is not None:
        state = replace(state, unready_since=None)
    if state.status == RUNNING and state.step < 0:
        return _advance(plan.steps, state, old_stats, new_stats, now, "new variant")
    return _step_next(plan, plan.steps, state, old_stats, new_stats, now, "new variant")
