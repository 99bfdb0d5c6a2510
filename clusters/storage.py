"""Writes to department storage: creating, changing and deleting volumes, for the admin console and the
REST API alike, each recorded in the audit log.

One set of rules for every caller, and every problem of a request reported at once: the name (a DNS
label, unique in its department: jobs mount volumes by name), the location its kind needs (a local
directory or a PersistentVolumeClaim), and where a local volume may point (clusters.storage_paths: not the
portal's data root, checkout or Python, not a system directory; the directory must exist).
"""

from __future__ import annotations

import re
import sys

from django.conf import settings
from django.core.exceptions import PermissionDenied, ValidationError
from django.db import IntegrityError, transaction
from django.utils.translation import gettext as _

from accounts import permissions
from accounts.models import Department
from accounts.services import audit_record
from clusters import signals
from clusters.models import Storage
from clusters.storage_paths import Protected, local_path_problems, system_directories
from core.errors import Conflict, InvalidInput

FIELDS = ("kind", "local_path", "pvc_name", "description")
_DNS_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")


def storage_create(
    *,
    actor,
    department: Department,
    name: str,
    kind: str,
    local_path: str = "",
    pvc_name: str = "",
    description: str = "",
    type_errors: dict | None = None,
) -> Storage:
    """A new volume of the department. ``type_errors``: what the caller already found wrong, reported with the rest."""
    require_manager(actor, department)
    storage = Storage(department=department, name=name.strip())
    values = {"kind": kind, "local_path": local_path, "pvc_name": pvc_name, "description": description}
    try:
        with transaction.atomic():
            _apply(storage, values=values, explicit_kind=True, errors=dict(type_errors or {}))
            audit_record(
                actor=actor,
                action="storage.create",
                target=storage.name,
                department=department,
                data=storage_dict(storage),
            )
    except IntegrityError:  # a concurrent request took the name between the check and the insert
        raise InvalidInput({"name": [_duplicate_message(storage)]}) from None
    return storage


def storage_update(*, actor, storage: Storage, values: dict, type_errors: dict | None = None) -> Storage:
    """Change any of kind, local_path, pvc_name, description (the keys in ``values``); the rest stay.

    The name stays: jobs mount storage by name. Of the two locations a volume keeps only the one its kind
    uses; a location sent for the other kind without also changing the kind is an error, not ignored.
    """
    require_manager(actor, storage.department)
    before = storage_dict(storage)
    merged = {**{field: getattr(storage, field) for field in FIELDS}, **values}
    with transaction.atomic():
        _apply(storage, values=merged, explicit_kind="kind" in values, errors=dict(type_errors or {}))
        audit_record(
            actor=actor,
            action="storage.update",
            target=storage.name,
            department=storage.department,
            data={"before": before, "after": storage_dict(storage)},
        )
    return storage


def storage_delete(*, actor, storage: Storage) -> None:
    """Delete a volume's record (not its data). Refused (Conflict) while an unfinished job mounts it."""
    require_manager(actor, storage.department)
    with transaction.atomic():
        users = sorted(
            job for _, jobs in signals.storage_deleting.send(sender=Storage, storage=storage) for job in jobs
        )
        if users:
            raise Conflict(
                _("Jobs %(jobs)s mount %(name)s and have not finished; delete it when they have.")
                % {"jobs": ", ".join(map(str, users)), "name": storage.name}
            )
        data = storage_dict(storage)
        audit_record(
            actor=actor, action="storage.delete", target=storage.name, department=storage.department, data=data
        )
        storage.delete()


def storage_dict(storage: Storage) -> dict:
    return {
        "name": storage.name,
        "kind": storage.kind,
        "local_path": storage.local_path,
        "pvc_name": storage.pvc_name,
        "description": storage.description,
    }


def protected_directories() -> list[Protected]:
    """What no local volume may be, lie in or contain, on this portal's host."""
    portal = [
        Protected(str(settings.PORTAL_DATA_ROOT), "the portal's data root"),
        Protected(str(settings.BASE_DIR), "the portal's checkout"),
        Protected(sys.prefix, "the portal's Python environment"),
        Protected(sys.base_prefix, "the Python installation the portal runs on"),
    ]
    return portal + system_directories()


def local_path_refusals(path: str) -> list[str]:
    """Why a local volume may not point at ``path`` on this host ([] = it may)."""
    return local_path_problems(path, protected=protected_directories(), allowed_inside=[storage_area()])


def storage_area() -> str:
    """The one place under the data root where volumes may live (``make demo`` puts its volumes there)."""
    return str(settings.PORTAL_DATA_ROOT / "storage")


def _apply(storage: Storage, *, values: dict, explicit_kind: bool, errors: dict[str, list]) -> None:
    """Check everything, then save; raises InvalidInput naming every problem."""
    kind = values.get("kind") or ""
    local_path, pvc_name = (values.get("local_path") or "").strip(), (values.get("pvc_name") or "").strip()
    description = values.get("description") or ""

    def problem(field: str, message: str) -> None:
        errors.setdefault(field, []).append(message)

    if kind == Storage.Kind.LOCAL:
        if pvc_name and not explicit_kind:
            problem(
                "pvc_name",
                _('%(name)s is local storage, which has no claim name; send "kind": "pvc" too to make it PVC storage.')
                % {"name": storage.name},
            )
        pvc_name = ""
        if "local_path" not in errors:  # the caller already said what is wrong with it
            for message in local_path_refusals(local_path):
                problem("local_path", message)
    elif kind == Storage.Kind.PVC:
        if local_path and not explicit_kind:
            problem(
                "local_path",
                _(
                    '%(name)s is PVC storage, which has no local path; send "kind": "local" too to '
                    "make it local storage."
                )
                % {"name": storage.name},
            )
        local_path = ""
        if "pvc_name" in errors:
            pass
        elif not pvc_name:
            problem(
                "pvc_name", _("PVC storage needs the name of a PersistentVolumeClaim in the department's namespace.")
            )
        elif not _DNS_SUBDOMAIN.fullmatch(pvc_name) or len(pvc_name) > 253:
            problem("pvc_name", _("Give the PersistentVolumeClaim's name: lower-case letters, digits, '-' and '.'."))
    elif "kind" not in errors:
        problem(
            "kind", _("Choose a kind: local (a directory on the cluster's hosts) or pvc (a PersistentVolumeClaim).")
        )
    storage.kind, storage.local_path, storage.pvc_name, storage.description = kind, local_path, pvc_name, description
    try:
        # The constraints (unique name, has a location) are checked above with better messages.
        storage.full_clean(
            exclude=[field for field in ("kind", "local_path", "pvc_name") if field in errors],
            validate_unique=False,
            validate_constraints=False,
        )
    except ValidationError as exc:
        for field, messages in exc.message_dict.items():
            for message in messages:
                if message not in errors.get(field, []):
                    problem(field, message)
    if (
        storage.pk is None
        and storage.name
        and Storage.objects.filter(department=storage.department, name=storage.name).exists()
    ):
        problem("name", _duplicate_message(storage))
    if errors:
        raise InvalidInput(errors)
    storage.save()


def _duplicate_message(storage: Storage) -> str:
    return _("Storage %(name)s already exists in %(department)s; choose another name.") % {
        "name": storage.name,
        "department": storage.department.slug,
    }


def require_manager(actor, department: Department) -> None:
    if not permissions.can_manage(actor, department):
        raise PermissionDenied(
            _("Only admins of %(department)s can change its storage.") % {"department": department.slug}
        )
