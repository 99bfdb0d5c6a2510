"""Deployments (DESIGN.md "Models and serving", API.md "Deployments and inference").

Owns the Deployment, Variant and VariantStats rows and their rules: creating a deployment, changing its
variants (validated by traffic.validate_variants, applied in one transaction with a revision bump, the
previous variants kept in ``rollout["history"]`` for a rollback), promoting a variant, rolling back,
stepping canary and rolling rollouts (traffic.canary_next / rolling_next, with automatic rollback) and
adding the routers' in-memory counters to VariantStats (stats_flush). Model servers, one per variant, are
serving/servers.py's. Every change is audit_record'ed. The router (serving/router.py) reads the routing
table built here and never writes per request.

Tenancy is accounts.permissions': members of the deployment's department read, call and change it; to anyone
else it does not exist (None here, 404 at the interfaces).
"""

from __future__ import annotations

from datetime import datetime

from django.db import IntegrityError, transaction
from django.db.models import F, Prefetch, QuerySet
from django.utils import timezone

from core.errors import Conflict, InvalidInput
from serving import traffic
from serving.models import Deployment, Variant, VariantStats
from models_registry.models import ModelVersion, RegisteredModel
from serving.servers import READY, server_model_name, server_view
from models_registry.services import version_require_ready
from accounts import permissions
from clusters.models import Cluster
from accounts.models import Department
from quotas.models import Quota
from accounts.services import audit_record
from webhooks import events as webhook_events
from serving import tasks

HISTORY_KEPT = 20  # previous variant sets a deployment remembers for rollbacks

ROLLING_OUT = "rolling_out"


# --- Reads -------------------------------------------------------------------------------------------

def deployments_for(*, user, department: str = "") -> QuerySet[Deployment]:
    deployments = permissions.scope(user, Deployment.objects.select_related("department", "model"))
    if department:
        deployments = deployments.filter(department__slug=department)
    return deployments.order_by("name")


def with_variants(deployments: QuerySet[Deployment]) -> QuerySet[Deployment]:
    """For lists: every deployment's variants (version, server, stats) in one query, not one per deployment.
    Only for reading: a deployment changed after this keeps the variants fetched here."""
    return deployments.prefetch_related(
        Prefetch("variants", queryset=Variant.objects.select_related("version", "server", "stats")))


def deployment_get(*, user, name: str) -> Deployment | None:
    """The deployment if the user may see it; None otherwise (answered as 404 alike)."""
    return deployments_for(user=user).filter(name=name).first()


def variants_of(deployment: Deployment) -> list[Variant]:
    """Its variants by name, with version, server and stats (no query if fetched by with_variants)."""
    if "variants" in getattr(deployment, "_prefetched_objects_cache", {}):
        return sorted(deployment.variants.all(), key=lambda v: v.name)
    return list(deployment.variants.select_related("version", "server", "stats").order_by("name"))


def variant_view(variant: Variant) -> dict:
    """A variant as the API shows it: its spec and its server."""
    return {**_spec_of(variant), "server": server_view(variant)}


def variant_specs(deployment: Deployment) -> list[dict]:
    """The variants as the API shows and history keeps them."""
    return [_spec_of(v) for v in deployment.variants.select_related("version").order_by("name")]


def routing_signature(name: str) -> tuple | None:
    """What a router compares once a second to know whether its table is stale: one small query."""
    rows = list(Variant.objects.filter(deployment__name=name).order_by("pk")
                .values_list("deployment__revision", "pk", "server__url", "server__status"))
    if not rows:
        revision = Deployment.objects.filter(name=name).values_list("revision", flat=True).first()
        return None if revision is None else (revision,)
    return (rows[0][0], *(row[1:] for row in rows))


def routing_table(name: str) -> dict | None:
    """Plain data for the router: who may call, how to choose, where each variant's server is."""
    deployment = Deployment.objects.filter(name=name).select_related("model").first()
    if deployment is None:
        return None
    variants = []
    for variant in deployment.variants.select_related("version", "server").order_by("name"):
        server = getattr(variant, "server", None)
        ready = server is not None and server.status == READY and bool(server.url)
        variants.append({
            "id": variant.pk, "name": variant.name, "weight": variant.weight, "shadow": variant.shadow,
            "model_version": variant.version.version, "ready": ready,
            "url": f"{server.url}/v1/models/{server_model_name(variant)}:predict" if ready else "",
        })
    return {"name": deployment.name, "department_id": deployment.department_id, "revision": deployment.revision,
            "sticky": deployment.sticky, "variants": variants, "signature": routing_signature(name)}


def deployment_metrics(*, deployment: Deployment) -> dict:
    """Per variant: requests, errors, latency percentiles, outcomes; the A/B comparison; shadow agreement."""
    variants = variants_of(deployment)
    result = []
    for variant in variants:
        stats = _stats_of(variant)
        counts = stats.latency_counts or [0] * (len(traffic.LATENCY_BUCKETS_MS) + 1)
        row = {
            "variant": variant.name, "model_version": variant.version.version, "weight": variant.weight,
            "shadow": variant.shadow, "requests": stats.requests, "errors": stats.errors,
            "error_rate": round(stats.errors / stats.requests, 4) if stats.requests else None,
            "latency_ms": {f"p{q}": _round(traffic.percentile(counts, q)) for q in (50, 95, 99)},
            "outcomes": {"count": stats.outcomes, "successes": stats.successes,
                         "rate": round(stats.successes / stats.outcomes, 4) if stats.outcomes else None},
            "server": server_view(variant),
        }
        if variant.shadow:
            row["agreement"] = {"compared": stats.shadow_compared, "agreed": stats.shadow_agreed,
                                "rate": round(stats.shadow_agreed / stats.shadow_compared, 4) if stats.shadow_compared else None}
        result.append(row)
    comparison = _comparison([v for v in variants if not v.shadow])
    return {"deployment": deployment.name, "revision": deployment.revision, "strategy": deployment.strategy,
            "status": deployment.status, "variants": result, "comparison": comparison,
            "rollout": rollout_view(deployment)}


def _comparison(variants: list[Variant]) -> dict:
    """The A/B verdict on outcomes between the two answering variants with the most feedback.

    ``p_value`` is the always-valid (sequential) one that ``significant`` is decided on, so that watching the
    dashboard does not inflate false positives; ``z_test_p_value`` is the classic one-look test beside it."""
    arms = sorted(variants, key=lambda v: (-_stats_of(v).outcomes, v.name))[:2]
    if len(arms) < 2:
        return {"p_value": None, "winner": None, "significant": False, "variants": [v.name for v in arms]}
    a, b = sorted(arms, key=lambda v: v.name)
    result = traffic.compare(*(traffic.Outcomes(_stats_of(v).successes, _stats_of(v).outcomes, v.name) for v in (a, b)))
    return {"p_value": round(result.sequential_p_value, 6), "winner": result.winner, "significant": result.significant,
            "z_test_p_value": round(result.p_value, 6), "variants": [a.name, b.name],
            "difference": round(result.difference, 6), "ci": [round(result.ci_low, 6), round(result.ci_high, 6)]}


def rollout_view(deployment: Deployment) -> dict:
    """Where a canary or rolling rollout stands, without the bookkeeping."""
    rollout = deployment.rollout or {}
    view = {key: value for key, value in rollout.items() if key not in ("history", "state")}
    if "state" in rollout:
        state = rollout["state"]
        view["state"] = {key: state.get(key) for key in ("status", "step", "weight", "step_started_at", "reason")}
    view["history"] = [{key: entry.get(key) for key in ("revision", "at", "by", "reason")}
                       for entry in rollout.get("history", [])][-5:]
    return view


# --- Writes ------------------------------------------------------------------------------------------

def deployment_create(*, user, name: str, department: str, model: str, strategy: str, variants: list[dict],
                      sticky: bool = True, rollout: dict | None = None, cluster: str = "") -> Deployment:
    dept = permissions.visible_departments(user).filter(slug=department).first()
    if dept is None or not permissions.can_use(user, dept):
        raise InvalidInput({"department": [f"You are not a member of a department {department!r}."]})
    registered = permissions.scope(user, RegisteredModel.objects.all()).filter(name=model).first()
    if registered is None:
        raise InvalidInput({"model": [f"No model named {model!r} in your departments."]})
    if registered.department_id != dept.pk:
        raise InvalidInput({"model": [f"Model {model!r} belongs to another department than {department!r}."]})
    if strategy not in Deployment.Strategy.values:
        raise InvalidInput({"strategy": [f"Choose one of {', '.join(Deployment.Strategy.values)}."]})
    if strategy == Deployment.Strategy.SHADOW and not any(v.get("shadow") for v in variants):
        raise InvalidInput({"variants": ["A shadow deployment needs a variant with \"shadow\": true."]})
    where = _cluster_of(dept, cluster)
    resolved = _resolve_variants(registered, variants)
    plan, resolved = _rollout_start(strategy, resolved, rollout or {})
    try:
        with transaction.atomic():
            deployment = Deployment.objects.create(
                name=name, department=dept, model=registered, cluster=where, strategy=strategy, sticky=sticky,
                created_by=user, rollout=plan, status=ROLLING_OUT if plan else "active")
            for spec in resolved:
                _variant_create(deployment, spec)
            audit_record(actor=user, action="deployment.create", target=f"deployment {name}", department=dept,
                         data={"strategy": strategy, "variants": [_public(s) for s in resolved]})
    except IntegrityError:
        raise InvalidInput({"name": [f"A deployment named {name!r} exists already; choose another name."]}) from None
    _reconcile_soon()
    return deployment


def deployment_update(*, user, deployment: Deployment, variants: list[dict] | None = None, sticky: bool | None = None,
                      reason: str = "update") -> Deployment:
    """Change the variants (and weights) and/or stickiness in one transaction, with a revision bump."""
    if variants is not None:
        resolved = _resolve_variants(deployment.model, variants)
        deployment = _apply(deployment, resolved, actor=user, reason=reason, sticky=sticky,
                            status="active", rollout_changes=_rollout_stop(deployment, "stopped by a change of variants"))
    elif sticky is not None:
        with transaction.atomic():
            Deployment.objects.filter(pk=deployment.pk).update(sticky=sticky, revision=F("revision") + 1)
            audit_record(actor=user, action="deployment.update", target=f"deployment {deployment.name}",
                         department=deployment.department, data={"sticky": sticky})
        deployment.refresh_from_db()
    return deployment


def deployment_promote(*, user, deployment: Deployment, variant: str) -> Deployment:
    """``variant`` gets 100% of the traffic; the others stay with weight 0 (servers warm for a rollback)."""
    current = variant_specs(deployment)
    if variant not in {spec["name"] for spec in current}:
        raise InvalidInput({"variant": [f"Deployment {deployment.name!r} has no variant {variant!r}; it has "
                                        f"{', '.join(s['name'] for s in current)}."]})
    promoted = [{**spec, "weight": 100 if spec["name"] == variant else 0, "shadow": False} for spec in current]
    return _apply(deployment, _resolve_variants(deployment.model, promoted, validate=False), actor=user,
                  reason=f"promote {variant}", status="active",
                  rollout_changes=_rollout_stop(deployment, f"{variant} promoted by {user.username}"))


def deployment_rollback(*, user, deployment: Deployment, reason: str = "rollback") -> Deployment:
    """Back to the variants of the previous revision (kept in rollout["history"])."""
    history = (deployment.rollout or {}).get("history", [])
    if not history:
        raise Conflict(f"Deployment {deployment.name!r} has no earlier revision to roll back to.")
    previous = history[-1]
    resolved = _resolve_variants(deployment.model, previous["variants"], validate=False)
    return _apply(deployment, resolved, actor=user, reason=f"{reason} to revision {previous['revision']}",
                  status="rolled_back", rollout_changes=_rollout_stop(deployment, f"rolled back by {user.username}"),
                  pop_history=True)


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
            action = traffic.canary_next(plan, state, _stats_of(baseline), _stats_of(new), now.timestamp())
        else:
            ready = int(getattr(getattr(new, "server", None), "status", "") == READY)
            action = traffic.rolling_next(plan, state, _stats_of(baseline), _stats_of(new), ready_servers=ready,
                                          replicas=1, now=now.timestamp())
        if action.kind == traffic.HOLD:
            if action.state != state:  # rolling: since when its servers are not ready
                Deployment.objects.filter(pk=deployment.pk, revision=deployment.revision).update(
                    rollout={**rollout, "state": action.state.to_json(), "message": action.reason})
            continue
        weights = {baseline.name: 100 - action.weight, new.name: action.weight}
        specs = [{**spec, "weight": weights.get(spec["name"], spec["weight"])} for spec in variant_specs(deployment)]
        status = {traffic.ROLLBACK: "rolled_back", traffic.COMPLETE: "active"}.get(action.kind, ROLLING_OUT)
        _apply(deployment, _resolve_variants(deployment.model, specs, validate=False), actor=None,
               reason=f"{'automatic rollback' if action.kind == traffic.ROLLBACK else 'rollout ' + action.kind}: "
                      f"{action.reason}",
               status=status, rollout_changes={"state": action.state.to_json(), "message": action.reason})
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
        raise InvalidInput({"variants": [f"A {strategy} rollout moves traffic between exactly two variants "
                                         f"(the current one and the new one); {len(live)} were given."]})
    baseline, new = live[0]["name"], live[1]["name"]
    foreign = sorted(set(given) & ({"step_percent", "progress_deadline_seconds"} if strategy == Deployment.Strategy.CANARY
                                   else {"steps"}))
    if foreign:
        raise InvalidInput({"rollout": [f"A {strategy} rollout has no {', '.join(foreign)}."]})
    try:
        if strategy == Deployment.Strategy.CANARY:
            plan = traffic.CanaryPlan.from_json(given)
            state = traffic.canary_start(plan, baseline_stats=traffic.Stats(), canary_stats=traffic.Stats(),
                                         now=timezone.now().timestamp())
        else:
            plan = traffic.RollingPlan.from_json(given)
            state = traffic.rolling_start(plan, old_stats=traffic.Stats(), new_stats=traffic.Stats(),
                                          now=timezone.now().timestamp())
    except (TypeError, ValueError) as exc:
        raise InvalidInput({"rollout": [str(exc)]}) from None
    weights = {baseline: 100 - state.weight, new: state.weight}
    resolved = [{**spec, "weight": weights.get(spec["name"], spec["weight"])} for spec in resolved]
    return {"plan": plan.to_json(), "state": state.to_json(), "baseline": baseline, "new": new,
            "message": f"{new} starts at {state.weight}%"}, resolved


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
    quota = (Quota.objects.filter(department=department).select_related("pool__cluster")
             .order_by("pool__cluster_id", "pool__gpu_type").first())
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
    versions = {v.version: v for v in ModelVersion.objects.filter(model=model, version__in=[n for n in numbers if isinstance(n, int)])}
    missing = sorted(str(n) for n in numbers if n not in versions)
    if missing:
        raise InvalidInput({"variants": [f"Model {model.name!r} has no version {', '.join(missing)}."]})
    for number in sorted(n for n in numbers if isinstance(n, int)):
        version_require_ready(versions[number])  # a version still registering (or failed) has nothing to serve
    return [{**_public(v), "version_row": versions[v["version"]]} for v in variants]


def _public(spec: dict) -> dict:
    return {"name": spec["name"], "version": spec["version"], "weight": int(spec.get("weight", 0)),
            "shadow": bool(spec.get("shadow", False)), "replicas": int(spec.get("replicas", 1))}


def _spec_of(variant: Variant) -> dict:
    return {"name": variant.name, "version": variant.version.version, "weight": variant.weight,
            "shadow": variant.shadow, "replicas": variant.replicas}


def _variant_create(deployment: Deployment, spec: dict) -> Variant:
    variant = Variant.objects.create(deployment=deployment, name=spec["name"], version=spec["version_row"],
                                     weight=spec["weight"], shadow=spec["shadow"], replicas=spec["replicas"])
    VariantStats.objects.create(variant=variant)
    return variant


def _apply(deployment: Deployment, resolved: list[dict], *, actor, reason: str, sticky: bool | None = None,
           status: str | None = None, rollout_changes: dict | None = None, pop_history: bool = False,
           now: datetime | None = None) -> Deployment:
    """Replace the deployment's variants with ``resolved`` in one transaction and bump its revision.

    Variants keep their row (and server) when only their weight changes; a new version means a new row
    and so a new server. The deployment row is locked first, so concurrent changes apply one after another.
    """
    now = now or timezone.now()
    with transaction.atomic():
        locked = Deployment.objects.select_for_update().get(pk=deployment.pk)
        existing = {v.name: v for v in locked.variants.select_related("version")}
        before = [_spec_of(v) for v in sorted(existing.values(), key=lambda v: v.name)]
        wanted = {spec["name"]: spec for spec in resolved}
        for name, variant in existing.items():
            spec = wanted.get(name)
            if spec is None or spec["version_row"].pk != variant.version_id:
                variant.delete()
        for name, spec in wanted.items():
            variant = existing.get(name)
            if variant is not None and spec["version_row"].pk == variant.version_id:
                Variant.objects.filter(pk=variant.pk).update(weight=spec["weight"], shadow=spec["shadow"],
                                                             replicas=spec["replicas"])
            else:
                _variant_create(locked, spec)
        rollout = dict(locked.rollout or {})
        history = list(rollout.get("history", []))
        if pop_history:
            history = history[:-1]
        else:
            history = (history + [{"revision": locked.revision, "variants": before, "at": now.isoformat(),
                                   "by": getattr(actor, "username", None), "reason": reason}])[-HISTORY_KEPT:]
        rollout["history"] = history
        rollout.update(rollout_changes or {})
        fields = {"rollout": rollout, "revision": F("revision") + 1}
        if sticky is not None:
            fields["sticky"] = sticky
        if status is not None:
            fields["status"] = status
        Deployment.objects.filter(pk=locked.pk).update(**fields, updated_at=now)
        audit_record(actor=actor, action=_audit_action(reason),
                     target=f"deployment {locked.name}", department=locked.department,
                     data={"reason": reason, "from_revision": locked.revision, "before": before,
                           "after": [_public(s) for s in resolved]})
        webhook_events.deployment_changed(deployment=locked, status=status, reason=reason, revision=locked.revision + 1)
    _reconcile_soon()
    deployment.refresh_from_db()
    return deployment


def _audit_action(reason: str) -> str:
    for word in ("automatic rollback", "rollback", "promote", "rollout"):
        if reason.startswith(word):
            return "deployment." + word.replace(" ", "_")
    return "deployment.update"


def _stats_of(variant: Variant) -> VariantStats:
    try:
        return variant.stats
    except VariantStats.DoesNotExist:
        return VariantStats(variant=variant)


def _round(value) -> float | None:
    return None if value is None else round(float(value), 3)

