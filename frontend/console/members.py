"""The console's "Members" page of a department: adding members, changing their roles, removing them."""

from __future__ import annotations

from django import forms
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.shortcuts import get_object_or_404, redirect, render
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy
from django.views.decorators.http import require_POST

from accounts import login, permissions
from accounts import selectors as account_selectors
from accounts import services as account_services
from accounts.access import managed_department
from accounts.models import Membership
from core.errors import InvalidInput
from core.forms import show_errors

ROLES = [
    (Membership.Role.MEMBER, gettext_lazy("Member")),
    (Membership.Role.DEPT_ADMIN, gettext_lazy("Department admin")),
]


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
    memberships = list(account_selectors.members_of(department=department))
    locked = login.lockouts_of(usernames=[m.user.username for m in memberships])
    rows = [
        (m, RoleForm(initial={"role": m.role}, prefix=f"m{m.pk}"), _lock_of(request.user, m, locked))
        for m in memberships
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


def _lock_of(actor, membership: Membership, locked: dict) -> dict | None:
    """The member's sign-in lock-out, for the page: until when (None: until lifted) and whether actor may lift it."""
    if membership.user.username not in locked:
        return None
    return {"until": locked[membership.user.username], "can_lift": permissions.can_lift_lockout(actor, membership.user)}


@login_required
@require_POST
def member_unlock(request, slug, membership_id):
    """Lift a member's sign-in lock-out (too many wrong passwords)."""
    department = managed_department(request, slug)
    membership = get_object_or_404(Membership.objects.select_related("user"), pk=membership_id, department=department)
    login.lockout_lift(actor=request.user, username=membership.user.username)
    messages.success(
        request,
        _("%(user)s may sign in again: the failed sign-ins are forgotten.") % {"user": membership.user.username},
    )
    return redirect("console:members", slug=department.slug)


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
