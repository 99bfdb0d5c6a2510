"""TensorBoards: one per job, or one comparing several jobs' runs.

The table keeps its name from jobs/ (``Meta.db_table``)."""

from django.conf import settings
from django.db import models
from django.utils.translation import gettext_lazy as _

from accounts.models import Department
from jobs.models import Job


class TensorBoard(models.Model):
    """A TensorBoard showing one job's runs, or several jobs' runs to compare them (tensorboards/services.py)."""

    class Status(models.TextChoices):
        STARTING = "starting"
        RUNNING = "running"
        STOPPED = "stopped"
        FAILED = "failed"

    # "job:<id>" for a job's own board, "compare:<id>,<id>,..." (sorted) for a comparison:
    # one row per job set, reused (and restarted) every time that set is asked for again.
    key = models.CharField(max_length=200, unique=True)
    jobs = models.ManyToManyField(Job, related_name="tensorboards")
    # The first job's department; a comparison may span departments, so access is always
    # decided on every job of the board, never on this field alone.
    department = models.ForeignKey(Department, on_delete=models.CASCADE, related_name="tensorboards")
    started_by = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, related_name="+")
    status = models.CharField(max_length=20, choices=Status.choices, default=Status.STOPPED)
    host = models.CharField(max_length=200, blank=True)
    port = models.PositiveIntegerField(null=True, blank=True)
    pid = models.IntegerField(null=True, blank=True)
    # What else the backend needs to recognise its process (local: the start time of ``pid``,
    # so that a reused pid is never taken for ours).
    handle = models.CharField(max_length=200, blank=True)
    started_at = models.DateTimeField(null=True, blank=True)
    last_access_at = models.DateTimeField(null=True, blank=True)
    message = models.TextField(blank=True)

    class Meta:
        db_table = "jobs_tensorboard"
        indexes = [models.Index(fields=["status", "last_access_at"])]
        verbose_name = "TensorBoard"  # a product's name, the same in every language
        verbose_name_plural = _("TensorBoards")

    def __str__(self):
        return f"TensorBoard {self.key} ({self.status})"

    @property
    def is_compare(self) -> bool:
        return self.key.startswith("compare:")
