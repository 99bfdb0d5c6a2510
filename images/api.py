"""REST endpoints for image builds (``/api/v1/image-builds/``). Thin: parse, look up, call a service."""

from __future__ import annotations

from django.http import HttpResponse
from django.urls import reverse
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import extend_schema
from rest_framework import generics, serializers, status
from rest_framework.exceptions import APIException
from rest_framework.response import Response
from rest_framework.views import APIView

from clusters.errors import ExecutorError
from core.api import parse_input, visible_or_404
from core.celery import TransientError
from images import selectors, services
from images.filters import BuildFilter
from images.models import ImageBuild


class BuildInputSerializer(serializers.Serializer):
    name = serializers.CharField(max_length=60, help_text="Name of the catalogue image it becomes")
    department = serializers.CharField(max_length=40)
    cluster = serializers.CharField(
        max_length=40,
        required=False,
        allow_blank=True,
        help_text="A Kubernetes cluster with build_registry (default: the first one)",
    )
    framework = serializers.CharField(max_length=20, default="python")
    base_packages = serializers.ListField(child=serializers.CharField(max_length=1000), default=list, max_length=1000)
    dockerfile = serializers.CharField(
        max_length=1_000_000,
        required=False,
        allow_blank=True,
        trim_whitespace=False,
        help_text="Dockerfile text; or give code_url instead",
    )
    code_url = serializers.CharField(required=False, allow_blank=True)  # length and form: core.code_url
    code_ref = serializers.CharField(max_length=500, required=False, allow_blank=True)
    dockerfile_path = serializers.CharField(max_length=500, required=False, allow_blank=True)
    context_path = serializers.CharField(max_length=500, required=False, allow_blank=True)


def parse_build_input(data) -> tuple[dict, dict]:
    """Each field on its own, so that one bad field does not hide the problems of the others."""
    return parse_input(BuildInputSerializer, data, what="the build")


class BuildOutputSerializer(serializers.ModelSerializer):
    department = serializers.CharField(source="department.slug")
    cluster = serializers.CharField(source="cluster.name")
    requested_by = serializers.CharField(source="requested_by.username")
    source = serializers.CharField()
    image = serializers.SerializerMethodField(help_text="Catalogue image name once built")
    base_packages = serializers.ListField(child=serializers.CharField())
    logs_url = serializers.SerializerMethodField()

    class Meta:
        model = ImageBuild
        fields = [
            "id",
            "name",
            "department",
            "cluster",
            "framework",
            "base_packages",
            "source",
            "dockerfile",
            "code_url",
            "code_ref",
            "dockerfile_path",
            "context_path",
            "destination",
            "status",
            "message",
            "requested_by",
            "created_at",
            "launched_at",
            "started_at",
            "finished_at",
            "image",
            "logs_url",
        ]

    def get_image(self, build) -> str | None:
        return build.image.name if build.image else None

    def get_logs_url(self, build) -> str:
        return reverse("api-image-build-logs", args=[build.pk])


class ClusterUnavailable(APIException):
    status_code = status.HTTP_503_SERVICE_UNAVAILABLE
    default_code = "cluster_unavailable"


def _visible_build(request, build_id) -> ImageBuild:
    return visible_or_404(
        selectors.build_get(user=request.user, build_id=build_id), "No image build with that id in your departments."
    )


class BuildListApi(generics.ListAPIView):
    serializer_class = BuildOutputSerializer
    filterset_class = BuildFilter  # narrows the caller's builds; DjangoFilterBackend is the default backend

    def get_queryset(self):
        return selectors.builds_for(user=self.request.user)

    @extend_schema(request=BuildInputSerializer, responses={201: BuildOutputSerializer})
    def post(self, request):
        values, type_errors = parse_build_input(request.data)
        build = services.build_submit(user=request.user, data=values, type_errors=type_errors)
        return Response(BuildOutputSerializer(build).data, status=status.HTTP_201_CREATED)


class BuildDetailApi(APIView):
    @extend_schema(responses=BuildOutputSerializer)
    def get(self, request, build_id):
        return Response(BuildOutputSerializer(_visible_build(request, build_id)).data)


class BuildCancelApi(APIView):
    @extend_schema(request=None, responses={200: BuildOutputSerializer})
    def post(self, request, build_id):
        build = services.build_cancel(user=request.user, build=_visible_build(request, build_id))
        return Response(BuildOutputSerializer(build).data)


class BuildLogsApi(APIView):
    @extend_schema(responses={(200, "text/plain"): OpenApiTypes.STR})
    def get(self, request, build_id):
        build = _visible_build(request, build_id)
        try:
            text = services.build_logs(build=build)
        except (ExecutorError, TransientError) as exc:
            raise ClusterUnavailable(f"Cannot read the build's log from cluster {build.cluster.name}: {exc}") from exc
        return HttpResponse(text, content_type="text/plain; charset=utf-8")


class ImageListApi(generics.ListAPIView):
    class ImageOutputSerializer(serializers.Serializer):
        name = serializers.CharField()
        framework = serializers.CharField()
        image = serializers.CharField()
        official = serializers.BooleanField()
        department = serializers.CharField(source="department.slug", allow_null=True, default=None)

    serializer_class = ImageOutputSerializer

    def get_queryset(self):
        return selectors.images_for(user=self.request.user)
