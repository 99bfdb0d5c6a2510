"""Webhooks: registering them, emitting events to them, and delivering each event.

- A department's webhooks are changed by its dept_admins and platform admins (audited); its members may
  read them and their delivery log, never the secret, which is shown once on creation and on rotation.
- URLs are http(s), without credentials, and (unless settings.PORTAL_WEBHOOK_ALLOW_PRIVATE) never to a
  loopback, private or link-local address: checked on saving and again at each delivery (outbound.py).
- ``event_emit`` writes one Delivery per matching active webhook inside the caller's transaction: the row is
  the delivery's place in the outbox (outbox.py), which beat's task sends from, retries included; once the
  transaction commits a task also makes the first attempt at once. A change rolled back emits nothing.
"""

from __future__ import annotations

import uuid
from datetime import datetime

from django.conf import settings
from django.core.exceptions import PermissionDenied
from django.db import IntegrityError, transaction
from django.utils import timezone
from django.utils.translation import gettext as _

from accounts import permissions
from accounts.models import Department
from core.errors import Conflict, InvalidInput
from webhooks import outbound, signing, tasks
from webhooks.models import Delivery, Webhook
from webhooks.outbox import PING

EVENTS = (
    "job.succeeded",
    "job.failed",
    "job.cancelled",
    "model.version_registered",
    "model.alias_moved",
    "deployment.rolled_back",
)
MAX_WEBHOOKS_PER_DEPARTMENT = 50


def _audit(**fields) -> None:
    # Imported here: quotas.services imports jobs.transitions, which emits events through this module.
    from accounts.services import audit_record

    audit_record(**fields)


def require_manager(actor, department: Department) -> None:
    if not permissions.can_manage(actor, department):
        raise PermissionDenied(
            _("Only admins of %(department)s can change its webhooks.") % {"department": department.slug}
        )


def _secret() -> str:
    return signing.new_secret()


# --- Registering ----------------------------------------------------------------------------


def _check(*, department: Department, values: dict, errors: dict, webhook: Webhook | None = None) -> dict:
    """Each given field checked on its own, so that one bad field does not hide the others' problems."""
    clean = {}
    if "name" in values and "name" not in errors:
        name = (values["name"] or "").strip()
        taken = Webhook.objects.filter(department=department, name=name).exclude(pk=getattr(webhook, "pk", None))
        if not name:
            errors["name"] = [_("Give the webhook a name, e.g. the system it notifies.")]
        elif taken.exists():
            errors["name"] = [
                _("%(department)s already has a webhook called %(name)s; choose another name.")
                % {"department": department.slug, "name": name}
            ]
        clean["name"] = name
    if "url" in values and "url" not in errors:
        url = (values["url"] or "").strip()
        problems = outbound.destination_problems(url, allow_private=settings.PORTAL_WEBHOOK_ALLOW_PRIVATE)
        if problems:
            errors["url"] = problems
        clean["url"] = url
    if "events" in values and "events" not in errors:
        events = values["events"]
        unknown = [event for event in events if event not in EVENTS]
        if unknown:
            errors["events"] = [
                _("Unknown event %(event)s; choose from: %(events)s.")
                % {"event": repr(event), "events": ", ".join(EVENTS)}
                for event in unknown
            ]
        elif not events:
            errors["events"] = [_("Choose at least one event to send.")]
        clean["events"] = [event for event in EVENTS if event in events]
    if "active" in values and "active" not in errors:
        clean["active"] = bool(values["active"])
    return clean


def webhook_create(
    *,
    actor,
    department: Department,
    name: str,
    url: str,
    events: list[str],
    active: bool = True,
    type_errors: dict | None = None,
) -> Webhook:
    """A new webhook with a new secret (on ``webhook.secret``: show it to the caller, once)."""
    require_manager(actor, department)
    errors = dict(type_errors or {})
    clean = _check(
        department=department, values={"name": name, "url": url, "events": events, "active": active}, errors=errors
    )
    if not errors and Webhook.objects.filter(department=department).count() >= MAX_WEBHOOKS_PER_DEPARTMENT:
        errors["non_field_errors"] = [
            _("A department can have at most %(count)s webhooks; delete one first.")
            % {"count": MAX_WEBHOOKS_PER_DEPARTMENT}
        ]
    if errors:
        raise InvalidInput(errors)
    try:
        with transaction.atomic():
            webhook = Webhook.objects.create(department=department, secret=_secret(), created_by=actor, **clean)
            _audit(
                actor=actor,
                action="webhook.create",
                target=f"webhook {webhook.name}",
                department=department,
                data=_audited(webhook),
            )
    except IntegrityError:  # a concurrent request took the name
        raise InvalidInput(
            {
                "name": [
                    _("%(department)s already has a webhook called %(name)s; choose another name.")
                    % {"department": department.slug, "name": clean["name"]}
                ]
            }
        ) from None
    return webhook


def webhook_update(*, actor, webhook: Webhook, values: dict, type_errors: dict | None = None) -> Webhook:
    """Change any of name, url, events, active (the keys present in ``values``)."""
    require_manager(actor, webhook.department)
    errors = dict(type_errors or {})
    clean = _check(department=webhook.department, values=values, errors=errors, webhook=webhook)
    if errors:
        raise InvalidInput(errors)
    before = _audited(webhook)
    for field, value in clean.items():
        setattr(webhook, field, value)
    try:
        with transaction.atomic():
            webhook.save(update_fields=list(clean) or None)
            _audit(
                actor=actor,
                action="webhook.update",
                target=f"webhook {webhook.name}",
                department=webhook.department,
                data={"before": before, "after": _audited(webhook)},
            )
    except IntegrityError:
        raise InvalidInput(
            {
                "name": [
                    _("%(department)s already has a webhook called %(name)s; choose another name.")
                    % {"department": webhook.department.slug, "name": webhook.name}
                ]
            }
        ) from None
    return webhook


def webhook_delete(*, actor, webhook: Webhook) -> None:
    """Delete the webhook and its delivery log; deliveries not yet sent are dropped."""
    require_manager(actor, webhook.department)
    with transaction.atomic():
        _audit(
            actor=actor,
            action="webhook.delete",
            target=f"webhook {webhook.name}",
            department=webhook.department,
            data=_audited(webhook),
        )
        webhook.delete()


def webhook_rotate_secret(*, actor, webhook: Webhook) -> Webhook:
    """A new secret, used from the next attempt on (retries of older events are signed with it too)."""
    require_manager(actor, webhook.department)
    with transaction.atomic():
        webhook.secret = _secret()
        webhook.save(update_fields=["secret"])
        _audit(
            actor=actor, action="webhook.rotate_secret", target=f"webhook {webhook.name}", department=webhook.department
        )
    return webhook


def webhook_ping(*, actor, webhook: Webhook) -> Delivery:
    """Send a ``ping`` event to this webhook alone (also when inactive), to test the receiver."""
    require_manager(actor, webhook.department)
    data = {
        "webhook": {"id": webhook.pk, "name": webhook.name, "events": webhook.events},
        "message": f"Ping from GPU Portal, sent by {actor.username}.",
    }
    with transaction.atomic():
        return _deliveries_create(webhooks=[webhook], event=PING, payload=_payload(webhook.department, PING, data))[0]


def _audited(webhook: Webhook) -> dict:
    return {"name": webhook.name, "url": webhook.url, "events": list(webhook.events), "active": webhook.active}


# --- Emitting -------------------------------------------------------------------------------


def event_emit(*, department: Department, event: str, data: dict, now: datetime | None = None) -> list[Delivery]:
    """One Delivery per active webhook of the department that asked for ``event``, in the caller's
    transaction; each is sent after that commits."""
    if event not in EVENTS:
        raise ValueError(f"unknown webhook event {event!r}")
    webhooks = [
        webhook for webhook in Webhook.objects.filter(department=department, active=True) if event in webhook.events
    ]
    if not webhooks:
        return []
    with transaction.atomic():
        return _deliveries_create(webhooks=webhooks, event=event, payload=_payload(department, event, data, now=now))


def _payload(department: Department, event: str, data: dict, *, now: datetime | None = None) -> dict:
    created = (now or timezone.now()).isoformat()
    return {"id": str(uuid.uuid4()), "event": event, "created_at": created, "department": department.slug, "data": data}


def _deliveries_create(*, webhooks: list[Webhook], event: str, payload: dict) -> list[Delivery]:
    now = timezone.now()
    deliveries = [
        Delivery.objects.create(
            webhook=webhook, event=event, event_id=payload["id"], payload=payload, next_attempt_at=now
        )
        for webhook in webhooks
    ]
    for delivery in deliveries:
        _send_after_commit(delivery.pk)
    return deliveries


def _send_after_commit(delivery_id: int) -> None:
    # The first attempt at once; should this task be lost, the row is due and beat's next run sends it.
    transaction.on_commit(lambda: tasks.deliver.delay(delivery_id))


# --- Delivering -----------------------------------------------------------------------------


def delivery_redeliver(*, actor, delivery: Delivery) -> Delivery:
    """Send a finished delivery's event again as a new delivery (same event id, so receivers can dedupe)."""
    webhook = delivery.webhook
    require_manager(actor, webhook.department)
    if delivery.status == Delivery.Status.PENDING:
        raise Conflict(
            _("Delivery %(id)s is still being attempted; wait for it to succeed or fail.") % {"id": delivery.pk}
        )
    with transaction.atomic():
        again = _deliveries_create(webhooks=[webhook], event=delivery.event, payload=delivery.payload)[0]
        _audit(
            actor=actor,
            action="webhook.redeliver",
            target=f"webhook {webhook.name}",
            department=webhook.department,
            data={"delivery": delivery.pk, "event_id": str(delivery.event_id)},
        )
    return again
