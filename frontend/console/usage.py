"""The console's usage report: GPU hours of the departments the user manages, by user, GPU type and day,
with a chart and the same report as CSV (the API's /api/v1/usage).
"""

from __future__ import annotations

from urllib.parse import urlencode

from django.contrib.auth.decorators import login_required
from django.shortcuts import render
from django.urls import reverse
from django.utils import timezone

from accounts import selectors as account_selectors
from core.errors import InvalidInput
from frontend.console.access import managed_filter, require_console
from jobs import usage as job_usage


@login_required
def usage(request):
    require_console(request.user)
    chosen = managed_filter(request, request.GET.get("department", ""))
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
