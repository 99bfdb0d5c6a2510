"""The console's index (the departments the user manages) and a department's landing page (its members)."""

from __future__ import annotations

from django.contrib.auth.decorators import login_required
from django.shortcuts import redirect, render

from accounts import selectors as account_selectors
from accounts.access import managed_department
from frontend.console.access import require_console


@login_required
def index(request):
    require_console(request.user)
    departments = account_selectors.departments_managed(user=request.user)
    return render(request, "frontend/console/index.html", {"departments": departments, "section": "index"})


@login_required
def department(request, slug):
    return redirect("console:members", slug=managed_department(request, slug).slug)
