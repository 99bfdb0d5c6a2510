"""Deployments, the writes (docs/architecture.md "The serving path", API.md "Deployments and inference").

Owns the rules that change the Deployment, Variant and VariantStats rows: creating a deployment, changing its
variants (validated by traffic.validate_variants, applied in one transaction with a revision bump, the
previous variants kept in ``rollout["history"]`` for a rollback), promoting a variant, rolling back,
stepping canary and rolling rollouts (traffic.canary_next / rolling_next, with automatic rollback) and
adding the routers' in-memory counters to VariantStats (stats_flush). The reads (the routing table the
router polls, metrics, views) are serving/selectors.py's; model servers, one per variant,
serving/servers.py's. Every change is audit_record'ed; the router never writes per request.

Tenancy is accounts.permissions': members of the deployment's department read, call and change it; to anyone
else it does not exist (None here, 404 at the interfaces).
"""

from __future__ import annotations

from datetime import datetime

from django.db import IntegrityError, transaction
from django.db.models import F
from django.utils import timezone

from accounts import permissions
from accounts import selectors as account_selectors
from accounts.models import Department
from accounts.services import audit_record
from clusters.models import Cluster
from core.errors import Conflict, InvalidInput
from models_registry.models import ModelVersion, RegisteredModel
from models_registry.services import version_require_ready
from quotas.models import Quota
from serving import tasks, traffic
from serving.models import Deployment, Variant, VariantStats
from serving.selectors import spec_of, stats_of, variant_specs, variants_of
from serving.servers import READY
from webhooks import events as webhook_events

HISTORY_KEPT = 20  # previous variant sets a deployment remembers for rollbacks

ROLLING_OUT = "rolling_out"


# --- Writes ------------------------------------------------------------------------------------------


def deployment_create(
    *,
    user,
    name: str,
    department: str,
    model: str,
    strategy: str,
    variants: list[dict],
    sticky: bool = True,
    rollout: dict | None = None,
    cluster: str = "",
) -> Deployment:
    errors: dict[str, list] = {}
    dept = account_selectors.department_for_input(user=user, slug=department, errors=errors)
    if dept is None:
        raise InvalidInput(errors)
    registered = permissions.scope(user, RegisteredModel.objects.all()).filter(name=model).first()
    if registered is None:
        raise InvalidInput({"model": [f"No model named {model!r} in your departments."]})
    if registered.department_id != dept.pk:
        raise InvalidInput({"model": [f"Model {model!r} belongs to another department than {department!r}."]})
    if strategy not in Deployment.Strategy.values:
        raise InvalidInput({"strategy": [f"Choose one of {', '.join(Deployment.Strategy.values)}."]})
    if strategy == Deployment.Strategy.SHADOW and not any(v.get("shadow") for v in variants):
        raise InvalidInput({"variants": ['A shadow deployment needs a variant with "shadow": true.']})
    where = _cluster_of(dept, cluster)
    resolved = _resolve_variants(registered, variants)
    plan, resolved = _rollout_start(strategy, resolved, rollout or {})
    try:
        with transaction.atomic():
            deployment = Deployment.objects.create(
                name=name,
                department=dept,
                model=registered,
                cluster=where,
                strategy=strategy,
                sticky=sticky,
                created_by=user,
                rollout=plan,
                status=ROLLING_OUT if plan else "active",
            )
            for spec in resolved:
                _variant_create(deployment, spec)
            audit_record(
                actor=user,
                action="deployment.create",
                target=f"deployment {name}",
                department=dept,
                data={"strategy": strategy, "variants": [_public(s) for s in resolved]},
            )
    except IntegrityError:
        raise InvalidInput({"name": [f"A deployment named {name!r} exists already; choose another name."]}) from None
    _reconcile_soon()
    return deployment


def deployment_update(
    *,
    user,
    deployment: Deployment,
    variants: list[dict] | None = None,
    sticky: bool | None = None,
    reason: str = "update",
) -> Deployment:
    """Change the variants (and weights) and/or stickiness in one transaction, with a revision bump."""
    if variants is not None:
        resolved = _resolve_variants(deployment.model, variants)
        deployment = _apply(
            deployment,
            resolved,
            actor=user,
            reason=reason,
            sticky=sticky,
            status="active",
            rollout_changes=_rollout_stop(deployment, "stopped by a change of variants"),
        )
    elif sticky is not None:
        with transaction.atomic():
            Deployment.objects.filter(pk=deployment.pk).update(sticky=sticky, revision=F("revision") + 1)
            audit_record(
                actor=user,
                action="deployment.update",
                target=f"deployment {deployment.name}",
                department=deployment.department,
                data={"sticky": sticky},
            )
        deployment.refresh_from_db()
    return deployment


def deployment_promote(*, user, deployment: Deployment, variant: str) -> Deployment:
    """``variant`` gets 100% of the traffic; the others stay with weight 0 (servers warm for a rollback)."""
    current = variant_specs(deployment)
    if variant not in {spec["name"] for spec in current}:
        raise InvalidInput(
            {
                "variant": [
                    f"Deployment {deployment.name!r} has no variant {variant!r}; it has "
                    f"{', '.join(s['name'] for s in current)}."
                ]
            }
        )
    promoted = [{**spec, "weight": 100 if spec["name"] == variant else 0, "shadow": False} for spec in current]
    return _apply(
        deployment,
        _resolve_variants(deployment.model, promoted, validate=False),
        actor=user,
        reason=f"promote {variant}",
        status="active",
        rollout_changes=_rollout_stop(deployment, f"{variant} promoted by {user.username}"),
    )


def deployment_rollback(*, user, deployment: Deployment, reason: str = "rollback") -> Deployment:
    """Back to the variants of the previous revision (kept in rollout["history"])."""
    history = (deployment.rollout or {}).get("history", [])
    if not history:
        raise Conflict(f"Deployment {deployment.name!r} has no earlier revision to roll back to.")
    previous = history[-1]
    resolved = _resolve_variants(deployment.model, previous["variants"], validate=False)
    return _apply(
        deployment,
        resolved,
        actor=user,
        reason=f"{reason} to revision {previous['revision']}",
        status="rolled_back",
        rollout_changes=_rollout_stop(deployment, f"rolled back by {user.username}"),
        pop_history=True,
    )


def _rollout_stop(deployment: Deployment, why: str) -> dict:
    """The rollout record of a deployment whose running rollout a person ended (promote, rollback, update)."""
    state = (deployment.rollout or {}).get("state")
    if not state or state.get("status") != traffic.RUNNING:
        return {}
    return {"state": {**state, "status": "stopped", "reason": why}, "message": why}


def stats_flush(*, deltas: dict[int, dict]) -> None:
    """Add the routers' in-memory counters (variant id -> requests, errors, latency_counts, outcomes,
    successes, shadow_compared, shadow_agreed) to VariantStats; variants removed meanwhile are skipped."""
    live = set(Variant.objects.filter(pk__in=list(deltas)).values_list("pk", flat=True))
    for variant_id, delta in deltas.items():
        if variant_id not in live:
            continue
        with transaction.atomic():
            stats, _ = VariantStats.objects.select_for_update().get_or_create(variant_id=variant_id)
            for field in ("requests", "errors", "outcomes", "successes", "shadow_compared", "shadow_agreed"):
                setattr(stats, field, getattr(stats, field) + delta.get(field, 0))
            if any(delta.get("latency_counts") or ()):
                stats.latency_counts = traffic.merge(stats.latency_counts or [], delta["latency_counts"])
            stats.save()


# --- Rollouts ----------------------------------------------------------------------------------------


def deployments_progress(*, now: datetime | None = None) -> list[str]:
    """One look at every running canary or rolling rollout (traffic.canary_next / rolling_next): hold, step
    up, complete, or roll back by itself when the new variant breaches a guardrail. Returns what happened."""
    now = now or timezone.now()
    happened = []
    for deployment in Deployment.objects.filter(status=ROLLING_OUT).select_related("department", "model"):
        rollout = deployment.rollout or {}
        variants = {v.name: v for v in variants_of(deployment)}
        baseline, new = variants.get(rollout.get("baseline")), variants.get(rollout.get("new"))
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
        _apply(
            deployment,
            _resolve_variants(deployment.model, specs, validate=False),
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


def _rollout_start(strategy: str, resolved: list[dict], given: dict) -> tuple[dict, list[dict]]:
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
            plan = traffic.RollingPlan.from_json(given)
            state = traffic.rolling_start(
                plan, old_stats=traffic.Stats(), new_stats=traffic.Stats(), now=timezone.now().timestamp()
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


def _cluster_of(department: Department, name: str) -> Cluster | None:
    """The named cluster, or the department's default one as for jobs (jobs/submission.py): the oldest
    cluster it has quota on. None (local model servers) when it has none."""
    if name:
        cluster = Cluster.objects.filter(name=name).first()
        if cluster is None:
            raise InvalidInput({"cluster": [f"No cluster called {name!r}; see GET /api/v1/clusters/."]})
        if not Quota.objects.filter(department=department, pool__cluster=cluster).exists():
            raise InvalidInput({"cluster": [f"Department {department.slug} has no quota on cluster {name}."]})
        return cluster
    quota = (
        Quota.objects.filter(department=department)
        .select_related("pool__cluster")
        .order_by("pool__cluster_id", "pool__gpu_type")
        .first()
    )
    return quota.pool.cluster if quota is not None else None


def _reconcile_soon() -> None:
    transaction.on_commit(lambda: tasks.reconcile_servers.delay())


# --- Helpers -----------------------------------------------------------------------------------------


def _resolve_variants(model: RegisteredModel, variants: list[dict], *, validate: bool = True) -> list[dict]:
    """Check the variants (every problem named) and attach their ModelVersion rows."""
    if validate:
        errors = traffic.validate_variants([_public(v) for v in variants])
        if errors:
            raise InvalidInput(errors)
    numbers = {v.get("version") for v in variants}
    versions = {
        v.version: v
        for v in ModelVersion.objects.filter(model=model, version__in=[n for n in numbers if isinstance(n, int)])
    }
    missing = sorted(str(n) for n in numbers if n not in versions)
    if missing:
        raise InvalidInput({"variants": [f"Model {model.name!r} has no version {', '.join(missing)}."]})
    for number in sorted(n for n in numbers if isinstance(n, int)):
        version_require_ready(versions[number])  # a version still registering (or failed) has nothing to serve
    return [{**_public(v), "version_row": versions[v["version"]]} for v in variants]


def _public(spec: dict) -> dict:
    return {
        "name": spec["name"],
        "version": spec["version"],
        "weight": int(spec.get("weight", 0)),
        "shadow": bool(spec.get("shadow", False)),
        "replicas": int(spec.get("replicas", 1)),
    }


def _variant_create(deployment: Deployment, spec: dict) -> Variant:
    variant = Variant.objects.create(
        deployment=deployment,
        name=spec["name"],
        version=spec["version_row"],
        weight=spec["weight"],
        shadow=spec["shadow"],
        replicas=spec["replicas"],
    )
    VariantStats.objects.create(variant=variant)
    return variant


def _apply(
    deployment: Deployment,
    resolved: list[dict],
    *,
    actor,
    reason: str,
    sticky: bool | None = None,
    status: str | None = None,
    rollout_changes: dict | None = None,
    pop_history: bool = False,
    now: datetime | None = None,
) -> Deployment:
    """Replace the deployment's variants with ``resolved`` in one transaction and bump its revision.

    Variants keep their row (and server) when only their weight changes; a new version means a new row
    and so a new server. The deployment row is locked first, so concurrent changes apply one after another.
    """
    now = now or timezone.now()
    with transaction.atomic():
        locked = Deployment.objects.select_for_update().get(pk=deployment.pk)
        existing = {v.name: v for v in locked.variants.select_related("version")}
        before = [spec_of(v) for v in sorted(existing.values(), key=lambda v: v.name)]
        wanted = {spec["name"]: spec for spec in resolved}
        for name, variant in existing.items():
            spec = wanted.get(name)
            if spec is None or spec["version_row"].pk != variant.version_id:
                variant.delete()
        for name, spec in wanted.items():
            variant = existing.get(name)
            if variant is not None and spec["version_row"].pk == variant.version_id:
                Variant.objects.filter(pk=variant.pk).update(
                    weight=spec["weight"], shadow=spec["shadow"], replicas=spec["replicas"]
                )
            else:
                _variant_create(locked, spec)
        rollout = dict(locked.rollout or {})
        history = list(rollout.get("history", []))
        if pop_history:
            history = history[:-1]
        else:
            history = (
                history
                + [
                    {
                        "revision": locked.revision,
                        "variants": before,
                        "at": now.isoformat(),
                        "by": getattr(actor, "username", None),
                        "reason": reason,
                    }
                ]
            )[-HISTORY_KEPT:]
        rollout["history"] = history
        rollout.update(rollout_changes or {})
        fields = {"rollout": rollout, "revision": F("revision") + 1}
        if sticky is not None:
            fields["sticky"] = sticky
        if status is not None:
            fields["status"] = status
        Deployment.objects.filter(pk=locked.pk).update(**fields, updated_at=now)
        audit_record(
            actor=actor,
            action=_audit_action(reason),
            target=f"deployment {locked.name}",
            department=locked.department,
            data={
                "reason": reason,
                "from_revision": locked.revision,
                "before": before,
                "after": [_public(s) for s in resolved],
            },
        )
        webhook_events.deployment_changed(deployment=locked, status=status, reason=reason, revision=locked.revision + 1)
    _reconcile_soon()
    deployment.refresh_from_db()
    return deployment


def _audit_action(reason: str) -> str:
    for word in ("automatic rollback", "rollback", "promote", "rollout"):
        if reason.startswith(word):
            return "deployment." + word.replace(" ", "_")
    return "deployment.update"
