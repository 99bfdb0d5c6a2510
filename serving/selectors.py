"""Deployments, the reads (docs/architecture.md "The serving path", API.md "Deployments and inference").

Owns what is read of the Deployment, Variant and VariantStats rows: the deployments a user may see, their
variants as the API shows them, the routing table and its signature that the router (serving/router.py)
polls, the metrics with the A/B comparison (traffic.compare) and where a rollout stands. The writes are
serving/services.py's; model servers, one per variant, serving/servers.py's.

Tenancy is accounts.permissions': members of the deployment's department read, call and change it; to anyone
else it does not exist (None here, 404 at the interfaces).
"""

from __future__ import annotations

from django.db.models import Prefetch, QuerySet
from django.utils.dateparse import parse_datetime

from accounts import permissions
from clusters.models import Cluster
from serving import traffic
from serving.backends.manifests import service_name
from serving.models import Deployment, ModelServer, Variant, VariantStats

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
        Prefetch("variants", queryset=Variant.objects.select_related("version", "server", "stats"))
    )


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
    return {**spec_of(variant), "server": server_view(variant)}


def variant_specs(deployment: Deployment) -> list[dict]:
    """The variants as the API shows and history keeps them."""
    return [spec_of(v) for v in deployment.variants.select_related("version").order_by("name")]


def routing_signature(name: str) -> tuple | None:
    """What a router compares once a second to know whether its table is stale: one small query."""
    rows = list(
        Variant.objects.filter(deployment__name=name)
        .order_by("pk")
        .values_list("deployment__revision", "pk", "server__url", "server__status")
    )
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
        ready = server is not None and server.status == ModelServer.Status.READY and bool(server.url)
        variants.append(
            {
                "id": variant.pk,
                "name": variant.name,
                "weight": variant.weight,
                "shadow": variant.shadow,
                "model_version": variant.version.version,
                "ready": ready,
                "url": f"{server.url}/v1/models/{server_model_name(variant)}:predict" if ready else "",
            }
        )
    return {
        "name": deployment.name,
        "department_id": deployment.department_id,
        "revision": deployment.revision,
        "sticky": deployment.sticky,
        "variants": variants,
        "signature": routing_signature(name),
    }


def deployment_metrics(*, deployment: Deployment) -> dict:
    """Per variant: requests, errors, latency percentiles, outcomes; the A/B comparison; shadow agreement."""
    variants = variants_of(deployment)
    result = []
    for variant in variants:
        stats = stats_of(variant)
        counts = stats.latency_counts or [0] * (len(traffic.LATENCY_BUCKETS_MS) + 1)
        row = {
            "variant": variant.name,
            "model_version": variant.version.version,
            "weight": variant.weight,
            "shadow": variant.shadow,
            "requests": stats.requests,
            "errors": stats.errors,
            "error_rate": round(stats.errors / stats.requests, 4) if stats.requests else None,
            "latency_ms": {f"p{q}": _round(traffic.percentile(counts, q)) for q in (50, 95, 99)},
            "outcomes": {
                "count": stats.outcomes,
                "successes": stats.successes,
                "rate": round(stats.successes / stats.outcomes, 4) if stats.outcomes else None,
            },
            "server": server_view(variant),
        }
        if variant.shadow:
            row["agreement"] = {
                "compared": stats.shadow_compared,
                "agreed": stats.shadow_agreed,
                "rate": round(stats.shadow_agreed / stats.shadow_compared, 4) if stats.shadow_compared else None,
            }
        result.append(row)
    comparison = _comparison([v for v in variants if not v.shadow])
    return {
        "deployment": deployment.name,
        "revision": deployment.revision,
        "strategy": deployment.strategy,
        "status": deployment.status,
        "variants": result,
        "comparison": comparison,
        "rollout": rollout_view(deployment),
    }


def _comparison(variants: list[Variant]) -> dict:
    """The A/B verdict on outcomes between the two answering variants with the most feedback.

    ``p_value`` is the always-valid (sequential) one that ``significant`` is decided on, so that watching the
    dashboard does not inflate false positives; ``z_test_p_value`` is the classic one-look test beside it."""
    arms = sorted(variants, key=lambda v: (-stats_of(v).outcomes, v.name))[:2]
    if len(arms) < 2:
        return {"p_value": None, "winner": None, "significant": False, "variants": [v.name for v in arms]}
    a, b = sorted(arms, key=lambda v: v.name)
    result = traffic.compare(*(traffic.Outcomes(stats_of(v).successes, stats_of(v).outcomes, v.name) for v in (a, b)))
    return {
        "p_value": round(result.sequential_p_value, 6),
        "winner": result.winner,
        "significant": result.significant,
        "z_test_p_value": round(result.p_value, 6),
        "variants": [a.name, b.name],
        "difference": round(result.difference, 6),
        "ci": [round(result.ci_low, 6), round(result.ci_high, 6)],
    }


def rollout_view(deployment: Deployment) -> dict:
    """Where a canary or rolling rollout stands, without the bookkeeping."""
    rollout = deployment.rollout or {}
    view = {key: value for key, value in rollout.items() if key not in ("history", "state", "revisions")}
    if "state" in rollout:
        state = rollout["state"]
        view["state"] = {key: state.get(key) for key in ("status", "step", "weight", "step_started_at", "reason")}
    view["history"] = [
        {key: entry.get(key) for key in ("revision", "at", "by", "reason")} for entry in rollout.get("history", [])
    ][-5:]
    return view


def deployment_revisions(deployment: Deployment) -> list[dict]:
    """Every revision of the deployment, newest first: number, when, by whom, why, and its variants (the log
    serving.revisions keeps; a rollback adds an entry, it never removes one)."""
    return [
        {**entry, "at": parse_datetime(entry.get("at") or "")}
        for entry in reversed((deployment.rollout or {}).get("revisions", []))
    ]


# --- Helpers -----------------------------------------------------------------------------------------


def spec_of(variant: Variant) -> dict:
    return {
        "name": variant.name,
        "version": variant.version.version,
        "weight": variant.weight,
        "shadow": variant.shadow,
        "replicas": variant.replicas,
    }


def stats_of(variant: Variant) -> VariantStats:
    try:
        return variant.stats
    except VariantStats.DoesNotExist:
        return VariantStats(variant=variant)


def _round(value) -> float | None:
    return None if value is None else round(float(value), 3)


def server_model_name(variant: Variant) -> str:
    """The name the model server serves it under: /v1/models/<name>:predict."""
    cluster = variant.deployment.cluster
    if cluster is not None and cluster.backend == Cluster.Backend.KUBERNETES:
        # KServe serves a model under its InferenceService's name, one per variant.
        return service_name(variant.deployment.name, variant.name, variant.pk)
    return variant.version.model.name


def server_view(variant: Variant) -> dict:
    server = getattr(variant, "server", None)
    if server is None:
        return {"status": "stopped", "restarts": 0, "message": "", "url": ""}
    return {"status": server.status, "restarts": server.restarts, "message": server.message, "url": server.url}
