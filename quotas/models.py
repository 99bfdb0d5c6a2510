"""Quotas (per department and GPU pool: nominal, borrowing and lending limits) and priority classes.

Departments live in accounts/, clusters, pools and storage in clusters/, the image catalogue in images/."""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.db.models import F, Q
from django.utils.translation import gettext_lazy as _

from accounts.models import Department
from clusters.models import GpuPool


class Quota(models.Model):
    department = models.ForeignKey(Department, on_delete=models.CASCADE, related_name="quotas")
    pool = models.ForeignKey(GpuPool, on_delete=models.CASCADE, related_name="quotas")
    nominal = models.PositiveIntegerField(help_text="GPUs guaranteed to the department.")
    borrowing_limit = models.PositiveIntegerField(
        null=True, blank=True, help_text="Idle GPUs of others it may use beyond nominal; empty = unlimited."
    )
    lending_limit = models.PositiveIntegerField(
        null=True, blank=True, help_text="Unused nominal GPUs others may borrow; empty = all of them."
    )

    # Set by quotas.selectors.effective_quotas on the rows it returns (``nominal`` then includes active loans):
    # the nominal of the row itself and the active loans that move it. Read-only copies: never save them.
    own_nominal: int | None = None
    loans_out: tuple[QuotaLoan, ...] = ()
    loans_in: tuple[QuotaLoan, ...] = ()

    class Meta:
        constraints = [models.UniqueConstraint(fields=["department", "pool"], name="one_quota_per_pool")]
        ordering = ["department__slug", "pool__cluster__name", "pool__gpu_type"]

    def __str__(self):
        return f"{self.department} on {self.pool}: {self.nominal}"


class QuotaLoan(models.Model):
    """GPUs of a pool that one department lends another until a time: while active, the borrower's nominal there
    rises by ``gpus`` and the lender's falls by as many (quotas.selectors.effective_quotas). It ends at ``until``
    (``end_reason`` expired, quotas.services.loans_expire) or earlier when the lender ends it (ended)."""

    class EndReason(models.TextChoices):
        ENDED = "ended", _("ended early")
        EXPIRED = "expired", _("expired")

    from_department = models.ForeignKey(Department, on_delete=models.CASCADE, related_name="loans_out")
    to_department = models.ForeignKey(Department, on_delete=models.CASCADE, related_name="loans_in")
    pool = models.ForeignKey(GpuPool, on_delete=models.CASCADE, related_name="loans")
    gpus = models.PositiveIntegerField()
    until = models.DateTimeField()
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True)
    ended_at = models.DateTimeField(null=True, blank=True)
    ended_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    end_reason = models.CharField(max_length=10, choices=EndReason.choices, blank=True)

    class Meta:
        ordering = ["-created_at", "-pk"]
        constraints = [
            models.CheckConstraint(condition=Q(gpus__gt=0), name="loan_gpus_positive"),
            models.CheckConstraint(condition=~Q(from_department=F("to_department")), name="loan_not_to_itself"),
        ]
        indexes = [models.Index(fields=["ended_at", "until"], name="loan_open_until")]

    def __str__(self):
        return f"{self.gpus} GPUs of {self.pool} from {self.from_department} to {self.to_department}"

    def is_active(self, now) -> bool:
        return self.ended_at is None and self.until > now


class PriorityClass(models.Model):
    name = models.SlugField(max_length=40, unique=True)
    value = models.IntegerField(help_text="Higher is scheduled first.")
    preemptible = models.BooleanField(default=False, help_text="Jobs of this class may be evicted.")
    description = models.CharField(max_length=200, blank=True)

    class Meta:
        ordering = ["-value"]
        verbose_name_plural = _("priority classes")

    def __str__(self):
        return self.name
