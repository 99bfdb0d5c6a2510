"""REST endpoints of the model registry (API.md "Models"). Thin: parse, look up, call a service."""

from __future__ import annotations

import difflib

from drf_spectacular.utils import extend_schema
from rest_framework import generics, serializers, status
from rest_framework.exceptions import ValidationError
from rest_framework.response import Response
from rest_framework.views import APIView

from core.api import visible_or_404
from models_registry import selectors, services
from models_registry.filters import ModelFilter
from models_registry.models import ModelVersion, RegisteredModel


def _parse(serializer_class, data, *, partial: bool = False) -> dict:
    """Validated input; unknown fields are named too, with a guess, so that a typo is not silently ignored."""
    if not isinstance(data, dict):
        raise ValidationError({"non_field_errors": ["Send a JSON object."]})
    serializer = serializer_class(data=data, partial=partial)
    errors = {} if serializer.is_valid() else dict(serializer.errors)
    fields = serializer.fields
    for unknown in sorted(set(data) - set(fields)):
        guess = difflib.get_close_matches(unknown, fields, n=1)
        errors[unknown] = [f"Unknown field{f'; did you mean {guess[0]!r}?' if guess else '.'}"]
    if errors:
        raise ValidationError(errors)
    return serializer.validated_data


def _visible_model(request, name: str) -> RegisteredModel:
    return visible_or_404(
        selectors.model_get(user=request.user, name=name), "No model with that name in your departments."
    )


def _visible_version(request, name: str, number: int) -> ModelVersion:
    return visible_or_404(
        selectors.version_get(model=_visible_model(request, name), number=number),
        "The model has no version with that number.",
    )


# --- Models ------------------------------------------------------------------------------------


class ModelInputSerializer(serializers.Serializer):
    name = serializers.CharField(max_length=63)
    department = serializers.CharField(max_length=40)
    description = serializers.CharField(max_length=10_000, required=False, allow_blank=True, default="")


class ModelOutputSerializer(serializers.Serializer):
    name = serializers.CharField()
    department = serializers.CharField(source="department.slug")
    description = serializers.CharField()
    created_by = serializers.CharField(source="created_by.username", allow_null=True, default=None)
    created_at = serializers.DateTimeField()
    version_count = serializers.SerializerMethodField()
    latest_version = serializers.SerializerMethodField()
    aliases = serializers.SerializerMethodField()

    def get_version_count(self, model) -> int:
        if hasattr(model, "version_count"):  # annotated by selectors.models_for
            return model.version_count
        return model.versions.count()

    def get_latest_version(self, model) -> int | None:
        if hasattr(model, "latest_version"):
            return model.latest_version
        return model.versions.order_by("-version").values_list("version", flat=True).first()

    def get_aliases(self, model) -> dict[str, int]:
        """alias -> version number"""
        return selectors.aliases_of(model=model)


class ModelListApi(generics.ListAPIView):
    serializer_class = ModelOutputSerializer
    filterset_class = ModelFilter  # narrows the caller's models; DjangoFilterBackend is the default backend

    def get_queryset(self):
        return selectors.models_for(user=self.request.user)

    @extend_schema(request=ModelInputSerializer, responses={201: ModelOutputSerializer})
    def post(self, request):
        data = _parse(ModelInputSerializer, request.data)
        model = services.model_create(user=request.user, **data)
        return Response(ModelOutputSerializer(model).data, status=status.HTTP_201_CREATED)


class ModelDetailApi(APIView):
    @extend_schema(responses=ModelOutputSerializer)
    def get(self, request, name):
        return Response(ModelOutputSerializer(_visible_model(request, name)).data)


# --- Versions ----------------------------------------------------------------------------------


class VersionInputSerializer(serializers.Serializer):
    source_job = serializers.IntegerField(required=False, allow_null=True, help_text="id of a succeeded job")
    artifact_path = serializers.CharField(
        max_length=1000,
        required=False,
        allow_blank=True,
        trim_whitespace=False,
        help_text="relative to the job's PORTAL_OUTPUT_DIR, e.g. model.joblib",
    )
    artifact_uri = serializers.CharField(
        max_length=2000,
        required=False,
        allow_blank=True,
        help_text="store://<model>/<version>/<file>, or file:///path inside "
        "PORTAL_ARTIFACT_IMPORT_DIRS (copied into the store)",
    )
    framework = serializers.CharField(max_length=20, default="sklearn")
    metrics = serializers.DictField(
        child=serializers.FloatField(),
        required=False,
        default=dict,
        help_text="name -> number; wins over the metrics read from the job's TensorBoard",
    )
    tags = serializers.DictField(
        child=serializers.CharField(allow_blank=True, max_length=500), required=False, default=dict
    )


class VersionUpdateSerializer(serializers.Serializer):
    aliases = serializers.ListField(
        child=serializers.CharField(max_length=40),
        required=False,
        max_length=100,
        help_text="every alias this version should carry; each is moved here from "
        "another version, and the version's unlisted aliases are removed",
    )
    tags = serializers.DictField(
        child=serializers.CharField(allow_blank=True, allow_null=True, max_length=500),
        required=False,
        help_text="merged into the tags; a null value removes that tag",
    )


class LineageSerializer(serializers.Serializer):
    job = serializers.IntegerField(allow_null=True, default=None)
    job_name = serializers.CharField(allow_null=True, default=None)
    department = serializers.CharField(allow_null=True, default=None)
    code_url = serializers.CharField(allow_null=True, default=None)
    code_ref = serializers.CharField(allow_null=True, default=None)
    commit = serializers.CharField(allow_null=True, default=None)
    image = serializers.CharField(allow_null=True, default=None)
    image_ref = serializers.CharField(allow_null=True, default=None)
    command = serializers.CharField(allow_null=True, default=None)
    requirements = serializers.ListField(child=serializers.CharField(), allow_null=True, default=None)
    submitted_by = serializers.CharField(allow_null=True, default=None)
    finished_at = serializers.DateTimeField(allow_null=True, default=None)
    source_uri = serializers.CharField(allow_null=True, default=None)


class VersionOutputSerializer(serializers.Serializer):
    model = serializers.CharField(source="model.name")
    version = serializers.IntegerField()
    framework = serializers.CharField()
    artifact_uri = serializers.CharField()
    artifact_sha256 = serializers.CharField(help_text="empty until the version is ready")
    status = serializers.ChoiceField(
        choices=ModelVersion.Status.choices,
        help_text="registering (the artifact is being copied from the job), ready, or "
        "failed; only a ready version can get aliases or be deployed",
    )
    status_message = serializers.CharField(help_text="why it failed (empty otherwise)")
    source_job = serializers.IntegerField(source="source_job_id", allow_null=True)
    lineage = LineageSerializer()
    metrics = serializers.DictField(child=serializers.FloatField())
    tags = serializers.DictField(child=serializers.CharField())
    aliases = serializers.SerializerMethodField()
    created_by = serializers.CharField(source="created_by.username", allow_null=True, default=None)
    created_at = serializers.DateTimeField()

    def get_aliases(self, version) -> list[str]:
        return sorted(alias.name for alias in version.aliases.all())


class VersionListApi(generics.ListAPIView):
    serializer_class = VersionOutputSerializer

    def get_queryset(self):
        if getattr(self, "swagger_fake_view", False):  # drf-spectacular inspecting, no request
            return ModelVersion.objects.none()
        return selectors.versions_of(model=_visible_model(self.request, self.kwargs["name"]))

    @extend_schema(request=VersionInputSerializer, responses={201: VersionOutputSerializer})
    def post(self, request, name):
        model = _visible_model(request, name)
        data = _parse(VersionInputSerializer, request.data)
        version = services.version_register(user=request.user, model=model, **data)
        version = selectors.version_get(model=model, number=version.version)
        return Response(VersionOutputSerializer(version).data, status=status.HTTP_201_CREATED)


class VersionDetailApi(APIView):
    @extend_schema(responses=VersionOutputSerializer)
    def get(self, request, name, number):
        return Response(VersionOutputSerializer(_visible_version(request, name, number)).data)

    @extend_schema(request=VersionUpdateSerializer, responses=VersionOutputSerializer)
    def patch(self, request, name, number):
        version = _visible_version(request, name, number)
        data = _parse(VersionUpdateSerializer, request.data)
        services.version_update(user=request.user, version=version, **data)
        return Response(VersionOutputSerializer(selectors.version_get(model=version.model, number=number)).data)
