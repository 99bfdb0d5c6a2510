"""REST endpoints for department storage (API.md "Storage"). Thin: look up, check, call clusters.storage.

Members of a department see its volumes; its dept_admins and platform admins create, change and delete
them (members get 403); volumes of other departments answer 404.
"""

from __future__ import annotations

import difflib

from django.http import Http404
from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import generics, serializers, status
from rest_framework.fields import SkipField
from rest_framework.response import Response
from rest_framework.views import APIView

from core.errors import InvalidInput
from clusters import storage as services
from clusters.models import Storage
from accounts import selectors as account_selectors
from clusters import selectors as cluster_selectors

KIND_HELP = "local (a directory on the cluster's hosts) or pvc (a PersistentVolumeClaim in the department's namespace)"
LOCAL_PATH_HELP = ("For local storage: an existing directory, absolute and without '.', '..' or '//'; not inside, "
                   "equal to or containing the portal's data root, checkout or Python, nor a system directory.")


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
    pvc_name = serializers.CharField(max_length=253, required=False, allow_blank=True,
                                     help_text="For PVC storage: the claim's name")
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


def parse_input(serializer: type[serializers.Serializer], data, *, partial: bool = False) -> tuple[dict, dict]:
    """Each field on its own, so that one bad field does not hide the problems of the others."""
    if not isinstance(data, dict):
        raise InvalidInput("Send a JSON object describing the storage volume.")
    fields = serializer().fields
    values, errors = {}, {}
    for name, field in fields.items():
        if partial and name not in data:
            continue
        try:
            values[name] = field.run_validation(field.get_value(data))
        except serializers.ValidationError as exc:
            errors[name] = exc.detail
        except SkipField:
            pass
    for unknown in sorted(set(data) - set(fields)):
        if partial and unknown in FIXED_ON_PATCH:
            errors[unknown] = [FIXED_ON_PATCH[unknown]]
            continue
        guess = difflib.get_close_matches(unknown, fields, n=1)
        errors[unknown] = [f"Unknown field{f'; did you mean {guess[0]!r}?' if guess else '.'}"]
    return values, errors


def _visible(request, storage_id: int) -> Storage:
    storage = cluster_selectors.storages_for(user=request.user).filter(pk=storage_id).first()
    if storage is None:
        raise Http404("No storage with that id in your departments.")
    return storage


class StorageListApi(generics.ListAPIView):
    """The storage volumes of the caller's departments; department admins add volumes to theirs."""

    serializer_class = StorageOutputSerializer

    def get_queryset(self):
        return cluster_selectors.storages_for(user=self.request.user)

    @extend_schema(request=StorageInputSerializer, responses={201: StorageOutputSerializer})
    def post(self, request):
        values, type_errors = parse_input(StorageInputSerializer, request.data)
        slug = values.pop("department", None)
        department = account_selectors.department_get(user=request.user, slug=slug) if slug else None
        if department is None:
            if "department" not in type_errors:
                type_errors["department"] = [f"You are not a member of a department called {slug!r}."]
            raise InvalidInput(type_errors)
        storage = services.storage_create(
            actor=request.user, department=department, name=values.get("name", ""), kind=values.get("kind", ""),
            local_path=values.get("local_path", ""), pvc_name=values.get("pvc_name", ""),
            description=values.get("description", ""), type_errors=type_errors,
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
        values, type_errors = parse_input(StoragePatchSerializer, request.data, partial=True)
        storage = services.storage_update(actor=request.user, storage=storage, values=values, type_errors=type_errors)
        return Response(StorageOutputSerializer(storage).data)

    @extend_schema(responses={204: None, 409: OpenApiResponse(description="Unfinished jobs mount the volume; "
                                                                          "the message names them.")})
    def delete(self, request, storage_id):
        """Delete a volume's record (its data stays); 409 naming the jobs while unfinished jobs mount it."""
        services.storage_delete(actor=request.user, storage=_visible(request, storage_id))
        return Response(status=status.HTTP_204_NO_CONTENT)
