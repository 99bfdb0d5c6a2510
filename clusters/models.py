"""Capacity: clusters, their GPU pools and department storage.

The tables keep the names they had in quotas/ (``Meta.db_table``); clusters/migrations/0001 moved the models
without moving data."""

from django.core.validators import MinValueValidator, RegexValidator
from django.db import models
from django.db.models import Q
from django.utils.translation import gettext_lazy as _

from accounts.models import Department
from clusters import health as cluster_health
from core.validators import dns_label


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

    class Health(models.TextChoices):
        UNKNOWN = cluster_health.UNKNOWN, _("not checked yet")
        REACHABLE = cluster_health.REACHABLE, _("reachable")
        UNREACHABLE = cluster_health.UNREACHABLE, _("unreachable")
        NOT_READY = cluster_health.NOT_READY, _("not ready")

    class HealthReason(models.TextChoices):
        RENDERING_ONLY = cluster_health.RENDERING_ONLY, _("rendering-only example, no cluster behind it")
        NO_CONNECTION_SETTINGS = cluster_health.NO_CONNECTION_SETTINGS, _("no connection settings")
        SETTINGS_INVALID = cluster_health.SETTINGS_INVALID, _("its settings are invalid")
        API_UNANSWERED = cluster_health.API_UNANSWERED, _("the API server does not answer")
        OPERATOR_MISSING = cluster_health.OPERATOR_MISSING, _("the Training Operator is not installed")
        EXECUTOR_BROKEN = cluster_health.EXECUTOR_BROKEN, _("its executor does not work on this host")

    # The last check (clusters.services.cluster_health_refresh): its state, why, its detail, when it was made
    # and since when the cluster is in this state (the grace period before its jobs are requeued counts from it).
    health = models.CharField(max_length=20, choices=Health.choices, default=Health.UNKNOWN, editable=False)
    health_reason = models.CharField(max_length=40, choices=HealthReason.choices, blank=True, editable=False)
    health_message = models.CharField(max_length=500, blank=True, editable=False)
    health_checked_at = models.DateTimeField(null=True, blank=True, editable=False)
    health_since = models.DateTimeField(null=True, blank=True, editable=False)

    class Meta:
        db_table = "quotas_cluster"
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

    class Placement(models.TextChoices):
        BINPACK = "binpack", "Bin-pack (fill partly used nodes first)"
        SPREAD = "spread", "Spread (emptiest node first)"
        FRAGMENTATION = "fragmentation", "Fragmentation-aware (keep whole nodes free for large gangs)"

    placement = models.CharField(
        max_length=20,
        choices=Placement.choices,
        default=Placement.BINPACK,
        help_text="How the scheduler picks nodes and GPUs for this pool's jobs.",
    )

    class Meta:
        db_table = "quotas_gpupool"
        constraints = [models.UniqueConstraint(fields=["cluster", "gpu_type"], name="one_pool_per_gpu_type")]
        ordering = ["cluster__name", "gpu_type"]
        verbose_name = _("GPU pool")
        verbose_name_plural = _("GPU pools")

    def __str__(self):
        return f"{self.cluster}/{self.gpu_type}"

    @property
    def total(self) -> int:
        return self.nodes * self.gpus_per_node

    @property
    def node_names(self) -> list[str]:
        return [f"{self.cluster.name}-{self.gpu_type.lower()}-{index}" for index in range(self.nodes)]


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
        db_table = "quotas_storage"
        constraints = [
            models.UniqueConstraint(fields=["department", "name"], name="storage_name_per_department"),
            models.CheckConstraint(
                condition=Q(kind="local", local_path__gt="") | Q(kind="pvc", pvc_name__gt=""),
                name="storage_has_location",
                violation_error_message="Local storage needs a path; PVC storage needs a claim name.",
            ),
        ]
        ordering = ["department__slug", "name"]
        verbose_name_plural = _("storage")

    def __str__(self):
        return f"{self.department}/{self.name}"
