"""REST endpoints for training jobs (API.md "Jobs"). Thin: parse, look up, call a service."""

from __future__ import annotations

import asyncio

from asgiref.sync import sync_to_async
from django.conf import settings
from django.http import HttpResponse, StreamingHttpResponse
from django.urls import reverse
from django.utils import timezone
from django.utils.functional import cached_property
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import generics, serializers, status
from rest_framework.exceptions import ValidationError
from rest_framework.response import Response
from rest_framework.views import APIView

from core.api import parse_input, visible_or_404
from jobs import lifecycle, preview, running, selectors, services
from jobs.filters import JobFilter, QueueFilter
from jobs.models import Job, JobEvent


class MountSerializer(serializers.Serializer):
    storage = serializers.CharField(max_length=60)
    path = serializers.CharField(max_length=500)
    read_only = serializers.BooleanField(default=False)


class JobInputSerializer(serializers.Serializer):
    name = serializers.CharField(max_length=200)
    department = serializers.CharField(max_length=40)
    cluster = serializers.CharField(max_length=40, required=False, allow_blank=True)
    code_url = serializers.CharField(trim_whitespace=False)  # length and form: core.code_url.code_url_problem
    code_ref = serializers.CharField(max_length=500, required=False, allow_blank=True, allow_null=True)
    command = serializers.CharField(max_length=100_000, allow_blank=True, trim_whitespace=False)
    image = serializers.CharField(max_length=60, default="python")
    requirements = serializers.ListField(child=serializers.CharField(max_length=1000), default=list, max_length=1000)
    workers = serializers.IntegerField(default=1)
    gpus_per_worker = serializers.FloatField(default=1)
    gpu_type = serializers.CharField(max_length=40, required=False, allow_blank=True, allow_null=True)
    priority = serializers.CharField(max_length=40, default="normal")
    mounts = serializers.ListField(child=MountSerializer(), default=list, max_length=1000)
    env = serializers.DictField(child=serializers.CharField(allow_blank=True, trim_whitespace=False), default=dict)
    tensorboard = serializers.BooleanField(default=True)
    max_runtime_seconds = serializers.IntegerField(required=False, allow_null=True)


def parse_job_input(data) -> tuple[dict, dict]:
    """Each field on its own, so one bad field does not hide the problems of the others.

    Returns (values of fields that parsed, errors of those that did not).
    """
    return parse_input(JobInputSerializer, data, what="the job", prefix_guesses=True)


class PlacementSerializer(serializers.Serializer):
    worker = serializers.IntegerField()
    node = serializers.CharField()
    gpus = serializers.ListField(child=serializers.IntegerField())
    gpu_fraction = serializers.FloatField(allow_null=True, required=False)


class EstimatedStartField(serializers.DateTimeField):
    """A stored estimate is never shown earlier than the response: one the queue expected by now reads as now."""

    def to_representation(self, value):
        return super().to_representation(max(value, timezone.now()))


class JobOutputSerializer(serializers.ModelSerializer):
    # A waiting job's start: likely (from how long similar jobs ran) and at the latest (every job ahead to its limit).
    estimated_start = EstimatedStartField(read_only=True, allow_null=True)
    latest_start = EstimatedStartField(read_only=True, allow_null=True)
    department = serializers.CharField(source="department.slug")
    cluster = serializers.CharField(source="cluster.name")
    image = serializers.CharField(source="image.name")
    gpu_type = serializers.CharField(source="pool.gpu_type")
    priority = serializers.CharField(source="priority.name")
    submitted_by = serializers.CharField(source="submitted_by.username")
    mounts = MountSerializer(many=True)
    env = serializers.DictField(child=serializers.CharField())
    requirements = serializers.ListField(child=serializers.CharField())
    placement = PlacementSerializer(many=True)
    tensorboard_url = serializers.SerializerMethodField()
    events_url = serializers.SerializerMethodField()
    logs_url = serializers.SerializerMethodField()

    class Meta:
        model = Job
        fields = [
            "id",
            "name",
            "department",
            "cluster",
            "code_url",
            "code_ref",
            "commit",
            "command",
            "image",
            "requirements",
            "workers",
            "gpus_per_worker",
            "gpu_type",
            "priority",
            "mounts",
            "env",
            "tensorboard",
            "max_runtime_seconds",
            "status",
            "pending_reason",
            "status_message",
            "queue_position",
            "submitted_by",
            "created_at",
            "admitted_at",
            "started_at",
            "finished_at",
            "exit_code",
            "placement",
            "gpu_seconds",
            "tensorboard_url",
            "events_url",
            "logs_url",
            "estimated_start",
            "latest_start",
            "preemptions",
            "lost_gpu_seconds",
            "files_removed_at",
        ]

    def get_tensorboard_url(self, job) -> str | None:
        return f"/tensorboard/{job.pk}/" if job.tensorboard else None

    def get_events_url(self, job) -> str:
        return reverse("api-job-events", args=[job.pk])

    def get_logs_url(self, job) -> str:
        return reverse("api-job-logs", args=[job.pk])

    @cached_property
    def _jobs_url(self) -> str:
        """/api/v1/jobs/, under which each job's events and logs are (jobs/urls.py): reversed once per answer,
        as a list's jobs share one serializer (a reverse() per job and URL cost a page 100)."""
        return reverse("api-jobs")

    def to_representation(self, job) -> dict:
        """What the fields above give (the same keys, order and values; tests/jobs/test_api_representation.py
        compares the two), written out: a page of 50 jobs through DRF's field machinery cost more than its
        queries (bench/api.py --profile). The declared fields still describe the answer to the schema."""
        now = timezone.now()
        return {
            "id": job.pk,
            "name": str(job.name),
            "department": str(job.department.slug),
            "cluster": str(job.cluster.name),
            "code_url": str(job.code_url),
            "code_ref": str(job.code_ref),
            "commit": str(job.commit),
            "command": str(job.command),
            "image": str(job.image.name),
            "requirements": [_str_or_none(item) for item in job.requirements],
            "workers": int(job.workers),
            "gpus_per_worker": float(job.gpus_per_worker),
            "gpu_type": str(job.pool.gpu_type),
            "priority": str(job.priority.name),
            "mounts": [_mount(mount) for mount in job.mounts],
            "env": {str(key): _str_or_none(value) for key, value in job.env.items()},
            "tensorboard": bool(job.tensorboard),
            "max_runtime_seconds": _int_or_none(job.max_runtime_seconds),
            "status": str(job.status),
            "pending_reason": str(job.pending_reason),
            "status_message": str(job.status_message),
            "queue_position": _int_or_none(job.queue_position),
            "submitted_by": str(job.submitted_by.username),
            "created_at": _datetime(job.created_at),
            "admitted_at": _datetime(job.admitted_at),
            "started_at": _datetime(job.started_at),
            "finished_at": _datetime(job.finished_at),
            "exit_code": _int_or_none(job.exit_code),
            "placement": [_placement(worker) for worker in job.placement],
            "gpu_seconds": float(job.gpu_seconds),
            "tensorboard_url": self.get_tensorboard_url(job),
            "events_url": f"{self._jobs_url}{job.pk}/events/",
            "logs_url": f"{self._jobs_url}{job.pk}/logs/",
            "estimated_start": _datetime(job.estimated_start and max(job.estimated_start, now)),
            "latest_start": _datetime(job.latest_start and max(job.latest_start, now)),
            "preemptions": int(job.preemptions),
            "lost_gpu_seconds": float(job.lost_gpu_seconds),
            "files_removed_at": _datetime(job.files_removed_at),
        }


# JobOutputSerializer.to_representation's values as DRF's fields give them (times in the active time zone, "Z" for UTC).
_datetime = serializers.DateTimeField().to_representation
_boolean = serializers.BooleanField().to_representation


def _str_or_none(value) -> str | None:
    return None if value is None else str(value)


def _int_or_none(value) -> int | None:
    return None if value is None else int(value)


def _mount(mount: dict) -> dict:
    read_only = mount.get("read_only", False)
    return {
        "storage": _str_or_none(mount["storage"]),
        "path": _str_or_none(mount["path"]),
        "read_only": None if read_only is None else _boolean(read_only),
    }


def _placement(worker: dict) -> dict:
    gpus, fraction = worker["gpus"], worker.get("gpu_fraction")
    return {
        "worker": _int_or_none(worker["worker"]),
        "node": _str_or_none(worker["node"]),
        "gpus": None if gpus is None else [_int_or_none(gpu) for gpu in gpus],
        "gpu_fraction": None if fraction is None else float(fraction),
    }


def _visible_job(request, job_id) -> Job:
    return visible_or_404(
        selectors.job_get(user=request.user, job_id=job_id), "No job with that id in your departments."
    )


# What JobOutputSerializer reads of a job and of its related rows (their names): a page of the list loads no
# other column (the user's password, a cluster's settings ...).
JOB_OUTPUT_COLUMNS = (
    "name code_url code_ref commit command requirements workers gpus_per_worker mounts env tensorboard "
    "max_runtime_seconds status pending_reason status_message queue_position created_at admitted_at started_at "
    "finished_at exit_code placement gpu_seconds estimated_start latest_start preemptions lost_gpu_seconds "
    "files_removed_at department__slug cluster__name image__name pool__gpu_type priority__name"
).split()  # and the submitter's username: jobs.selectors.jobs_page_for


class JobListApi(generics.ListAPIView):
    serializer_class = JobOutputSerializer
    filterset_class = JobFilter  # narrows the caller's jobs; DjangoFilterBackend is the default backend

    def get_queryset(self):
        return selectors.jobs_page_for(user=self.request.user, columns=JOB_OUTPUT_COLUMNS)

    @extend_schema(
        request=JobInputSerializer,
        responses={201: JobOutputSerializer, 200: JobOutputSerializer},
        parameters=[
            OpenApiParameter(
                "Idempotency-Key",
                str,
                OpenApiParameter.HEADER,
                description="The same key from the same user returns the first job (200).",
            )
        ],
    )
    def post(self, request):
        values, type_errors = parse_job_input(request.data)
        key = request.headers.get("Idempotency-Key", "").strip()[:200]
        job, created = services.job_submit(user=request.user, data=values, type_errors=type_errors, idempotency_key=key)
        return Response(
            JobOutputSerializer(job).data, status=status.HTTP_201_CREATED if created else status.HTTP_200_OK
        )


class PreviewAlternativeSerializer(serializers.Serializer):
    change = serializers.DictField()
    estimated_start = serializers.DateTimeField()


class JobPreviewSerializer(serializers.Serializer):
    would_start = serializers.BooleanField()
    pending_reason = serializers.CharField()
    status_message = serializers.CharField()
    queue_position = serializers.IntegerField(allow_null=True)
    estimated_start = serializers.DateTimeField(allow_null=True)  # likely, from how long similar jobs ran
    latest_start = serializers.DateTimeField(allow_null=True)  # if every job ahead runs to its limit
    alternatives = PreviewAlternativeSerializer(many=True)


class JobPreviewApi(APIView):
    """Would this submission start now? If not, why, where in the queue, when, and what would start sooner.
    Changes nothing; the same body and the same 400s as a submission."""

    @extend_schema(request=JobInputSerializer, responses={200: JobPreviewSerializer})
    def post(self, request):
        values, type_errors = parse_job_input(request.data)
        found = preview.job_preview(user=request.user, data=values, type_errors=type_errors)
        return Response(JobPreviewSerializer(found).data)


class JobDetailApi(APIView):
    @extend_schema(responses=JobOutputSerializer)
    def get(self, request, job_id):
        return Response(JobOutputSerializer(_visible_job(request, job_id)).data)


class JobCancelApi(APIView):
    @extend_schema(request=None, responses={200: JobOutputSerializer})
    def post(self, request, job_id):
        job = services.job_cancel(user=request.user, job=_visible_job(request, job_id))
        return Response(JobOutputSerializer(job).data)


class JobCloneApi(APIView):
    @extend_schema(request=JobInputSerializer, responses={201: JobOutputSerializer})
    def post(self, request, job_id):
        source = _visible_job(request, job_id)
        overrides = request.data if isinstance(request.data, dict) else {}
        values, type_errors = parse_job_input({**services.job_as_input(source), **overrides})
        job, _ = services.job_submit(user=request.user, data=values, type_errors=type_errors)
        return Response(JobOutputSerializer(job).data, status=status.HTTP_201_CREATED)


class QueueApi(generics.ListAPIView):
    """Waiting jobs of the caller's departments in admission order, with why they wait and roughly when they start."""

    serializer_class = JobOutputSerializer
    filterset_class = QueueFilter

    def get_queryset(self):
        return selectors.queue_for(user=self.request.user)


class JobEventSerializer(serializers.Serializer):
    time = serializers.DateTimeField()
    from_status = serializers.CharField()
    to_status = serializers.CharField()
    reason = serializers.CharField()
    message = serializers.CharField()


class JobEventsApi(generics.ListAPIView):
    serializer_class = JobEventSerializer

    def get_queryset(self):
        if getattr(self, "swagger_fake_view", False):  # schema generation has no job to look up
            return JobEvent.objects.none()
        return selectors.job_events(job=_visible_job(self.request, self.kwargs["job_id"]))


FOLLOW_POLL_SECONDS = 0.25
FOLLOW_READS_PER_POLL = 8  # a log far behind is caught up on a few bounded reads at a time


class JobLogsApi(APIView):
    @extend_schema(
        parameters=[
            OpenApiParameter("worker", int, description="Worker rank (default 0)"),
            OpenApiParameter("tail", int, description="Only the last N lines (default all, at most 100000)"),
            OpenApiParameter("follow", bool, description="Keep streaming new lines until the job ends"),
        ],
        responses={(200, "text/plain"): OpenApiTypes.STR},
    )
    def get(self, request, job_id):
        job = _visible_job(request, job_id)
        params = request.query_params
        errors = {}
        worker = _int_param(params.get("worker", "0"), "worker", errors, low=0, high=job.workers - 1)
        tail = _int_param(params.get("tail", "100000"), "tail", errors, low=1, high=100_000)
        if errors:
            raise ValidationError(errors)
        follow = params.get("follow", "").lower() in {"1", "true", "yes"}
        executor = running.executor_for(job.cluster)
        if not follow:
            lines = _read_log(executor, job.run_id, worker, tail=tail).lines if job.run_id else []
            return HttpResponse("".join(lines), content_type="text/plain; charset=utf-8")
        return StreamingHttpResponse(_follow(job, executor, worker, tail), content_type="text/plain; charset=utf-8")


def _int_param(value, name, errors, *, low, high):
    try:
        number = int(value)
    except ValueError:
        errors[name] = [f"Give a whole number from {low} to {high}."]
        return None
    if not low <= number <= high:
        errors[name] = [f"Give a whole number from {low} to {high}."]
    return number


def _read_log(executor, run_id, worker, *, tail=None, cursor=None):
    """One bounded read (log_reader): a line past PORTAL_LOG_LINE_MAX_BYTES is cut and marked."""
    return executor.read_log(run_id, worker, cursor=cursor, tail=tail, line_max=settings.PORTAL_LOG_LINE_MAX_BYTES)


async def _follow(job, executor, worker, tail):
    """Stream lines as they are written, until the job has ended and its log is read to the end."""
    cursor, run_id = None, job.run_id
    while True:
        ended, current_run = await sync_to_async(
            lambda: Job.objects.filter(pk=job.pk).values_list("status", "run_id").get()
        )()
        ended = ended in lifecycle.FINAL
        if current_run != run_id:  # admitted (again) since we started: follow the new run
            cursor, run_id = None, current_run
        for _ in range(FOLLOW_READS_PER_POLL if run_id else 0):  # each read touches a bounded number of bytes
            read = await sync_to_async(lambda: _read_log(executor, run_id, worker, tail=tail, cursor=cursor))()
            for line in read.lines:
                yield line
            moved, cursor = read.cursor != cursor, read.cursor
            if not moved:
                break
        if ended:
            return
        await asyncio.sleep(FOLLOW_POLL_SECONDS)


# --- TensorBoard (API.md "TensorBoard") ------------------------------------------------
