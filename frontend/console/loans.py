"""The console's "Quota loans" page of a department: the GPUs it lends to other departments and borrows from
them until a time, a form to lend some of its nominal quota, and ending a loan early (with a confirmation).
The rules are quotas.services.loan_create / loan_end; the quotas move in quotas.selectors.effective_quotas.
"""

from __future__ import annotations

from datetime import timedelta
from typing import cast

from django import forms
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.utils import timezone
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy, ngettext

from accounts.access import managed_department
from accounts.models import Department
from core.errors import Conflict, InvalidInput
from core.forms import form_page
from jobs import usage as job_usage
from quotas import selectors as quota_selectors
from quotas import services as quota_services
from quotas.models import QuotaLoan

LOANS_SHOWN = 100


class LoanForm(forms.Form):
    to_department = forms.ChoiceField(label=gettext_lazy("Lend to"))
    pool = forms.ChoiceField(label=gettext_lazy("GPU pool"))
    gpus = forms.IntegerField(label=gettext_lazy("GPUs"), min_value=1, max_value=100_000)
    until = forms.DateTimeField(
        label=gettext_lazy("Until"),
        widget=forms.DateTimeInput(attrs={"type": "datetime-local"}, format="%Y-%m-%dT%H:%M"),
        help_text=gettext_lazy("In your time zone. The GPUs go back by themselves then."),
    )

    def __init__(self, *args, department: Department, **kwargs):
        super().__init__(*args, **kwargs)
        cast(forms.ChoiceField, self.fields["to_department"]).choices = [
            (d.slug, f"{d.name} ({d.slug})") for d in Department.objects.exclude(pk=department.pk).order_by("slug")
        ]
        cast(forms.ChoiceField, self.fields["pool"]).choices = [
            (str(quota.pool_id), _("%(pool)s (up to %(gpus)d to lend)") % {"pool": quota.pool, "gpus": free})
            for quota, _usage in job_usage.department_quotas(department=department)
            if (free := (quota.own_nominal or 0) - sum(loan.gpus for loan in quota.loans_out)) > 0
        ]


def _lend(request, department: Department, values: dict) -> QuotaLoan:
    pool = next(
        q.pool for q, _usage in job_usage.department_quotas(department=department) if str(q.pool_id) == values["pool"]
    )
    try:
        return quota_services.loan_create(
            actor=request.user,
            from_department=department,
            to_department=values["to_department"],
            cluster=pool.cluster.name,
            gpu_type=pool.gpu_type,
            gpus=values["gpus"],
            until=values["until"],
        )
    except InvalidInput as exc:  # the pool is one field here, cluster and GPU type in the API
        errors = dict(exc.errors)
        pool_errors = [*errors.pop("cluster", []), *errors.pop("gpu_type", [])]
        raise InvalidInput({**errors, **({"pool": pool_errors} if pool_errors else {})}) from exc


@login_required
def loans(request, slug):
    """The department's loans, both ways; its admins lend GPUs of its pools here."""
    department = managed_department(request, slug)
    now = timezone.now()
    rows = [
        {"loan": loan, "active": loan.is_active(now), "lent": loan.from_department_id == department.pk}
        for loan in quota_selectors.loans_of(department=department)[:LOANS_SHOWN]
    ]
    week = (now + timedelta(days=7)).replace(second=0, microsecond=0)
    return form_page(
        request,
        LoanForm(request.POST or None, department=department, initial={"until": week}),
        save=lambda values: _lend(request, department, values),
        saved=lambda loan: (
            ngettext(
                "%(gpus)d GPU of %(pool)s lent to %(department)s.",
                "%(gpus)d GPUs of %(pool)s lent to %(department)s.",
                loan.gpus,
            )
            % {"gpus": loan.gpus, "pool": loan.pool, "department": loan.to_department.slug}
        ),
        done=reverse("console:loans", kwargs={"slug": department.slug}),
        template="frontend/console/loans.html",
        context={
            "department": department,
            "section": "loans",
            "active": [row for row in rows if row["active"]],
            "past": [row for row in rows if not row["active"]],
            "max_days": quota_services.loan_max_days(),
        },
    )


@login_required
def loan_end(request, slug, loan_id):
    """Confirm, then end a loan the department lends before its time."""
    department = managed_department(request, slug)
    loan = get_object_or_404(
        QuotaLoan.objects.select_related("from_department", "to_department", "pool__cluster"),
        pk=loan_id,
        from_department=department,
    )
    error = ""
    if request.method == "POST":
        try:
            quota_services.loan_end(actor=request.user, loan=loan)
        except Conflict as exc:
            error = str(exc)
        else:
            messages.success(
                request,
                ngettext(
                    "The loan of %(gpus)d GPU to %(department)s has ended: it is back.",
                    "The loan of %(gpus)d GPUs to %(department)s has ended: they are back.",
                    loan.gpus,
                )
                % {"gpus": loan.gpus, "department": loan.to_department.slug},
            )
            return redirect("console:loans", slug=department.slug)
    return render(
        request,
        "frontend/console/loan_end.html",
        {"department": department, "section": "loans", "loan": loan, "error": error},
        status=409 if error else 200,
    )
