"""Registered models, their versions and lineage, and aliases; deployments that serve them are in serving/.

A model belongs to one department. Versions are numbered 1, 2, ... per model and keep their artifact in
the portal's own store (``artifact_uri``), with the lineage back to the job, code and image that made it.
A deployment is a named endpoint with variants (a version each, a weight, or a shadow) and a strategy.
"""

from django.conf import settings
from django.db import models
from django.utils.translation import gettext_lazy as _

from accounts.models import Department
from jobs.models import Job


class RegisteredModel(models.Model):
    name = models.SlugField(max_length=63, unique=True)  # the API addresses models by name alone
    department = models.ForeignKey(Department, on_delete=models.PROTECT, related_name="registered_models")
    description = models.TextField(blank=True)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
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
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
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
        verbose_name = _("model alias")
        verbose_name_plural = _("model aliases")

    def __str__(self):
        return f"{self.model.name}@{self.name}"
