"""The console's audit log: the events of the departments the user manages, filtered by department and
action family, a page at a time.
"""

from __future__ import annotations

import json
from urllib.parse import urlencode

from django.contrib.auth.decorators import login_required
from django.core.paginator import Paginator
from django.shortcuts import render

from accounts import selectors as account_selectors
from frontend.console.access import managed_filter, require_console

AUDIT_PAGE_SIZE = 50


@login_required
def audit(request):
    require_console(request.user)
    chosen = managed_filter(request, request.GET.get("department", ""))
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
