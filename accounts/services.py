"""Writes to tenancy: memberships and roles (a department keeps at least one admin), the audit trail
(``audit_record``: every change a person makes), and the role checks services share."""

from __future__ import annotations

from django.contrib.auth import get_user_model
from django.core.exceptions import PermissionDenied
from django.db import transaction
from django.utils.translation import gettext as _

from accounts import permissions
from accounts.models import AuditEvent, Department, Membership
from core.errors import InvalidInput


def audit_record(
    *, actor, action: str, target: str, department: Department | None = None, data: dict | None = None
) -> AuditEvent:
    return AuditEvent.objects.create(actor=actor, action=action, target=target, department=department, data=data or {})


def require_manager(actor, department: Department) -> None:
    if not permissions.can_manage(actor, department):
        raise PermissionDenied(_("Only admins of %(department)s can change it.") % {"department": department.slug})


def require_platform_admin(actor) -> None:
    if not permissions.is_platform_admin(actor):
        raise PermissionDenied(_("Only platform admins can change priority classes."))


def _check_keeps_an_admin(*, actor, membership: Membership) -> None:
    """A department admin may not leave a department without one; platform admins may (they manage it anyway)."""
    if membership.role != Membership.Role.DEPT_ADMIN or permissions.is_platform_admin(actor):
        return
    admins = Membership.objects.select_for_update().filter(
        department_id=membership.department_id, role=Membership.Role.DEPT_ADMIN
    )
    if admins.exclude(pk=membership.pk).count() == 0:
        raise InvalidInput(
            _("%(user)s is the last department admin of %(department)s; make someone else admin first.")
            % {"user": membership.user.username, "department": membership.department.slug}
        )


def membership_set(*, actor, department: Department, username: str, role: str) -> Membership:
    """Add a user to a department with a role, or change their role there."""
    require_manager(actor, department)
    if role not in Membership.Role.values:
        raise InvalidInput({"role": [_("Choose a role: %(roles)s.") % {"roles": ", ".join(Membership.Role.values)}]})
    user = get_user_model().objects.filter(username=username.strip(), is_active=True).first()
    if user is None:
        raise InvalidInput({"username": [_("No active user is called %(name)r.") % {"name": username.strip()}]})
    with transaction.atomic():
        membership = Membership.objects.select_for_update().filter(department=department, user=user).first()
        if membership is None:
            membership = Membership.objects.create(department=department, user=user, role=role)
            audit_record(
                actor=actor, action="membership.add", target=user.username, department=department, data={"role": role}
            )
        elif membership.role != role:
            if role != Membership.Role.DEPT_ADMIN:
                _check_keeps_an_admin(actor=actor, membership=membership)
            before, membership.role = membership.role, role
            membership.save(update_fields=["role"])
            audit_record(
                actor=actor,
                action="membership.role",
                target=user.username,
                department=department,
                data={"before": before, "after": role},
            )
    permissions.forget_roles(actor)
    return membership


def membership_remove(*, actor, membership: Membership) -> None:
    department = membership.department
    require_manager(actor, department)
    with transaction.atomic():
        _check_keeps_an_admin(actor=actor, membership=membership)
        membership.delete()
        audit_record(
            actor=actor,
            action="membership.remove",
            target=membership.user.username,
            department=department,
            data={"role": membership.role},
        )
    permissions.forget_roles(actor)
