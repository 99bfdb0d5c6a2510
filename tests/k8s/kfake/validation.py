"""Schema validation of what the fake receives, as the API server's OpenAPI validation does.

Every created or replaced object of a kind in ``VALIDATED`` (core kinds, through kubernetes-validate) or of
a CRD the portal ships (``clusters.manifest_validation.CRD_FILES``: the Training Operator's, the MPI
Operator's and KServe's openAPIV3Schema) goes through ``manifest_problems``; problems are a 422 Status,
reason Invalid, one cause each. ``fake.validators[(apiVersion, kind)] = fn(manifest) -> list[str]`` adds or
replaces the validator of one kind. The server-owned fields (uid, resourceVersion, ownerReferences,
status, ...) are left out before validating, as the portal's own manifests never carry them.
"""

from __future__ import annotations

import copy

from clusters.manifest_validation import CRD_FILES, manifest_problems
from tests.k8s.kfake.api import VALIDATED, ApiError


class ValidationMixin:
    """``_validate`` for KubeFake (raises the 422 ApiError)."""

    validators: dict

    def _validate(self, obj: dict) -> None:
        key = (obj.get("apiVersion"), obj.get("kind"))
        validator = self.validators.get(key)
        if validator is None and (obj.get("kind") in VALIDATED or key in CRD_FILES):
            validator = manifest_problems
        problems = validator(_without_server_fields(obj)) if validator else []
        if problems:
            name = (obj.get("metadata") or {}).get("name", "")
            raise ApiError(
                422,
                "Invalid",
                f'{obj.get("kind")} "{name}" is invalid: ' + "; ".join(problems),
                name=name,
                kind=obj.get("kind"),
                causes=[{"message": p} for p in problems],
            )


def _without_server_fields(obj: dict) -> dict:
    clean = copy.deepcopy(obj)
    meta = clean.get("metadata") or {}
    for key in (
        "uid",
        "resourceVersion",
        "creationTimestamp",
        "generation",
        "deletionTimestamp",
        "deletionGracePeriodSeconds",
        "managedFields",
        "ownerReferences",
        "finalizers",
    ):
        meta.pop(key, None)
    clean.pop("status", None)
    return clean
