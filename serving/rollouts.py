"""Canary and rolling rollouts of deployments: their record in ``Deployment.rollout`` and their steps.

Owns starting a rollout (the plan, the first state, the variants at the first step's weights), stopping one
that a person ended, and ``deployments_progress``: one look at every running rollout (traffic.canary_next /
rolling_next, from the Celery task after the servers' reconcile) that holds, steps up, completes, or rolls
back by itself when the new variant breaches a guardrail. Each step is a revision (serving/revisions.py).
"""

from __future__ import annotations

from datetime import datetime

from django.utils import timezone

from core.errors import InvalidInput
from serving import traffic
from serving.models import Deployment
from serving.revisions import ROLLING_OUT, revision_apply, variants_resolve
from serving.selectors import stats_of, variant_specs, variants_of
from serving.servers import READY


def rollout_start(strategy: str, resolved: list[dict], given: dict) -> tuple[dict, list[dict]]:
    """The rollout record of a new canary / rolling deployment, and its variants at the first step's weights."""
    if strategy not in (Deployment.Strategy.CANARY, Deployment.Strategy.ROLLING):
        return {}, resolved
    # The baseline is the variant already carrying most of the traffic; the new one is the other.
    live = sorted((spec for spec in resolved if not spec["shadow"]), key=lambda spec: -spec["weight"])
    if len(live) != 2:
        raise InvalidInput(
            {
                "variants": [
                    f"A {strategy} rollout moves traffic between exactly two variants "
                    f"(the current one and the new one); {len(live)} were given."
                ]
            }
        )
    baseline, new = live[0]["name"], live[1]["name"]
    foreign = sorted(
        set(given)
        & ({"step_percent", "progress_deadline_seconds"} if strategy == Deployment.Strategy.CANARY else {"steps"})
    )
    if foreign:
        raise InvalidInput({"rollout": [f"A {strategy} rollout has no {', '.join(foreign)}."]})
    try:
        if strategy == Deployment.Strategy.CANARY:
            plan = traffic.CanaryPlan.from_json(given)
            state = traffic.canary_start(
                plan, baseline_stats=traffic.Stats(), canary_stats=traffic.Stats(), now=timezone.now().timestamp()
            )
        else:
            plan = traffic.RollingPlan.from_json(given)  # type: ignore[assignment]  # one plan type per strategy
            state = traffic.rolling_start(
                plan,  # type: ignore[arg-type]  # a RollingPlan in this branch
                old_stats=traffic.Stats(),
                new_stats=traffic.Stats(),
                now=timezone.now().timestamp(),
            )
    except (TypeError, ValueError) as exc:
        raise InvalidInput({"rollout": [str(exc)]}) from None
    weights = {baseline: 100 - state.weight, new: state.weight}
    resolved = [{**spec, "weight": weights.get(spec["name"], spec["weight"])} for spec in resolved]
    return {
        "plan": plan.to_json(),
        "state": state.to_json(),
        "baseline": baseline,
        "new": new,
        "message": f"{new} starts at {state.weight}%",
    }, resolved


def rollout_stop(deployment: Deployment, why: str) -> dict:
    """The rollout record of a deployment whose running rollout a person ended (promote, rollback, update)."""
    state = (deployment.rollout or {}).get("state")
    if not state or state.get("status") != traffic.RUNNING:
        return {}
    return {"state": {**state, "status": "stopped", "reason": why}, "message": why}


def deployments_progress(*, now: datetime | None = None) -> list[str]:
    """One look at every running canary or rolling rollout (traffic.canary_next / rolling_next): hold, step
    up, complete, or roll back by itself when the new variant breaches a guardrail. Returns what happened."""
    now = now or timezone.now()
    happened = []
    for deployment in Deployment.objects.filter(status=ROLLING_OUT).select_related("department", "model"):
        rollout = deployment.rollout or {}
        variants = {v.name: v for v in variants_of(deployment)}
        baseline, new = variants.get(rollout.get("baseline")), variants.get(rollout.get("new"))  # type: ignore[arg-type]  # None finds nothing
        if baseline is None or new is None or "state" not in rollout:
            Deployment.objects.filter(pk=deployment.pk, revision=deployment.revision).update(status="active")
            continue
        plan, state = _plan_of(deployment), traffic.RolloutState.from_json(rollout["state"])
        if deployment.strategy == Deployment.Strategy.CANARY:
            action = traffic.canary_next(plan, state, stats_of(baseline), stats_of(new), now.timestamp())
        else:
            ready = int(getattr(getattr(new, "server", None), "status", "") == READY)
            action = traffic.rolling_next(
                plan, state, stats_of(baseline), stats_of(new), ready_servers=ready, replicas=1, now=now.timestamp()
            )
        if action.kind == traffic.HOLD:
            if action.state != state:  # rolling: since when its servers are not ready
                Deployment.objects.filter(pk=deployment.pk, revision=deployment.revision).update(
                    rollout={**rollout, "state": action.state.to_json(), "message": action.reason}
                )
            continue
        weights = {baseline.name: 100 - action.weight, new.name: action.weight}
        specs = [{**spec, "weight": weights.get(spec["name"], spec["weight"])} for spec in variant_specs(deployment)]
        status = {traffic.ROLLBACK: "rolled_back", traffic.COMPLETE: "active"}.get(action.kind, ROLLING_OUT)
        revision_apply(
            deployment,
            variants_resolve(deployment.model, specs, validate=False),
            actor=None,
            reason=f"{'automatic rollback' if action.kind == traffic.ROLLBACK else 'rollout ' + action.kind}: "
            f"{action.reason}",
            status=status,
            rollout_changes={"state": action.state.to_json(), "message": action.reason},
        )
        happened.append(f"{deployment.name}: {action.kind} ({action.reason})")
    return happened


def _plan_of(deployment: Deployment):
    plan = (deployment.rollout or {}).get("plan", {})
    if deployment.strategy == Deployment.Strategy.CANARY:
        return traffic.CanaryPlan.from_json(plan)
    return traffic.RollingPlan.from_json(plan)
