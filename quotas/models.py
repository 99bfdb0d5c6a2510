"""Quotas (per department and GPU pool: nominal, borrowing and lending limits) and priority classes.

Departments live in accounts/, clusters, pools and storage in clusters/, the image catalogue in images/."""

from django.db import models
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

    class Meta:
        constraints = [models.UniqueConstraint(fields=["department", "pool"], name="one_quota_per_pool")]
        ordering = ["department__slug", "pool__cluster__name", "pool__gpu_type"]

    def __str__(self):
        return f"{self.department} on {self.pool}: {self.nominal}"


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
