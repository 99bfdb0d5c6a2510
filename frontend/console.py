"""The department admin console: members and roles, quotas (with the what-if preview), priority classes,
storage, the usage report and the audit log.

Dept admins see the departments they administer, platform admins all of them; a department the user
is not in answers 404, one they are only a member of 403. Views stay thin: look up, check, call one
service or selector, render. Services raise InvalidInput, shown beside the fields it names.
"""

from __future__ import annotations

import json
from urllib.parse import urlencode

from django import forms
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.core.paginator import Paginator
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.utils import timezone
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy
from django.views.decorators.http import require_POST

from accounts import permissions
from accounts import selectors as account_selectors
from accounts import services as account_services
from accounts.access import managed_department
from accounts.models import Membership
from clusters import selectors as cluster_selectors
from clusters import storage as storage_services
from clusters.models import Storage
from core.api import visible_or_404
from core.errors import Conflict, InvalidInput
from core.forms import show_errors
from jobs import admission
from jobs import usage as job_usage
from quotas import selectors, services
from quotas.models import PriorityClass

ROLES = [
    (Membership.Role.MEMBER, gettext_lazy("Member")),
    (Membership.Role.DEPT_ADMIN, gettext_lazy("Department admin")),
]
AUDIT_PAGE_SIZE = 50


# --- Access -------------------------------------------------------------------------


def _require_console(user) -> None:
    if not (permissions.is_platform_admin(user) or account_selectors.departments_managed(user=user).exists()):
        raise PermissionDenied(_("The admin console is for department admins and platform admins."))


def _managed_filter(request, slug: str):
    """A department chosen in a filter: one the user manages, or None for all of them."""
    if not slug:
        return None
    return visible_or_404(
        account_selectors.departments_managed(user=request.user).filter(slug=slug).first(),
        _("No department with that name among those you manage."),
    )


# --- Overview -----------------------------------------------------------------------


@login_required
def index(request):
    _require_console(request.user)
    departments = account_selectors.departments_managed(user=request.user)
    return render(request, "frontend/console/index.html", {"departments": departments, "section": "index"})


@login_required
def department(request, slug):
    return redirect("console:members", slug=managed_department(request, slug).slug)


# --- Members and roles --------------------------------------------------------------


class MemberAddForm(forms.Form):
    username = forms.CharField(label=gettext_lazy("Username"), max_length=150)
    role = forms.ChoiceField(label=gettext_lazy("Role"), choices=ROLES, initial=Membership.Role.MEMBER)


class RoleForm(forms.Form):
    role = forms.ChoiceField(label=gettext_lazy("Role"), choices=ROLES)


@login_required
def members(request, slug):
    department = managed_department(request, slug)
    form = MemberAddForm(request.POST or None)
    status = 200
    if request.method == "POST":
        if form.is_valid():
            try:
                membership = account_services.membership_set(
                    actor=request.user, department=department, **form.cleaned_data
                )
            except InvalidInput as exc:
                show_errors(form, exc)
            else:
                messages.success(
                    request,
                    _("%(user)s is now %(role)s of %(department)s.")
                    % {
                        "user": membership.user.username,
                        "role": dict(ROLES)[membership.role],
                        "department": department.slug,
                    },
                )
                return redirect("console:members", slug=department.slug)
        status = 400
    rows = [
        (m, RoleForm(initial={"role": m.role}, prefix=f"m{m.pk}"))
        for m in account_selectors.members_of(department=department)
    ]
    return render(
        request,
        "frontend/console/members.html",
        {
            "department": department,
            "section": "members",
            "form": form,
            "rows": rows,
        },
        status=status,
    )


@login_required
@require_POST
def member_role(request, slug, membership_id):
    department = managed_department(request, slug)
    membership = get_object_or_404(Membership.objects.select_related("user"), pk=membership_id, department=department)
    form = RoleForm(request.POST, prefix=f"m{membership.pk}")
    if not form.is_valid():
        messages.error(request, _("Choose a role from the list."))
    else:
        try:
            account_services.membership_set(
                actor=request.user,
                department=department,
                username=membership.user.username,
                role=form.cleaned_data["role"],
            )
        except InvalidInput as exc:
            messages.error(request, " ".join(str(p) for problems in exc.errors.values() for p in problems))
        else:
            messages.success(
                request,
                _("%(user)s is now %(role)s.")
                % {"user": membership.user.username, "role": dict(ROLES)[form.cleaned_data["role"]]},
            )
            if not permissions.can_manage(request.user, department):
                return redirect("home")  # they gave up their own admin role
    return redirect("console:members", slug=department.slug)


@login_required
@require_POST
def member_remove(request, slug, membership_id):
    department = managed_department(request, slug)
    membership = get_object_or_404(
        Membership.objects.select_related("user", "department"), pk=membership_id, department=department
    )
    try:
        account_services.membership_remove(actor=request.user, membership=membership)
    except InvalidInput as exc:
        messages.error(request, " ".join(str(p) for problems in exc.errors.values() for p in problems))
    else:
        messages.success(
            request,
            _("%(user)s was removed from %(department)s.")
            % {"user": membership.user.username, "department": department.slug},
        )
        if membership.user_id == request.user.pk and not permissions.is_platform_admin(request.user):
            return redirect("home")  # they no longer manage this department
    return redirect("console:members", slug=department.slug)


# --- Quotas -------------------------------------------------------------------------


class QuotaRowForm(forms.Form):
    nominal = forms.IntegerField(label=gettext_lazy("Nominal"), min_value=0, max_value=100_000, required=False)
    borrowing_limit = forms.IntegerField(
        label=gettext_lazy("Borrowing limit"), min_value=0, max_value=100_000, required=False
    )
    lending_limit = forms.IntegerField(
        label=gettext_lazy("Lending limit"), min_value=0, max_value=100_000, required=False
    )

    def clean(self):
        data = super().clean()
        if data.get("nominal") is None and (
            data.get("borrowing_limit") is not None or data.get("lending_limit") is not None
        ):
            raise forms.ValidationError(_("Set a nominal quota, or leave the limits empty."))
        return data


@login_required
def quotas(request, slug):
    """Everybody who manages the department reads its quotas; platform admins preview and save changes."""
    department = managed_department(request, slug)
    editable = permissions.can_set_quotas(request.user)
    if request.method == "POST" and not editable:
        raise PermissionDenied(_("Only platform admins can change quotas."))
    action = request.POST.get("action", "")
    rows = [
        (
            pool,
            QuotaRowForm(
                request.POST or None,
                prefix=f"pool{pool.pk}",
                initial={
                    "nominal": quota.nominal if quota else None,
                    "borrowing_limit": quota.borrowing_limit if quota else None,
                    "lending_limit": quota.lending_limit if quota else None,
                },
            ),
        )
        for pool, quota in job_usage.pools_with_quotas(department=department)
    ]
    context = {
        "department": department,
        "section": "quotas",
        "editable": editable,
        "rows": rows,
        "current": job_usage.department_quotas(department=department),
        "mode": "edit",
    }
    if request.method == "POST" and action in ("preview", "save") and all(form.is_valid() for _pool, form in rows):
        chosen = [(pool, form) for pool, form in rows if form.cleaned_data["nominal"] is not None]
        items = [
            {"cluster": pool.cluster.name, "gpu_type": pool.gpu_type, **form.cleaned_data} for pool, form in chosen
        ]
        try:
            if action == "save":
                services.quota_set(actor=request.user, department=department, quotas=items)
                messages.success(request, _("Quotas of %(department)s saved.") % {"department": department.slug})
                return redirect("console:quotas", slug=department.slug)
            decisions = admission.quota_preview(department=department, quotas=items)
        except InvalidInput as exc:
            for (_pool, form), problems in zip(chosen, exc.errors.get("quotas", [])):
                if problems:
                    show_errors(form, InvalidInput(problems))
        else:
            jobs = job_usage.jobs_by_id(
                ids=[d.job_id for d in (*decisions.admissions, *decisions.preemptions, *decisions.waiting)]
            )
            context.update(
                mode="preview",
                proposed=items,
                preview={
                    "admitted": [{"job": jobs[d.job_id]} for d in decisions.admissions],
                    "preempted": [{"job": jobs[d.job_id], "message": d.message} for d in decisions.preemptions],
                    "waiting": [{"job": jobs[d.job_id], "message": d.message} for d in decisions.waiting],
                },
            )
    status = 400 if request.method == "POST" and context["mode"] == "edit" and action != "edit" else 200
    return render(request, "frontend/console/quotas.html", context, status=status)


# --- Priority classes ---------------------------------------------------------------


class PriorityForm(forms.Form):
    value = forms.IntegerField(
        label=gettext_lazy("Value"),
        min_value=-1_000_000_000,
        max_value=1_000_000_000,
        help_text=gettext_lazy("Higher is scheduled first."),
    )
    preemptible = forms.BooleanField(
        label=gettext_lazy("Preemptible"), required=False, help_text=gettext_lazy("Jobs of this class may be evicted.")
    )
    description = forms.CharField(label=gettext_lazy("Description"), max_length=200, required=False)


class PriorityCreateForm(PriorityForm):
    name = forms.SlugField(label=gettext_lazy("Name"), max_length=40)
    field_order = ["name", "value", "preemptible", "description"]


@login_required
def priorities(request):
    _require_console(request.user)
    editable = permissions.is_platform_admin(request.user)
    if request.method == "POST" and not editable:
        raise PermissionDenied(_("Only platform admins can change priority classes."))
    form = PriorityCreateForm(request.POST or None)
    if request.method == "POST" and form.is_valid():
        try:
            priority = services.priority_class_create(actor=request.user, **form.cleaned_data)
        except InvalidInput as exc:
            show_errors(form, exc)
        else:
            messages.success(request, _("Priority class %(name)s created.") % {"name": priority.name})
            return redirect("console:priorities")
    return render(
        request,
        "frontend/console/priorities.html",
        {
            "section": "priorities",
            "editable": editable,
            "form": form,
            "priorities": selectors.priority_classes(),
        },
        status=400 if request.method == "POST" else 200,
    )


@login_required
def priority_edit(request, name):
    if not permissions.is_platform_admin(request.user):
        raise PermissionDenied(_("Only platform admins can change priority classes."))
    priority = get_object_or_404(PriorityClass, name=name)
    form = PriorityForm(
        request.POST or None,
        initial={"value": priority.value, "preemptible": priority.preemptible, "description": priority.description},
    )
    if request.method == "POST" and form.is_valid():
        try:
            services.priority_class_update(actor=request.user, priority=priority, **form.cleaned_data)
        except InvalidInput as exc:
            show_errors(form, exc)
        else:
            messages.success(request, _("Priority class %(name)s saved.") % {"name": priority.name})
            return redirect("console:priorities")
    return render(
        request,
        "frontend/console/priority_edit.html",
        {
            "section": "priorities",
            "priority": priority,
            "form": form,
        },
        status=400 if request.method == "POST" else 200,
    )


# --- Storage ------------------------------------------------------------------------


class StorageForm(forms.Form):
    kind = forms.ChoiceField(
        label=gettext_lazy("Kind"),
        choices=[
            (Storage.Kind.LOCAL, gettext_lazy("Local path")),
            (Storage.Kind.PVC, gettext_lazy("PersistentVolumeClaim")),
        ],
    )
    local_path = forms.CharField(
        label=gettext_lazy("Local path"),
        max_length=500,
        required=False,
        help_text=gettext_lazy(
            "For local storage: an existing directory on the cluster's hosts, "
            "outside the portal's own and the system's directories."
        ),
    )
    pvc_name = forms.CharField(
        label=gettext_lazy("Claim name"),
        max_length=253,
        required=False,
        help_text=gettext_lazy("For Kubernetes: the PersistentVolumeClaim in the department's namespace."),
    )
    description = forms.CharField(label=gettext_lazy("Description"), max_length=200, required=False)


class StorageCreateForm(StorageForm):
    name = forms.CharField(
        label=gettext_lazy("Name"),
        max_length=60,
        help_text=gettext_lazy("Jobs mount it by this name; it cannot be changed later."),
    )
    field_order = ["name", "kind", "local_path", "pvc_name", "description"]


@login_required
def storage(request, slug):
    department = managed_department(request, slug)
    form = StorageCreateForm(request.POST or None)
    if request.method == "POST" and form.is_valid():
        try:
            created = storage_services.storage_create(actor=request.user, department=department, **form.cleaned_data)
        except InvalidInput as exc:
            show_errors(form, exc)
        else:
            messages.success(request, _("Storage %(name)s created.") % {"name": created.name})
            return redirect("console:storage", slug=department.slug)
    return render(
        request,
        "frontend/console/storage.html",
        {
            "department": department,
            "section": "storage",
            "form": form,
            "storages": cluster_selectors.storages_of(department=department),
        },
        status=400 if request.method == "POST" else 200,
    )


@login_required
def storage_edit(request, slug, storage_id):
    department = managed_department(request, slug)
    volume = get_object_or_404(Storage.objects.select_related("department"), pk=storage_id, department=department)
    form = StorageForm(
        request.POST or None,
        initial={
            "kind": volume.kind,
            "local_path": volume.local_path,
            "pvc_name": volume.pvc_name,
            "description": volume.description,
        },
    )
    if request.method == "POST" and form.is_valid():
        try:
            storage_services.storage_update(actor=request.user, storage=volume, values=form.cleaned_data)
        except InvalidInput as exc:
            show_errors(form, exc)
        else:
            messages.success(request, _("Storage %(name)s saved.") % {"name": volume.name})
            return redirect("console:storage", slug=department.slug)
    return render(
        request,
        "frontend/console/storage_edit.html",
        {
            "department": department,
            "section": "storage",
            "volume": volume,
            "form": form,
        },
        status=400 if request.method == "POST" else 200,
    )


@login_required
def storage_delete(request, slug, storage_id):
    department = managed_department(request, slug)
    volume = get_object_or_404(Storage.objects.select_related("department"), pk=storage_id, department=department)
    error = ""
    if request.method == "POST":
        try:
            storage_services.storage_delete(actor=request.user, storage=volume)
        except Conflict as exc:
            error = str(exc)
        else:
            messages.success(request, _("Storage %(name)s deleted.") % {"name": volume.name})
            return redirect("console:storage", slug=department.slug)
    return render(
        request,
        "frontend/console/storage_delete.html",
        {
            "department": department,
            "section": "storage",
            "volume": volume,
            "error": error,
        },
        status=409 if error else 200,
    )


# --- Usage report -------------------------------------------------------------------


@login_required
def usage(request):
    _require_console(request.user)
    chosen = _managed_filter(request, request.GET.get("department", ""))
    departments = [chosen] if chosen else list(account_selectors.departments_managed(user=request.user))
    start, end = request.GET.get("from", ""), request.GET.get("to", "")
    context = {
        "section": "usage",
        "departments": account_selectors.departments_managed(user=request.user),
        "chosen": chosen,
        "start": start,
        "end": end,
        "errors": {},
    }
    try:
        report = job_usage.usage_get(departments=departments, start=start, end=end, now=timezone.now())
    except InvalidInput as exc:
        context["errors"] = exc.errors
        return render(request, "frontend/console/usage.html", context, status=400)
    query = {"from": report.start.isoformat(), "to": report.end.isoformat(), "format": "csv"}
    if chosen:
        query["department"] = chosen.slug
    csv_url = reverse("api-usage")
    context.update(
        report=report,
        start=report.start.isoformat(),
        end=report.end.isoformat(),
        by_user=report.rows("user"),
        by_gpu_type=report.rows("gpu_type"),
        by_day=report.rows("day"),
        chart={"days": [day.isoformat() for day in report.days], "series": report.daily_series()},
        csv_links=[(group, f"{csv_url}?{urlencode({**query, 'group_by': group})}") for group in job_usage.USAGE_GROUPS],
    )
    return render(request, "frontend/console/usage.html", context)


# --- Audit log ----------------------------------------------------------------------


@login_required
def audit(request):
    _require_console(request.user)
    chosen = _managed_filter(request, request.GET.get("department", ""))
    action = request.GET.get("action", "")
    events = account_selectors.audit_events(user=request.user, department=chosen, action=action)
    page = Paginator(events, AUDIT_PAGE_SIZE).get_page(request.GET.get("page"))
    filters = urlencode(
        {key: value for key, value in (("department", chosen.slug if chosen else ""), ("action", action)) if value}
    )
    return render(
        request,
        "frontend/console/audit.html",
        {
            "section": "audit",
            "departments": account_selectors.departments_managed(user=request.user),
            "chosen": chosen,
            "action": action,
            "actions": account_selectors.audit_action_families(user=request.user),
            "page": page,
            "rows": [(event, json.dumps(event.data, indent=1, sort_keys=True, default=str)) for event in page],
            "filters": filters,
        },
    )
