"""Who may open the console's pages that are not a department's: the check and the department filter.

A department's own pages check with accounts.access.managed_department; the console-wide ones (index,
priorities, usage, audit) with require_console, and their "department" filter with managed_filter.
"""

from __future__ import annotations

from django.core.exceptions import PermissionDenied
from django.utils.translation import gettext as _

from accounts import permissions
from accounts import selectors as account_selectors
from core.api import visible_or_404


def require_console(user) -> None:
    if not (permissions.is_platform_admin(user) or account_selectors.departments_managed(user=user).exists()):
        raise PermissionDenied(_("The admin console is for department admins and platform admins."))


def managed_filter(request, slug: str):
    """A department chosen in a filter: one the user manages, or None for all of them."""
    if not slug:
        return None
    return visible_or_404(
        account_selectors.departments_managed(user=request.user).filter(slug=slug).first(),
        _("No department with that name among those you manage."),
    )
