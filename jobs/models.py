"""Training jobs and their event timeline."""

from django.conf import settings
from django.db import models
from django.db.models import Q

from accounts.models import Department
from clusters.models import Cluster, GpuPool
from images.models import FrameworkImage
from jobs import lifecycle
from quotas.models import PriorityClass


class Job(models.Model):
    class Status(models.TextChoices):
        QUEUED = lifecycle.QUEUED
        ADMITTED = lifecycle.ADMITTED
        STARTING = lifecycle.STARTING
        RUNNING = lifecycle.RUNNING
        SUCCEEDED = lifecycle.SUCCEEDED
        FAILED = lifecycle.FAILED
        CANCELLED = lifecycle.CANCELLED
        PREEMPTED = lifecycle.PREEMPTED

    name = models.CharField(max_length=40)
    department = models.ForeignKey(Department, on_delete=models.PROTECT, related_name="jobs")
    cluster = models.ForeignKey(Cluster, on_delete=models.PROTECT, related_name="jobs")
    pool = models.ForeignKey(GpuPool, on_delete=models.PROTECT, related_name="jobs")
    submitted_by = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="jobs")
    idempotency_key = models.CharField(max_length=200, blank=True)

    code_url = models.CharField(max_length=500)
    code_ref = models.CharField(max_length=200, blank=True)
    command = models.TextField()
    image = models.ForeignKey(FrameworkImage, on_delete=models.PROTECT, related_name="jobs")
    requirements = models.JSONField(default=list, blank=True)
    workers = models.PositiveIntegerField(default=1)
    gpus_per_worker = models.FloatField(default=1)
    priority = models.ForeignKey(PriorityClass, on_delete=models.PROTECT, related_name="jobs")
    mounts = models.JSONField(default=list, blank=True)
    env = models.JSONField(default=dict, blank=True)
    tensorboard = models.BooleanField(default=True)
    max_runtime_seconds = models.PositiveIntegerField(null=True, blank=True)

    status = models.CharField(max_length=20, choices=Status.choices, default=Status.QUEUED, db_index=True)
    pending_reason = models.CharField(max_length=40, blank=True)
    status_message = models.TextField(blank=True)
    queue_position = models.PositiveIntegerField(null=True, blank=True)
    exit_code = models.IntegerField(null=True, blank=True)
    commit = models.CharField(max_length=64, blank=True)
    placement = models.JSONField(default=list, blank=True)
    gpu_seconds = models.FloatField(default=0)
    cancel_requested_at = models.DateTimeField(null=True, blank=True)
    preempt_requested_at = models.DateTimeField(null=True, blank=True)
    preempt_reason = models.CharField(max_length=20, blank=True)  # reclaim | priority | service | move
    preemptions = models.PositiveIntegerField(default=0)
    # GPU-seconds of preempted runs since their last checkpoint (jobs.services._requeue): the whole run
    # when the job wrote no PORTAL_CHECKPOINT_DIR/.portal-checkpoint marker during it.
    lost_gpu_seconds = models.FloatField(default=0)
    # When the job last wrote its checkpoint marker, as the executor reports it. The marker is per job, so
    # after a requeue this may be older than the current run's start (it then saves nothing of this run).
    checkpoint_at = models.DateTimeField(null=True, blank=True)
    # A waiting job's start as the scheduling cycle estimates it (jobs.admission.start_ranges): likely, from how
    # long similar jobs ran (jobs.runtimes), and at the latest, if every job ahead runs to its limit.
    estimated_start = models.DateTimeField(null=True, blank=True)
    latest_start = models.DateTimeField(null=True, blank=True)
    launched_at = models.DateTimeField(null=True, blank=True)
    # Names this admission's run on the executor. A new one per admission, so a
    # re-queued job never meets its previous run, and ids stay unique even if
    # the database is recreated beside an old data root.
    run_id = models.CharField(max_length=64, blank=True)

    created_at = models.DateTimeField(auto_now_add=True, db_index=True)
    admitted_at = models.DateTimeField(null=True, blank=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    # When its files (logs, outputs, checkpoints, TensorBoard events) were deleted, PORTAL_JOB_RETENTION_DAYS after
    # it ended (jobs/retention.py); the row and registered model versions (copies) stay.
    files_removed_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        constraints = [
            models.UniqueConstraint(
                fields=["submitted_by", "idempotency_key"],
                condition=~Q(idempotency_key=""),
                name="one_job_per_idempotency_key",
            )
        ]
        indexes = [models.Index(fields=["status", "pool", "created_at"])]

    def __str__(self):
        return f"{self.name} #{self.pk}"

    @property
    def storage_key(self) -> str:
        """Names the job's folders kept across its runs (checkpoints, TensorBoard): its id and creation time, so that
        a job of a recreated database that gets the same id never finds another job's checkpoint."""
        if self.created_at is None:  # a job that was never saved (render_manifests)
            return str(self.pk)
        return f"{self.pk}-{int(self.created_at.timestamp() * 1_000_000):x}"

    @property
    def gpus(self) -> float:
        """GPUs the whole gang holds while admitted."""
        return self.workers * self.gpus_per_worker

    @property
    def runs(self) -> int:
        """Admissions so far: each preemption ended one, and the current one counts once it was admitted."""
        return self.preemptions + (1 if self.launched_at is not None or self.status == lifecycle.ADMITTED else 0)

    @property
    def lost_gpu_hours(self) -> float:
        return self.lost_gpu_seconds / 3600


class JobEvent(models.Model):
    job = models.ForeignKey(Job, on_delete=models.CASCADE, related_name="events")
    time = models.DateTimeField(db_index=True)
    from_status = models.CharField(max_length=20, blank=True)
    to_status = models.CharField(max_length=20)
    reason = models.CharField(max_length=40, blank=True)
    message = models.TextField(blank=True)
    # On a "preempted" event: the GPU-seconds that preemption lost (the usage report sums them per day).
    lost_gpu_seconds = models.FloatField(default=0)

    class Meta:
        ordering = ["time", "id"]

    def __str__(self):
        return f"{self.job_id}: {self.from_status or '-'} -> {self.to_status} ({self.reason})"


class CycleRequest(models.Model):
    """A change the scheduler service must look at (jobs.admission.request_cycle): a job queued, ended or
    cancelled, a quota or priority changed. Written in the change's own transaction, so the service never sees a
    request before the change; on PostgreSQL a NOTIFY wakes it as well. The service deletes the rows it handled."""

    reason = models.CharField(max_length=40)
    requested_at = models.DateTimeField(auto_now_add=True)
    # The job a submission queued (reason "submitted"): with only such requests since a cycle that decided nothing,
    # the service decides those jobs alone (jobs.admission.service_cycle). Not a foreign key: a request outlives
    # nothing and must not hold a deleted job back.
    job_id = models.BigIntegerField(null=True, blank=True)

    def __str__(self) -> str:
        return f"cycle request {self.pk} ({self.reason})"
