"""The framework image catalogue and image builds (a department's Dockerfile built by Kaniko into a catalogue image).

The tables keep their names from quotas/ and builds/ (``Meta.db_table``); images/migrations/0001 moved them
without moving data."""

from django.conf import settings
from django.db import models
from django.db.models import Q

from accounts.models import Department
from clusters.models import Cluster


class FrameworkImage(models.Model):
    class Framework(models.TextChoices):
        PYTHON = "python", "Python"
        PYTORCH = "pytorch", "PyTorch"
        TENSORFLOW = "tensorflow", "TensorFlow"
        JAX = "jax", "JAX"

    name = models.SlugField(max_length=60, unique=True)
    framework = models.CharField(max_length=20, choices=Framework.choices)
    image = models.CharField(max_length=300, help_text="Container image reference, e.g. pytorch/pytorch:2.4.0-cuda12.1")
    official = models.BooleanField(default=False)
    department = models.ForeignKey(
        Department,
        null=True,
        blank=True,
        on_delete=models.CASCADE,
        related_name="images",
        help_text="Owner of a custom image; empty for official ones.",
    )
    # pip requirements the image provides; the local executor installs them
    # into the job's virtualenv to stand in for the container.
    base_packages = models.JSONField(default=list, blank=True)

    class Meta:
        db_table = "quotas_frameworkimage"
        constraints = [
            models.CheckConstraint(
                condition=Q(official=True, department__isnull=True) | Q(official=False, department__isnull=False),
                name="official_xor_department",
                violation_error_message="An image is either official or owned by one department.",
            )
        ]
        ordering = ["-official", "name"]

    def __str__(self):
        return self.name


class ImageBuild(models.Model):
    class Status(models.TextChoices):
        QUEUED = "queued", "Queued"
        BUILDING = "building", "Building"
        SUCCEEDED = "succeeded", "Succeeded"
        FAILED = "failed", "Failed"
        CANCELLED = "cancelled", "Cancelled"

    ACTIVE = (Status.QUEUED, Status.BUILDING)
    FINAL = (Status.SUCCEEDED, Status.FAILED, Status.CANCELLED)

    department = models.ForeignKey(Department, on_delete=models.CASCADE, related_name="image_builds")
    cluster = models.ForeignKey(Cluster, on_delete=models.PROTECT, related_name="image_builds")
    requested_by = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="image_builds")
    # The catalogue image's name once built.
    name = models.SlugField(max_length=40)
    framework = models.CharField(max_length=20, choices=FrameworkImage.Framework.choices, default="python")
    base_packages = models.JSONField(default=list, blank=True)
    # Source: a pasted Dockerfile, or a git repository with the Dockerfile and context inside it.
    dockerfile = models.TextField(blank=True)
    code_url = models.CharField(max_length=500, blank=True)
    code_ref = models.CharField(max_length=200, blank=True)
    dockerfile_path = models.CharField(max_length=300, default="Dockerfile")
    context_path = models.CharField(max_length=300, blank=True)
    destination = models.CharField(max_length=500, blank=True, help_text="Image reference Kaniko pushes to.")
    status = models.CharField(max_length=20, choices=Status.choices, default=Status.QUEUED, db_index=True)
    message = models.TextField(blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    launched_at = models.DateTimeField(null=True, blank=True, help_text="When its Job was created on the cluster.")
    started_at = models.DateTimeField(null=True, blank=True, help_text="When its build pod started running.")
    finished_at = models.DateTimeField(null=True, blank=True)
    # Cancelled after launch, and its Job and ConfigMap are not yet deleted from the cluster.
    cleanup_pending = models.BooleanField(default=False)
    image = models.ForeignKey(FrameworkImage, null=True, blank=True, on_delete=models.SET_NULL, related_name="builds")

    class Meta:
        db_table = "builds_imagebuild"
        constraints = [
            # Two active builds cannot race for one catalogue name.
            models.UniqueConstraint(
                fields=["name"], condition=Q(status__in=["queued", "building"]), name="one_active_build_per_name"
            ),
            models.CheckConstraint(
                condition=(Q(dockerfile="") & ~Q(code_url="")) | (~Q(dockerfile="") & Q(code_url="")),
                name="build_has_one_source",
                violation_error_message="A build has a pasted Dockerfile or a repository, not both.",
            ),
        ]
        ordering = ["-created_at", "-id"]

    def __str__(self):
        return f"build {self.pk} {self.department}/{self.name} ({self.status})"

    @property
    def source(self) -> str:
        return "dockerfile" if self.dockerfile else "git"
