"""REST endpoints for deployments (API.md "Deployments and inference"). Thin: parse, look up, call a service."""

from __future__ import annotations

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import extend_schema, extend_schema_field
from rest_framework import serializers, status
from rest_framework.generics import GenericAPIView
from rest_framework.response import Response
from rest_framework.views import APIView

from core.api import visible_or_404
from serving import selectors, services
from serving.filters import DeploymentFilter
from serving.models import Deployment


class VariantSerializer(serializers.Serializer):
    name = serializers.SlugField(max_length=40)
    version = serializers.IntegerField(min_value=1)
    weight = serializers.IntegerField(min_value=0, max_value=100, default=0)
    shadow = serializers.BooleanField(default=False)
    replicas = serializers.IntegerField(min_value=1, max_value=16, default=1)


class VariantOutputSerializer(VariantSerializer):
    server = serializers.DictField(read_only=True)


class GuardrailsSerializer(serializers.Serializer):
    max_error_rate_increase = serializers.FloatField(min_value=0, max_value=1, required=False)
    max_p95_latency_ratio = serializers.FloatField(min_value=1, required=False)


class RolloutSerializer(serializers.Serializer):
    """A canary or rolling plan (traffic.CanaryPlan / RollingPlan); every key optional, defaults there."""

    steps = serializers.ListField(
        child=serializers.IntegerField(min_value=1, max_value=100),
        required=False,
        help_text="canary: the new variant's weight at each step, ending at 100",
    )
    step_percent = serializers.IntegerField(min_value=1, max_value=100, required=False, help_text="rolling")
    step_seconds = serializers.FloatField(min_value=0, required=False)
    min_requests = serializers.IntegerField(min_value=0, required=False)
    progress_deadline_seconds = serializers.FloatField(min_value=0, required=False, help_text="rolling")
    guardrails = GuardrailsSerializer(required=False)


class DeploymentInputSerializer(serializers.Serializer):
    name = serializers.SlugField(max_length=63)
    department = serializers.CharField(max_length=40)
    model = serializers.CharField(max_length=63)
    strategy = serializers.ChoiceField(choices=Deployment.Strategy.values, default=Deployment.Strategy.AB)
    variants = VariantSerializer(many=True, allow_empty=False)
    sticky = serializers.BooleanField(default=True)
    rollout = RolloutSerializer(required=False)
    cluster = serializers.CharField(max_length=40, required=False, help_text="Default: the department's first cluster.")


class DeploymentPatchSerializer(serializers.Serializer):
    variants = VariantSerializer(many=True, allow_empty=False, required=False)
    sticky = serializers.BooleanField(required=False)


class PromoteSerializer(serializers.Serializer):
    variant = serializers.SlugField(max_length=40)


class DeploymentOutputSerializer(serializers.Serializer):
    name = serializers.CharField()
    department = serializers.CharField(source="department.slug")
    model = serializers.CharField(source="model.name")
    cluster = serializers.CharField(source="cluster.name", allow_null=True)  # null: local servers
    strategy = serializers.CharField()
    sticky = serializers.BooleanField()
    status = serializers.CharField()
    revision = serializers.IntegerField()
    variants = serializers.SerializerMethodField()
    rollout = serializers.SerializerMethodField()
    serve_url = serializers.SerializerMethodField()
    metrics_url = serializers.SerializerMethodField()
    created_at = serializers.DateTimeField()
    updated_at = serializers.DateTimeField()

    @extend_schema_field(VariantOutputSerializer(many=True))
    def get_variants(self, deployment) -> list[dict]:
        return [selectors.variant_view(v) for v in selectors.variants_of(deployment)]

    @extend_schema_field(OpenApiTypes.OBJECT)
    def get_rollout(self, deployment) -> dict:
        return selectors.rollout_view(deployment)

    def get_serve_url(self, deployment) -> str:
        return f"/serve/{deployment.name}/predict"

    def get_metrics_url(self, deployment) -> str:
        return f"/api/v1/deployments/{deployment.name}/metrics/"


def _get(request, name: str) -> Deployment:
    return visible_or_404(
        selectors.deployment_get(user=request.user, name=name), "No deployment with that name in your departments."
    )


def _out(deployment, code=status.HTTP_200_OK) -> Response:
    return Response(DeploymentOutputSerializer(deployment).data, status=code)


class DeploymentListApi(GenericAPIView):
    serializer_class = DeploymentOutputSerializer
    queryset = Deployment.objects.none()  # for the schema only; requests use deployments_for
    filterset_class = DeploymentFilter  # narrows the caller's deployments; DjangoFilterBackend is the default backend

    @extend_schema(responses=DeploymentOutputSerializer(many=True))
    def get(self, request):
        queryset = selectors.with_variants(self.filter_queryset(selectors.deployments_for(user=request.user)))
        page = self.paginate_queryset(queryset)
        return self.get_paginated_response(DeploymentOutputSerializer(page, many=True).data)

    @extend_schema(request=DeploymentInputSerializer, responses={201: DeploymentOutputSerializer})
    def post(self, request):
        serializer = DeploymentInputSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        deployment = services.deployment_create(user=request.user, **serializer.validated_data)
        return _out(deployment, status.HTTP_201_CREATED)


class DeploymentDetailApi(APIView):
    @extend_schema(responses=DeploymentOutputSerializer)
    def get(self, request, name: str):
        return _out(_get(request, name))

    @extend_schema(request=DeploymentPatchSerializer, responses=DeploymentOutputSerializer)
    def patch(self, request, name: str):
        deployment = _get(request, name)
        serializer = DeploymentPatchSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        deployment = services.deployment_update(user=request.user, deployment=deployment, **serializer.validated_data)
        return _out(deployment)


class DeploymentPromoteApi(APIView):
    @extend_schema(request=PromoteSerializer, responses=DeploymentOutputSerializer)
    def post(self, request, name: str):
        deployment = _get(request, name)
        serializer = PromoteSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        return _out(
            services.deployment_promote(
                user=request.user, deployment=deployment, variant=serializer.validated_data["variant"]
            )
        )


class DeploymentRollbackApi(APIView):
    @extend_schema(request=None, responses=DeploymentOutputSerializer)
    def post(self, request, name: str):
        return _out(services.deployment_rollback(user=request.user, deployment=_get(request, name)))


class LatencySerializer(serializers.Serializer):
    p50 = serializers.FloatField(allow_null=True)
    p95 = serializers.FloatField(allow_null=True)
    p99 = serializers.FloatField(allow_null=True)


class OutcomesSerializer(serializers.Serializer):
    count = serializers.IntegerField()
    successes = serializers.IntegerField()
    rate = serializers.FloatField(allow_null=True)


class VariantMetricsSerializer(serializers.Serializer):
    variant = serializers.CharField()
    model_version = serializers.IntegerField()
    weight = serializers.IntegerField()
    shadow = serializers.BooleanField()
    requests = serializers.IntegerField()
    errors = serializers.IntegerField()
    error_rate = serializers.FloatField(allow_null=True)
    latency_ms = LatencySerializer()
    outcomes = OutcomesSerializer()
    agreement = serializers.DictField(required=False)
    server = serializers.DictField()


class ComparisonSerializer(serializers.Serializer):
    p_value = serializers.FloatField(allow_null=True)
    winner = serializers.CharField(allow_null=True)
    significant = serializers.BooleanField()


class MetricsSerializer(serializers.Serializer):
    deployment = serializers.CharField()
    revision = serializers.IntegerField()
    strategy = serializers.CharField()
    status = serializers.CharField()
    variants = VariantMetricsSerializer(many=True)
    comparison = ComparisonSerializer()
    rollout = serializers.DictField()


class DeploymentMetricsApi(APIView):
    @extend_schema(responses=MetricsSerializer)
    def get(self, request, name: str):
        return Response(selectors.deployment_metrics(deployment=_get(request, name)))
