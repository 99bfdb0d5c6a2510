"""Webhooks: URLs a department registers for job and model events, and the log of each delivery."""

from django.conf import settings
from django.db import models
from django.utils.translation import gettext_lazy as _

from accounts.models import Department


class Webhook(models.Model):
    department = models.ForeignKey(Department, on_delete=models.CASCADE, related_name="webhooks")
    name = models.CharField(max_length=100)
    url = models.CharField(max_length=2000)
    events = models.JSONField(default=list)  # event names, see webhooks.events.EVENTS
    # Kept in clear: every delivery is signed with it. Shown to people only on creation and rotation.
    secret = models.CharField(max_length=100)
    active = models.BooleanField(default=True)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["department", "name", "id"]
        constraints = [models.UniqueConstraint(fields=["department", "name"], name="one_webhook_name_per_department")]

    def __str__(self):
        return f"webhook {self.department.slug}/{self.name}"


class Delivery(models.Model):
    """One event for one webhook, and its row in the outbox while it is pending (webhooks/outbox.py).

    A pending delivery is due when ``next_attempt_at`` has passed and no attempt holds it (``claimed_until``
    empty or passed): whichever worker claims it first makes the next attempt; nothing waits in a worker.
    """

    class Status(models.TextChoices):
        PENDING = "pending", "Pending"
        DELIVERED = "delivered", "Delivered"
        FAILED = "failed", "Failed"

    webhook = models.ForeignKey(Webhook, on_delete=models.CASCADE, related_name="deliveries")
    event = models.CharField(max_length=50)
    event_id = models.UUIDField(db_index=True)  # the same on every retry and redelivery of the event
    payload = models.JSONField()
    status = models.CharField(max_length=20, choices=Status.choices, default=Status.PENDING)
    attempts = models.PositiveIntegerField(default=0)
    response_code = models.PositiveIntegerField(null=True, blank=True)  # of the last attempt
    response_excerpt = models.TextField(blank=True)  # its first KB
    error = models.TextField(blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    # When the next attempt is due (empty once delivered or failed).
    next_attempt_at = models.DateTimeField(null=True, blank=True)
    # While an attempt runs: until when its worker holds the delivery; past that, it lost its worker and the
    # delivery is due again (outbox.ATTEMPT_LEASE).
    claimed_until = models.DateTimeField(null=True, blank=True)
    last_attempt_at = models.DateTimeField(null=True, blank=True)  # when the last attempt started
    delivered_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        indexes = [models.Index(fields=["status", "next_attempt_at"], name="delivery_due")]
        verbose_name = _("delivery")
        verbose_name_plural = _("deliveries")

    def __str__(self):
        return f"delivery {self.pk} {self.event} ({self.status})"
