"""The console's "Quotas" page of a department: everybody who manages it reads its quotas per GPU pool;
platform admins preview a change (what the scheduler would admit, preempt and keep waiting) and save it.
"""

from __future__ import annotations

from django import forms
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.shortcuts import redirect, render
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy

from accounts import permissions
from accounts.access import managed_department
from core.errors import InvalidInput
from core.forms import show_errors
from jobs import admission
from jobs import usage as job_usage
from quotas import services


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
