"""Tenancy and identity: departments, their members and roles, personal API tokens, the audit trail.

The tables keep the names they had in quotas/ (``Meta.db_table``): accounts/migrations/0001 moved the models
without moving data."""

from django.conf import settings
from django.db import models
from django.utils import timezone
from django.utils.translation import gettext_lazy as _

from core.validators import dns_label


class Department(models.Model):
    class Queueing(models.TextChoices):
        BEST_EFFORT = "best_effort", "Best-effort FIFO (smaller jobs may pass a blocked one without delaying it)"
        STRICT = "strict", "Strict FIFO"

    slug = models.SlugField(max_length=40, unique=True, validators=[dns_label])
    name = models.CharField(max_length=200)
    queueing = models.CharField(max_length=20, choices=Queueing.choices, default=Queueing.BEST_EFFORT)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        db_table = "quotas_department"
        ordering = ["slug"]

    def __str__(self):
        return self.slug


class Membership(models.Model):
    class Role(models.TextChoices):
        MEMBER = "member", "Member"
        DEPT_ADMIN = "dept_admin", "Department admin"

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="memberships")
    department = models.ForeignKey(Department, on_delete=models.CASCADE, related_name="memberships")
    role = models.CharField(max_length=20, choices=Role.choices, default=Role.MEMBER)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        db_table = "quotas_membership"
        constraints = [models.UniqueConstraint(fields=["user", "department"], name="one_membership_per_department")]
        ordering = ["department__slug", "user__username"]

    def __str__(self):
        return f"{self.user} in {self.department} ({self.role})"


class AuditEvent(models.Model):
    """Who changed what: quotas, roles, deployments, cancellations (API.md "Usage and audit")."""

    at = models.DateTimeField(auto_now_add=True, db_index=True)
    actor = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="+")
    department = models.ForeignKey(Department, null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    action = models.CharField(max_length=60)
    target = models.CharField(max_length=200)
    data = models.JSONField(default=dict, blank=True)

    class Meta:
        db_table = "quotas_auditevent"
        ordering = ["-at", "-id"]

    def __str__(self):
        return f"{self.at:%Y-%m-%d %H:%M} {self.actor} {self.action} {self.target}"


class ApiToken(models.Model):
    """A named personal API token. Only the SHA-256 hash of its key is stored; the key is shown once."""

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="api_tokens")
    name = models.CharField(max_length=60)
    prefix = models.CharField(max_length=8, help_text="First characters of the key, to tell tokens apart.")
    key_hash = models.CharField(max_length=64, unique=True, help_text="SHA-256 of the key, hex.")
    created_at = models.DateTimeField(default=timezone.now)
    last_used_at = models.DateTimeField(null=True, blank=True)
    expires_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        db_table = "quotas_apitoken"
        ordering = ["-created_at", "-id"]
        verbose_name = _("API token")
        verbose_name_plural = _("API tokens")

    def __str__(self):
        return f"{self.user} {self.name} ({self.prefix}...)"
