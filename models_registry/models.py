"""Registered models, their versions and lineage, and deployments that serve them (DESIGN.md "Models and serving").

A model belongs to one department. Versions are numbered 1, 2, ... per model and keep their artifact in
the portal's own store (``artifact_uri``), with the lineage back to the job, code and image that made it.
A deployment is a named endpoint with variants (a version each, a weight, or a shadow) and a strategy.
"""

from django.conf import settings
from django.db import models

from jobs.models import Job
from quotas.models import Cluster, Department


class RegisteredModel(models.Model):
    name = models.SlugField(max_length=63, unique=True)  # the API addresses models by name alone
    department = models.ForeignKey(Department, on_delete=models.PROTECT, related_name="registered_models")
    description = models.TextField(blank=True)
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL,
                                   related_name="+")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["name"]

    def __str__(self):
        return self.name


class ModelVersion(models.Model):
    class Status(models.TextChoices):
        # Registered from a job: the copy out of the job's output folder runs in a task
        # (models_registry.tasks.copy_version_artifact); nothing may use the version before it is ready.
        REGISTERING = "registering"
        READY = "ready"
        FAILED = "failed"  # the copy was refused or failed; status_message says why

    model = models.ForeignKey(RegisteredModel, on_delete=models.CASCADE, related_name="versions")
    version = models.PositiveIntegerField()  # 1, 2, ... per model
    framework = models.CharField(max_length=20, default="sklearn")
    # Where the portal's artifact store keeps it (a copy: deleting the job's files loses nothing).
    artifact_uri = models.CharField(max_length=500)
    artifact_sha256 = models.CharField(max_length=64, blank=True)
    status = models.CharField(max_length=12, choices=Status.choices, default=Status.READY)
    status_message = models.TextField(blank=True)
    # The artifact_path given at registration, relative to the source job's output folder: what the task copies.
    source_path = models.CharField(max_length=1000, blank=True)
    source_job = models.ForeignKey(Job, null=True, blank=True, on_delete=models.SET_NULL, related_name="model_versions")
    # job, code_url, commit, image, command, requirements: recorded at registration, kept if the job goes
    lineage = models.JSONField(default=dict, blank=True)
    metrics = models.JSONField(default=dict, blank=True)  # name -> last value (e.g. from TensorBoard scalars)
    tags = models.JSONField(default=dict, blank=True)
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL,
                                   related_name="+")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["model", "version"]
        constraints = [models.UniqueConstraint(fields=["model", "version"], name="one_number_per_version")]

    def __str__(self):
        return f"{self.model.name} v{self.version}"


class ModelAlias(models.Model):
    """`champion`, `challenger` ...: one version per alias per model; setting it again moves it."""

    model = models.ForeignKey(RegisteredModel, on_delete=models.CASCADE, related_name="aliases")
    name = models.SlugField(max_length=40)
    version = models.ForeignKey(ModelVersion, on_delete=models.CASCADE, related_name="aliases")

    class Meta:
        ordering = ["model", "name"]
        constraints = [models.UniqueConstraint(fields=["model", "name"], name="one_version_per_alias")]

    def __str__(self):
        return f"{self.model.name}@{self.name}"


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
    # Canary steps and guardrails, the rolling plan, where the rollout stands (models_registry/traffic.py).
    rollout = models.JSONField(default=dict, blank=True)
    status = models.CharField(max_length=20, default="active")  # active | rolling_out | rolled_back | ...
    revision = models.PositiveIntegerField(default=1)  # bumped on every change: routers reload on a new one
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL,
                                   related_name="+")
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
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


class VariantStats(models.Model):
    """Per-variant counters, flushed periodically from the routers' memory (never written per request)."""

    variant = models.OneToOneField(Variant, on_delete=models.CASCADE, related_name="stats")
    requests = models.PositiveBigIntegerField(default=0)
    errors = models.PositiveBigIntegerField(default=0)
    # latency histogram: bucket upper bounds in ms (traffic.LATENCY_BUCKETS_MS) -> counts
    latency_counts = models.JSONField(default=list, blank=True)
    outcomes = models.PositiveBigIntegerField(default=0)  # feedback received
    successes = models.PositiveBigIntegerField(default=0)
    shadow_compared = models.PositiveBigIntegerField(default=0)  # shadow: answers compared with the primary
    shadow_agreed = models.PositiveBigIntegerField(default=0)
    updated_at = models.DateTimeField(auto_now=True)

    def __str__(self):
        return f"stats of {self.variant}"
