"""Reads of tenancy: the departments a user may see, use or manage, their members, and the audit log."""

from __future__ import annotations

from django.db.models import Q, QuerySet

from accounts import permissions
from accounts.models import AuditEvent, Department, Membership


def department_get(*, user, slug: str) -> Department | None:
    """The department if the user may see it; None otherwise (the API answers 404 alike)."""
    return permissions.visible_departments(user).filter(slug=slug).first()


def audit_events_for(*, user) -> QuerySet[AuditEvent]:
    """Platform admins read every event; department admins those of the departments they manage."""
    events = AuditEvent.objects.select_related("actor", "department")
    if permissions.is_platform_admin(user):
        return events
    managed = [dept_id for dept_id, role in permissions.roles(user).items() if role == "dept_admin"]
    return events.filter(department_id__in=managed)


def departments_managed(*, user) -> QuerySet[Department]:
    """Departments the user administers: platform admins all, dept_admins theirs."""
    if permissions.is_platform_admin(user):
        return Department.objects.all()
    return Department.objects.filter(
        pk__in=[dept_id for dept_id, role in permissions.roles(user).items() if role == Membership.Role.DEPT_ADMIN]
    )


def members_of(*, department: Department) -> QuerySet[Membership]:
    return Membership.objects.filter(department=department).select_related("user").order_by("user__username")


def audit_events(*, user, department: Department | None = None, action: str = "") -> QuerySet[AuditEvent]:
    """The audit log the user may read, narrowed to a department and an action family (``quota``, ``membership`` ...)."""
    events = audit_events_for(user=user)
    if department is not None:
        events = events.filter(department=department)
    if action:
        events = events.filter(Q(action=action) | Q(action__startswith=f"{action}."))
    return events


def audit_action_families(*, user) -> list[str]:
    """The kinds of change in the user's audit log (``job``, ``membership``, ``quota`` ...), for a filter."""
    actions = audit_events_for(user=user).order_by().values_list("action", flat=True).distinct()
    return sorted({action.split(".")[0] for action in actions})


def departments_usable(*, user) -> QuerySet[Department]:
    """Departments the user may submit into (members: their own; platform admins: all), by slug."""
    return permissions.visible_departments(user).order_by("slug")


def department_for_input(*, user, slug: str | None, errors: dict[str, list] | None = None) -> Department | None:
    """The department called ``slug`` if the user may create things in it (jobs, builds, volumes, webhooks, models,
    deployments); None if not, and then, unless ``errors`` already has a "department" problem, the refusal in it."""
    department = permissions.visible_departments(user).filter(slug=slug).first() if slug else None
    if department is not None and permissions.can_use(user, department):
        return department
    if errors is not None and "department" not in errors:
        errors["department"] = [f"You are not a member of a department called {slug!r}."]
    return None
