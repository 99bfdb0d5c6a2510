"""Who may open a department's pages: the check the HTML pages of other apps (webhooks, the admin console)
make before showing or changing a department's settings. Raises what a Django view answers with 404 or 403.
"""

from __future__ import annotations

from django.core.exceptions import PermissionDenied
from django.utils.translation import gettext as _

from accounts import permissions
from accounts import selectors as account_selectors
from accounts.models import Department
from core.api import visible_or_404


def managed_department(request, slug: str) -> Department:
    """The department ``slug`` among the user's, which the user must manage (404 if not theirs, 403 if not managed)."""
    department = visible_or_404(
        account_selectors.department_get(user=request.user, slug=slug), _("No department with that name among yours.")
    )
    if not permissions.can_manage(request.user, department):
        raise PermissionDenied(_("Only admins of %(department)s can manage it.") % {"department": department.slug})
    return department
