"""Tenancy and capacity: departments, memberships, clusters, GPU pools, quotas,
priority classes, the framework image catalogue, department storage and personal API tokens."""

from django.conf import settings
from django.core.validators import MinValueValidator, RegexValidator
from django.db import models
from django.db.models import Q
from django.utils import timezone

dns_label = RegexValidator(
    r"^[a-z]([-a-z0-9]*[a-z0-9])?$",
    "Use lower-case letters, digits and '-', starting with a letter and not ending with '-'.",
)


class Department(models.Model):
    class Queueing(models.TextChoices):
        BEST_EFFORT = "best_effort", "Best-effort FIFO (smaller jobs may pass a blocked one without delaying it)"
        STRICT = "strict", "Strict FIFO"

    slug = models.SlugField(max_length=40, unique=True, validators=[dns_label])
    name = models.CharField(max_length=200)
    queueing = models.CharField(max_length=20, choices=Queueing.choices, default=Queueing.BEST_EFFORT)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
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
        constraints = [models.UniqueConstraint(fields=["user", "department"], name="one_membership_per_department")]
        ordering = ["department__slug", "user__username"]

    def __str__(self):
        return f"{self.user} in {self.department} ({self.role})"


class Cluster(models.Model):
    class Backend(models.TextChoices):
        LOCAL = "local", "Local processes"
        KUBERNETES = "kubernetes", "Kubernetes"

    name = models.SlugField(max_length=40, unique=True, validators=[dns_label])
    backend = models.CharField(max_length=20, choices=Backend.choices, default=Backend.LOCAL)
    # Backend options, e.g. {"allow_local_code": true, "grace_seconds": 30}
    # for local, {"kubeconfig_context": "...", "namespace_prefix": "..."} for kubernetes.
    settings = models.JSONField(default=dict, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["name"]

    def __str__(self):
        return self.name


class GpuPool(models.Model):
    """All GPUs of one type in a cluster (a Kueue ResourceFlavor)."""

    cluster = models.ForeignKey(Cluster, on_delete=models.CASCADE, related_name="pools")
    gpu_type = models.CharField(max_length=40, validators=[RegexValidator(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")])
    gpu_memory_gb = models.PositiveIntegerField(default=0)
    nodes = models.PositiveIntegerField(validators=[MinValueValidator(1)])
    gpus_per_node = models.PositiveIntegerField(validators=[MinValueValidator(1)])
    shareable = models.BooleanField(default=False, help_text="Jobs may ask for a fraction of one GPU.")

    class Meta:
        constraints = [models.UniqueConstraint(fields=["cluster", "gpu_type"], name="one_pool_per_gpu_type")]
        ordering = ["cluster__name", "gpu_type"]

    def __str__(self):
        return f"{self.cluster}/{self.gpu_type}"

    @property
    def total(self) -> int:
        return self.nodes * self.gpus_per_node

    @property
    def node_names(self) -> list[str]:
        return [f"{self.cluster.name}-{self.gpu_type.lower()}-{index}" for index in range(self.nodes)]


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
        verbose_name_plural = "priority classes"

    def __str__(self):
        return self.name


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
        Department, null=True, blank=True, on_delete=models.CASCADE, related_name="images",
        help_text="Owner of a custom image; empty for official ones.",
    )
    # pip requirements the image provides; the local executor installs them
    # into the job's virtualenv to stand in for the container.
    base_packages = models.JSONField(default=list, blank=True)

    class Meta:
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


class Storage(models.Model):
    class Kind(models.TextChoices):
        LOCAL = "local", "Local path"
        PVC = "pvc", "PersistentVolumeClaim"

    department = models.ForeignKey(Department, on_delete=models.CASCADE, related_name="storages")
    name = models.SlugField(max_length=60, validators=[dns_label])
    kind = models.CharField(max_length=10, choices=Kind.choices, default=Kind.LOCAL)
    local_path = models.CharField(max_length=500, blank=True)
    pvc_name = models.CharField(max_length=253, blank=True)
    description = models.CharField(max_length=200, blank=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["department", "name"], name="storage_name_per_department"),
            models.CheckConstraint(
                condition=Q(kind="local", local_path__gt="") | Q(kind="pvc", pvc_name__gt=""),
                name="storage_has_location",
                violation_error_message="Local storage needs a path; PVC storage needs a claim name.",
            ),
        ]
        ordering = ["department__slug", "name"]
        verbose_name_plural = "storage"

    def __str__(self):
        return f"{self.department}/{self.name}"


class AuditEvent(models.Model):
    """Who changed what: quotas, roles, deployments, cancellations (API.md "Usage and audit")."""

    at = models.DateTimeField(auto_now_add=True, db_index=True)
    actor = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="+")
    department = models.ForeignKey(Department, null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    action = models.CharField(max_length=60)
    target = models.CharField(max_length=200)
    data = models.JSONField(default=dict, blank=True)

    class Meta:
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
        ordering = ["-created_at", "-id"]

    def __str__(self):
        return f"{self.user} {self.name} ({self.prefix}...)"
