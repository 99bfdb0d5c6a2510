"""Deployments, the writes people make (docs/architecture.md "The serving path", API.md "Deployments and
inference").

Owns creating a deployment (its department, model, strategy, cluster and first variants) and changing one:
its variants (validated, applied as one revision with the previous variants kept for a rollback:
serving/revisions.py), its stickiness, promoting a variant, rolling back. Canary and rolling rollouts (their
start, their steps, automatic rollback) are serving/rollouts.py's, re-exported here as
``deployments_progress`` for the Celery task; adding the routers' counters to VariantStats is
serving/counters.py's. The reads (the routing table the router polls, metrics, views) are
serving/selectors.py's; model servers, one per variant, serving/servers.py's. Every change is audit_record'ed;
the router never writes per request.

Tenancy is accounts.permissions': members of the deployment's department read, call and change it; to anyone
else it does not exist (None here, 404 at the interfaces).
"""

from __future__ import annotations

from django.db import IntegrityError, transaction
from django.db.models import F
from django.utils import timezone

from accounts import permissions
from accounts import selectors as account_selectors
from accounts.models import Department
from accounts.services import audit_record
from clusters.models import Cluster
from core.errors import Conflict, InvalidInput
from models_registry.models import RegisteredModel
from quotas import selectors as quota_selectors
from quotas.models import Quota
from serving.models import Deployment
from serving.revisions import (
    ROLLING_OUT,
    reconcile_soon,
    revision_apply,
    revision_logged,
    spec_public,
    variant_create,
    variants_resolve,
)
from serving.rollouts import deployments_progress as deployments_progress  # re-exported: serving.tasks
from serving.rollouts import rollout_start, rollout_stop
from serving.selectors import variant_specs

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
    resolved = variants_resolve(registered, variants)
    plan, resolved = rollout_start(strategy, resolved, rollout or {})
    status = ROLLING_OUT if plan else "active"
    plan = {
        **plan,
        "revisions": revision_logged(
            {}, revision=1, variants=[spec_public(s) for s in resolved], actor=user, reason="create", now=timezone.now()
        ),
    }
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
                status=status,
            )
            for spec in resolved:
                variant_create(deployment, spec)
            audit_record(
                actor=user,
                action="deployment.create",
                target=f"deployment {name}",
                department=dept,
                data={"strategy": strategy, "variants": [spec_public(s) for s in resolved]},
            )
    except IntegrityError:
        raise InvalidInput({"name": [f"A deployment named {name!r} exists already; choose another name."]}) from None
    reconcile_soon()
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
        resolved = variants_resolve(deployment.model, variants)
        deployment = revision_apply(
            deployment,
            resolved,
            actor=user,
            reason=reason,
            sticky=sticky,
            status="active",
            rollout_changes=rollout_stop(deployment, "stopped by a change of variants"),
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
    return revision_apply(
        deployment,
        variants_resolve(deployment.model, promoted, validate=False),
        actor=user,
        reason=f"promote {variant}",
        status="active",
        rollout_changes=rollout_stop(deployment, f"{variant} promoted by {user.username}"),
    )


def deployment_rollback(*, user, deployment: Deployment, reason: str = "rollback") -> Deployment:
    """Back to the variants of the previous revision (kept in rollout["history"])."""
    history = (deployment.rollout or {}).get("history", [])
    if not history:
        raise Conflict(f"Deployment {deployment.name!r} has no earlier revision to roll back to.")
    previous = history[-1]
    resolved = variants_resolve(deployment.model, previous["variants"], validate=False)
    return revision_apply(
        deployment,
        resolved,
        actor=user,
        reason=f"{reason} to revision {previous['revision']}",
        status="rolled_back",
        rollout_changes=rollout_stop(deployment, f"rolled back by {user.username}"),
        pop_history=True,
    )


# --- Rollouts ----------------------------------------------------------------------------------------


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
    return quota_selectors.default_cluster(department=department)
