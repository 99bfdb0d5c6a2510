"""Reads of webhooks and their delivery logs: what a user may see (members of the department and platform
admins; the secret is never part of a read)."""

from __future__ import annotations

from django.db.models import QuerySet

from accounts import permissions
from webhooks.models import Delivery, Webhook


def webhooks_for(*, user, department: str = "") -> QuerySet[Webhook]:
    webhooks = Webhook.objects.select_related("department", "created_by")
    if not permissions.is_platform_admin(user):
        webhooks = webhooks.filter(department_id__in=list(permissions.roles(user)))
    if department:
        webhooks = webhooks.filter(department__slug=department)
    return webhooks


def webhook_get(*, user, webhook_id: int) -> Webhook | None:
    """The webhook if the user may see it; None otherwise (answered as 404 alike)."""
    return webhooks_for(user=user).filter(pk=webhook_id).first()


def deliveries_of(*, webhook: Webhook) -> QuerySet[Delivery]:
    """Newest first."""
    return webhook.deliveries.order_by("-created_at", "-id")


def delivery_get(*, webhook: Webhook, delivery_id: int) -> Delivery | None:
    return webhook.deliveries.select_related("webhook__department").filter(pk=delivery_id).first()
