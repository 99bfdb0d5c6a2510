"""A deployment's variants replaced as one revision, the write every change of a deployment ends in.

Owns resolving the variants a person or a rollout asks for (traffic.validate_variants, their ModelVersion
rows, which must be ready), and ``revision_apply``: the locked transaction that replaces the Variant rows
(keeping a row, and its server, when only its weight changes), bumps the revision, keeps the previous
variants in ``rollout["history"]`` for a rollback (HISTORY_KEPT of them), audits the change, sends the
webhook, and asks for the model servers to be reconciled. Every revision is also logged in
``rollout["revisions"]`` (REVISIONS_KEPT of them): the history a page shows, which a rollback does not shorten
(``history`` is the stack a rollback pops). serving/services.py (people's changes) and
serving/rollouts.py (a rollout's steps) call it.
"""

from __future__ import annotations

from datetime import datetime

from django.db import transaction
from django.db.models import F
from django.utils import timezone

from accounts.services import audit_record
from core.errors import InvalidInput
from models_registry.models import ModelVersion, RegisteredModel
from models_registry.services import version_require_ready
from serving import tasks, traffic
from serving.models import Deployment, Variant, VariantStats
from serving.selectors import spec_of
from webhooks import events as webhook_events

HISTORY_KEPT = 20  # previous variant sets a deployment remembers for rollbacks
REVISIONS_KEPT = 200  # revisions a deployment's page lists (each change, a rollback or a rollout step is one)

ROLLING_OUT = "rolling_out"


def reconcile_soon() -> None:
    transaction.on_commit(lambda: tasks.reconcile_servers.delay())


# --- Helpers -----------------------------------------------------------------------------------------


def variants_resolve(model: RegisteredModel, variants: list[dict], *, validate: bool = True) -> list[dict]:
    """Check the variants (every problem named) and attach their ModelVersion rows."""
    if validate:
        errors = traffic.validate_variants([spec_public(v) for v in variants])
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
    return [{**spec_public(v), "version_row": versions[v["version"]]} for v in variants]


def spec_public(spec: dict) -> dict:
    return {
        "name": spec["name"],
        "version": spec["version"],
        "weight": int(spec.get("weight", 0)),
        "shadow": bool(spec.get("shadow", False)),
        "replicas": int(spec.get("replicas", 1)),
    }


def variant_create(deployment: Deployment, spec: dict) -> Variant:
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


def revision_apply(
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
            variant = existing.get(name)  # type: ignore[assignment]  # None for a new variant, checked below
            if variant is not None and spec["version_row"].pk == variant.version_id:
                Variant.objects.filter(pk=variant.pk).update(
                    weight=spec["weight"], shadow=spec["shadow"], replicas=spec["replicas"]
                )
            else:
                variant_create(locked, spec)
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
        rollout["revisions"] = revision_logged(
            rollout,
            revision=locked.revision + 1,
            variants=[spec_public(s) for s in resolved],
            actor=actor,
            reason=reason,
            now=now,
        )
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
                "after": [spec_public(s) for s in resolved],
            },
        )
        webhook_events.deployment_changed(deployment=locked, status=status, reason=reason, revision=locked.revision + 1)
    reconcile_soon()
    deployment.refresh_from_db()
    return deployment


def revision_logged(rollout: dict, *, revision: int, variants: list[dict], actor, reason: str, now: datetime) -> list:
    """The deployment's revision log with one more entry: the revision, when, by whom, why, and its variants."""
    entry = {
        "revision": revision,
        "at": now.isoformat(),
        "by": getattr(actor, "username", None),
        "reason": reason,
        "variants": variants,
    }
    return [*rollout.get("revisions", []), entry][-REVISIONS_KEPT:]


def _audit_action(reason: str) -> str:
    for word in ("automatic rollback", "rollback", "promote", "rollout"):
        if reason.startswith(word):
            return "deployment." + word.replace(" ", "_")
    return "deployment.update"
