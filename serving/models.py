"""Deployments that serve registered model versions: variants with traffic weights, their model servers and
per-variant statistics (docs/architecture.md "The serving path").

The tables keep their names from models_registry/ (``Meta.db_table``)."""

from django.conf import settings
from django.db import models
from django.utils.translation import gettext_lazy as _

from accounts.models import Department
from clusters.models import Cluster
from models_registry.models import ModelVersion, RegisteredModel


class Deployment(models.Model):
    class Strategy(models.TextChoices):
        AB = "ab", "A/B split"
        CANARY = "canary", "Canary"
        ROLLING = "rolling", "Rolling upgrade"
        SHADOW = "shadow", "Shadow"

    name = models.SlugField(max_length=63, unique=True)  # /serve/<name>/predict
    department = models.ForeignKey(Department, on_delete=models.PROTECT, related_name="deployments")
    model = models.ForeignKey(RegisteredModel, on_delete=models.PROTECT, related_name="deployments")
    # Where its model servers run (local processes or KServe on Kubernetes); set on creation to the
    # department's default cluster. Null: rows from before clusters served models (local servers).
    cluster = models.ForeignKey(Cluster, null=True, blank=True, on_delete=models.PROTECT, related_name="deployments")
    strategy = models.CharField(max_length=10, choices=Strategy.choices, default=Strategy.AB)
    sticky = models.BooleanField(default=True)  # the same X-Routing-Key always reaches the same variant
    # Canary steps and guardrails, the rolling plan, where the rollout stands (serving/traffic.py).
    rollout = models.JSONField(default=dict, blank=True)
    status = models.CharField(max_length=20, default="active")  # active | rolling_out | rolled_back | ...
    revision = models.PositiveIntegerField(default=1)  # bumped on every change: routers reload on a new one
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        db_table = "models_registry_deployment"
        ordering = ["name"]

    def __str__(self):
        return self.name


class Variant(models.Model):
    deployment = models.ForeignKey(Deployment, on_delete=models.CASCADE, related_name="variants")
    name = models.SlugField(max_length=40)
    version = models.ForeignKey(ModelVersion, on_delete=models.PROTECT, related_name="variants")
    weight = models.PositiveSmallIntegerField(default=0)  # percent; a deployment's weights sum to 100
    shadow = models.BooleanField(default=False)  # receives a copy of traffic; its answers are only compared
    replicas = models.PositiveSmallIntegerField(default=1)

    class Meta:
        db_table = "models_registry_variant"
        ordering = ["deployment", "name"]
        constraints = [models.UniqueConstraint(fields=["deployment", "name"], name="one_variant_per_name")]

    def __str__(self):
        return f"{self.deployment.name}/{self.name}"


class ModelServer(models.Model):
    """A running model server of a variant: a process on this host speaking KServe V1, or a KServe
    InferenceService (``handle`` "<namespace>/<name>", no pid, ``url`` its address once ready)."""

    class Status(models.TextChoices):
        STARTING = "starting"
        READY = "ready"
        FAILED = "failed"
        STOPPED = "stopped"

    variant = models.OneToOneField(Variant, on_delete=models.CASCADE, related_name="server")
    status = models.CharField(max_length=10, choices=Status.choices, default=Status.STARTING)
    url = models.CharField(max_length=300, blank=True)  # http://127.0.0.1:<port>, or KServe's address
    pid = models.IntegerField(null=True, blank=True)
    handle = models.CharField(max_length=100, blank=True)  # local: process start time; kubernetes: namespace/name
    restarts = models.PositiveIntegerField(default=0)
    message = models.TextField(blank=True)
    started_at = models.DateTimeField(null=True, blank=True)
    checked_at = models.DateTimeField(null=True, blank=True)

    def __str__(self):
        return f"server of {self.variant}"

    class Meta:
        db_table = "models_registry_modelserver"


class VariantStats(models.Model):
    """Per-variant counters, flushed periodically from the routers' memory (never written per request)."""

    variant = models.OneToOneField(Variant, on_delete=models.CASCADE, related_name="stats")
    requests = models.PositiveBigIntegerField(default=0)
    errors = models.PositiveBigIntegerField(default=0)
    # latency histogram: bucket upper bounds in ms (traffic.LATENCY_BUCKETS_MS) -> counts
    latency_counts = models.JSONField(default=list, blank=True)
    # the exact sum of the latencies counted in latency_counts, in seconds, since this field exists (the metrics'
    # histogram _sum): observations counted before it are in the buckets only
    latency_seconds_sum = models.FloatField(default=0)
    outcomes = models.PositiveBigIntegerField(default=0)  # feedback received
    successes = models.PositiveBigIntegerField(default=0)
    shadow_compared = models.PositiveBigIntegerField(default=0)  # shadow: answers compared with the primary
    shadow_agreed = models.PositiveBigIntegerField(default=0)
    updated_at = models.DateTimeField(auto_now=True)

    def __str__(self):
        return f"stats of {self.variant}"

    class Meta:
        db_table = "models_registry_variantstats"
        verbose_name = _("variant statistics")
        verbose_name_plural = _("variant statistics")
