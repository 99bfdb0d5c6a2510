"""Browser pages. Thin: look up what the user may see, render."""

from django.contrib.auth.decorators import login_required
from django.shortcuts import render

from quotas import permissions


@login_required
def home(request):
    memberships = request.user.memberships.select_related("department")
    return render(
        request,
        "frontend/home.html",
        {"memberships": memberships, "is_platform_admin": permissions.is_platform_admin(request.user)},
    )
