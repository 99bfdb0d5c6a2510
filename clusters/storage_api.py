"""REST endpoints for department storage (API.md "Storage"). Thin: look up, check, call clusters.storage.

Members of a department see its volumes; its dept_admins and platform admins create, change and delete
them (members get 403); volumes of other departments answer 404.
"""

from __future__ import annotations

from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import generics, serializers, status
from rest_framework.response import Response
from rest_framework.views import APIView

from accounts import selectors as account_selectors
from clusters import selectors as cluster_selectors
from clusters import storage as services
from clusters.models import Storage
from core.api import parse_input, visible_or_404
from core.errors import InvalidInput

KIND_HELP = "local (a directory on the cluster's hosts) or pvc (a PersistentVolumeClaim in the department's namespace)"
LOCAL_PATH_HELP = (
    "For local storage: an existing directory, absolute and without '.', '..' or '//'; not inside, "
    "equal to or containing the portal's data root, checkout or Python, nor a system directory."
)


class StorageOutputSerializer(serializers.Serializer):
    id = serializers.IntegerField()
    name = serializers.CharField()
    department = serializers.CharField(source="department.slug")
    kind = serializers.CharField(help_text=KIND_HELP)
    local_path = serializers.CharField(help_text="Empty for PVC storage.")
    pvc_name = serializers.CharField(help_text="Empty for local storage.")
    description = serializers.CharField()


class StorageInputSerializer(serializers.Serializer):
    department = serializers.CharField(max_length=40, help_text="Slug of the department that owns the volume")
    name = serializers.CharField(max_length=60, help_text="DNS label; jobs mount the volume by it, so it never changes")
    kind = serializers.ChoiceField(choices=Storage.Kind.values, help_text=KIND_HELP)
    local_path = serializers.CharField(max_length=500, required=False, allow_blank=True, help_text=LOCAL_PATH_HELP)
    pvc_name = serializers.CharField(
        max_length=253, required=False, allow_blank=True, help_text="For PVC storage: the claim's name"
    )
    description = serializers.CharField(max_length=200, required=False, allow_blank=True)


class StoragePatchSerializer(serializers.Serializer):
    kind = serializers.ChoiceField(choices=Storage.Kind.values, required=False, help_text=KIND_HELP)
    local_path = serializers.CharField(max_length=500, required=False, allow_blank=True, help_text=LOCAL_PATH_HELP)
    pvc_name = serializers.CharField(max_length=253, required=False, allow_blank=True)
    description = serializers.CharField(max_length=200, required=False, allow_blank=True)


FIXED_ON_PATCH = {
    "department": "A volume stays in its department; create one in the other department instead.",
    "name": "Jobs mount a volume by its name, so it cannot change; create a new volume instead.",
}


def _visible(request, storage_id: int) -> Storage:
    return visible_or_404(
        cluster_selectors.storages_for(user=request.user).filter(pk=storage_id).first(),
        "No storage with that id in your departments.",
    )


class StorageListApi(generics.ListAPIView):
    """The storage volumes of the caller's departments; department admins add volumes to theirs."""

    serializer_class = StorageOutputSerializer

    def get_queryset(self):
        return cluster_selectors.storages_for(user=self.request.user)

    @extend_schema(request=StorageInputSerializer, responses={201: StorageOutputSerializer})
    def post(self, request):
        values, type_errors = parse_input(StorageInputSerializer, request.data, what="the storage volume")
        department = account_selectors.department_for_input(
            user=request.user, slug=values.pop("department", None), errors=type_errors
        )
        if department is None:
            raise InvalidInput(type_errors)
        storage = services.storage_create(
            actor=request.user,
            department=department,
            name=values.get("name", ""),
            kind=values.get("kind", ""),
            local_path=values.get("local_path", ""),
            pvc_name=values.get("pvc_name", ""),
            description=values.get("description", ""),
            type_errors=type_errors,
        )
        return Response(StorageOutputSerializer(storage).data, status=status.HTTP_201_CREATED)


class StorageDetailApi(APIView):
    @extend_schema(responses=StorageOutputSerializer)
    def get(self, request, storage_id):
        return Response(StorageOutputSerializer(_visible(request, storage_id)).data)

    @extend_schema(request=StoragePatchSerializer, responses=StorageOutputSerializer)
    def patch(self, request, storage_id):
        """Change a volume's kind, location or description; fields left out keep their values."""
        storage = _visible(request, storage_id)
        values, type_errors = parse_input(
            StoragePatchSerializer, request.data, what="the storage volume", partial=True, fixed_on_patch=FIXED_ON_PATCH
        )
        storage = services.storage_update(actor=request.user, storage=storage, values=values, type_errors=type_errors)
        return Response(StorageOutputSerializer(storage).data)

    @extend_schema(
        responses={
            204: None,
            409: OpenApiResponse(description="Unfinished jobs mount the volume; the message names them."),
        }
    )
    def delete(self, request, storage_id):
        """Delete a volume's record (its data stays); 409 naming the jobs while unfinished jobs mount it."""
        services.storage_delete(actor=request.user, storage=_visible(request, storage_id))
        return Response(status=status.HTTP_204_NO_CONTENT)
