"""REST endpoints that show quotas with live usage (API.md "Identity and tenancy", "Usage"): a department with
its quotas and what it holds, setting quotas and the what-if preview, the usage report (JSON or CSV), and the
clusters with their pools' allocation. Thin: parse, look up, call a service.

They live in jobs/ because what a department holds is counted from its jobs (jobs.usage)."""

import csv
import io

from django.utils import timezone
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import generics, serializers, status
from rest_framework.exceptions import PermissionDenied
from rest_framework.renderers import BaseRenderer, JSONRenderer
from rest_framework.response import Response
from rest_framework.settings import api_settings
from rest_framework.views import APIView

from accounts import permissions
from accounts import selectors as account_selectors
from clusters import selectors as cluster_selectors
from clusters.services import cluster_health
from core.api import visible_or_404
from jobs import admission
from jobs import usage as job_usage
from quotas import services


class QuotaSerializer(serializers.Serializer):
    cluster = serializers.CharField(max_length=40)
    gpu_type = serializers.CharField(max_length=40)
    nominal = serializers.IntegerField(min_value=0, max_value=100_000)
    borrowing_limit = serializers.IntegerField(
        min_value=0, max_value=100_000, allow_null=True, required=False, default=None
    )
    lending_limit = serializers.IntegerField(
        min_value=0, max_value=100_000, allow_null=True, required=False, default=None
    )


class QuotaUsageSerializer(QuotaSerializer):
    in_use = serializers.FloatField(help_text="GPUs held by the department's admitted jobs.")
    borrowed = serializers.FloatField(help_text="GPUs in use beyond nominal, borrowed from idle capacity.")
    pending = serializers.FloatField(help_text="GPUs requested by the department's queued jobs.")


class DepartmentDetailSerializer(serializers.Serializer):
    slug = serializers.CharField()
    name = serializers.CharField()
    role = serializers.CharField(allow_null=True)
    queueing = serializers.CharField(help_text="strict or best_effort FIFO within the department")
    lost_gpu_seconds = serializers.FloatField(help_text="GPU-seconds of the department's runs that were preempted")
    quotas = QuotaSerializer(many=True)
    usage = QuotaUsageSerializer(many=True)


def _department_detail(request, department) -> dict:
    rows = [
        {
            "cluster": quota.pool.cluster.name,
            "gpu_type": quota.pool.gpu_type,
            # The stored nominal, which a PUT sends back; active loans are in /api/v1/quota-loans/.
            "nominal": quota.nominal if quota.own_nominal is None else quota.own_nominal,
            "borrowing_limit": quota.borrowing_limit,
            "lending_limit": quota.lending_limit,
            "in_use": usage.in_use,
            "borrowed": usage.borrowed,
            "pending": usage.pending,
        }
        for quota, usage in job_usage.department_quotas(department=department)
    ]
    return DepartmentDetailSerializer(
        {
            "slug": department.slug,
            "name": department.name,
            "role": permissions.roles(request.user).get(department.pk),
            "queueing": department.queueing,
            "lost_gpu_seconds": job_usage.lost_gpu_seconds(department=department),
            "quotas": rows,
            "usage": rows,
        }
    ).data


def _visible_department(request, slug):
    return visible_or_404(
        account_selectors.department_get(user=request.user, slug=slug), "No department with that slug among yours."
    )


class DepartmentDetailApi(APIView):
    @extend_schema(responses=DepartmentDetailSerializer)
    def get(self, request, slug):
        return Response(_department_detail(request, _visible_department(request, slug)))


class DepartmentQuotasApi(APIView):
    """Replace a department's quotas (platform admins only)."""

    @extend_schema(request=QuotaSerializer(many=True), responses=DepartmentDetailSerializer)
    def put(self, request, slug):
        department = _visible_department(request, slug)
        if not permissions.can_set_quotas(request.user):
            raise PermissionDenied("Only platform admins can change quotas.")
        services.quota_set(actor=request.user, department=department, quotas=_parse_quotas(request.data))
        return Response(_department_detail(request, department), status=status.HTTP_200_OK)


class QuotaPreviewApi(APIView):
    """What-if: which waiting jobs proposed quotas would admit and which running jobs they would preempt. Changes nothing."""

    class QuotaPreviewOutputSerializer(serializers.Serializer):
        admitted = serializers.ListField(child=serializers.DictField(), help_text="[{id, name, department}]")
        preempted = serializers.ListField(
            child=serializers.DictField(), help_text="[{id, name, department, reason, message}]"
        )
        waiting = serializers.ListField(
            child=serializers.DictField(), help_text="[{id, name, department, reason, message}]"
        )

    @extend_schema(request=QuotaSerializer(many=True), responses=QuotaPreviewOutputSerializer)
    def post(self, request, slug):
        department = _visible_department(request, slug)
        if not permissions.can_set_quotas(request.user):
            raise PermissionDenied("Only platform admins can preview quota changes.")
        items = _parse_quotas(request.data)
        decisions = admission.quota_preview(department=department, quotas=items)
        jobs = job_usage.jobs_by_id(
            ids=[a.job_id for a in decisions.admissions]
            + [p.job_id for p in decisions.preemptions]
            + [w.job_id for w in decisions.waiting]
        )

        def ref(job_id, **extra):
            job = jobs[job_id]
            return {"id": job.pk, "name": job.name, "department": job.department.slug, **extra}

        return Response(
            {
                "admitted": [ref(a.job_id) for a in decisions.admissions],
                "preempted": [ref(p.job_id, reason=p.reason, message=p.message) for p in decisions.preemptions],
                "waiting": [ref(w.job_id, reason=w.reason, message=w.message) for w in decisions.waiting],
            }
        )


def _parse_quotas(data) -> list[dict]:
    if not isinstance(data, list):
        raise serializers.ValidationError(
            {"quotas": ["Send a JSON list of quota objects (cluster, gpu_type, nominal ...)."]}
        )
    items = [QuotaSerializer(data=item) for item in data]
    if not all([item.is_valid() for item in items]):
        raise serializers.ValidationError({"quotas": [item.errors for item in items]})
    return [item.validated_data for item in items]


USAGE_COLUMNS = {"day": ["day"], "user": ["user"], "gpu_type": ["cluster", "gpu_type"]}


class UsageCsvRenderer(BaseRenderer):
    """The usage report's rows as CSV with a header row (``?format=csv``)."""

    media_type = "text/csv"
    format = "csv"
    charset = "utf-8"

    def render(self, data, accepted_media_type=None, renderer_context=None):
        rows = data.get("rows", [])
        columns = ["department", *USAGE_COLUMNS[data.get("group_by", "day")], "gpu_hours"]
        out = io.StringIO()
        writer = csv.DictWriter(out, fieldnames=columns, lineterminator="\n")
        writer.writeheader()
        # A cell starting with = + - @ is a formula to a spreadsheet; usernames may start with + - @.
        writer.writerows(
            {
                key: f"'{value}" if isinstance(value, str) and value[:1] in "=+-@" else value
                for key, value in row.items()
            }
            for row in rows
        )
        return out.getvalue().encode(self.charset)


class UsageApi(APIView):
    """GPU-hours the caller's departments used per day, user or GPU type, from when jobs held GPUs (UTC days)."""

    renderer_classes = [*api_settings.DEFAULT_RENDERER_CLASSES, UsageCsvRenderer]

    class UsageOutputSerializer(serializers.Serializer):
        class UsageTotalSerializer(serializers.Serializer):
            department = serializers.CharField()
            gpu_hours = serializers.FloatField()
            lost_gpu_hours = serializers.FloatField(
                help_text="GPU-hours of preempted runs since their last checkpoint (part of gpu_hours)."
            )

        from_ = serializers.DateField(help_text="First day, inclusive (UTC).")
        to = serializers.DateField(help_text="Last day, inclusive (UTC).")
        group_by = serializers.CharField(help_text="day, user or gpu_type")
        gpu_hours = serializers.FloatField(help_text="Total over every row.")
        lost_gpu_hours = serializers.FloatField(
            help_text="Of gpu_hours, what preemptions lost: each preempted run since its last checkpoint, on the day "
            "it was preempted."
        )
        totals = UsageTotalSerializer(many=True, help_text="GPU-hours per department, zero included.")
        rows = serializers.ListField(
            child=serializers.DictField(),
            help_text='[{"department", "day" | "user" | "cluster" + "gpu_type", "gpu_hours"}]; groups without usage are left out.',
        )

        def get_fields(self):
            # "from" is a Python keyword, so the field is declared as from_ and renamed here.
            fields = super().get_fields()
            return {"from": fields.pop("from_"), **fields}

    @extend_schema(
        parameters=[
            OpenApiParameter("department", str, description="A department slug; default: all of yours."),
            OpenApiParameter("from", OpenApiTypes.DATE, description="First day (UTC), default 29 days before `to`."),
            OpenApiParameter("to", OpenApiTypes.DATE, description="Last day (UTC), default today."),
            OpenApiParameter("group_by", str, enum=job_usage.USAGE_GROUPS, description="Default: day."),
            OpenApiParameter("format", str, enum=["json", "csv"], description="csv: a download with a header row."),
        ],
        responses={(200, "application/json"): UsageOutputSerializer, (200, "text/csv"): OpenApiTypes.STR},
    )
    def get(self, request):
        slug = request.query_params.get("department", "")
        departments = [_visible_department(request, slug)] if slug else permissions.visible_departments(request.user)
        usage = job_usage.usage_get(
            departments=departments,
            start=request.query_params.get("from", ""),
            end=request.query_params.get("to", ""),
            group_by=request.query_params.get("group_by", "day"),
            now=timezone.now(),
        )
        body = {
            "from": usage.start,
            "to": usage.end,
            "group_by": usage.group_by,
            "gpu_hours": usage.gpu_hours,
            "lost_gpu_hours": usage.lost_gpu_hours,
            "totals": usage.totals(),
            "rows": usage.rows(),
        }
        response = Response(self.UsageOutputSerializer(body).data)
        if request.accepted_renderer.format == "csv":
            name = f"usage-{slug or 'all'}-{usage.group_by}-{usage.start}-{usage.end}.csv"
            response["Content-Disposition"] = f'attachment; filename="{name}"'
        return response

    def handle_exception(self, exc):
        # Errors stay JSON even when CSV was asked for: a person has to read them.
        self.request.accepted_renderer, self.request.accepted_media_type = JSONRenderer(), JSONRenderer.media_type
        return super().handle_exception(exc)


class ClusterListApi(generics.ListAPIView):
    class GpuPoolSerializer(serializers.Serializer):
        gpu_type = serializers.CharField()
        gpu_memory_gb = serializers.IntegerField()
        nodes = serializers.IntegerField()
        gpus_per_node = serializers.IntegerField()
        total = serializers.IntegerField()
        allocated = serializers.SerializerMethodField()
        shareable = serializers.BooleanField()
        placement = serializers.CharField(
            help_text="How the scheduler places this pool's jobs: binpack, spread or fragmentation"
        )

        def get_allocated(self, pool) -> float:
            return self.context["allocated"].get(pool.pk, 0)

    class ClusterOutputSerializer(serializers.Serializer):
        name = serializers.CharField()
        backend = serializers.CharField()
        pools = serializers.SerializerMethodField()
        health = serializers.SerializerMethodField(
            help_text="reachable, unreachable, not_ready (the Training Operator is missing) or unknown (not checked yet)"
        )
        health_reason = serializers.SerializerMethodField(help_text="why it takes no jobs, e.g. no_connection_settings")
        health_message = serializers.SerializerMethodField()
        health_checked_at = serializers.DateTimeField(allow_null=True)

        def get_health(self, cluster) -> str:
            return cluster_health(cluster).state

        def get_health_reason(self, cluster) -> str:
            return cluster_health(cluster).reason

        def get_health_message(self, cluster) -> str:
            return cluster_health(cluster).message

        def get_pools(self, cluster) -> list[dict]:
            return ClusterListApi.GpuPoolSerializer(cluster.pools.all(), many=True, context=self.context).data

    serializer_class = ClusterOutputSerializer

    def get_queryset(self):
        return cluster_selectors.clusters_with_pools()

    def get_serializer_context(self):
        return {**super().get_serializer_context(), "allocated": job_usage.pool_allocated()}
