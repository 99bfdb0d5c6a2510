"""The console's "Priority classes" page: every console user reads them; platform admins create and edit them."""

from __future__ import annotations

from django import forms
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.shortcuts import get_object_or_404
from django.urls import reverse
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy

from accounts import permissions
from core.forms import form_page
from frontend.console.access import require_console
from quotas import selectors, services
from quotas.models import PriorityClass


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
    require_console(request.user)
    editable = permissions.is_platform_admin(request.user)
    if request.method == "POST" and not editable:
        raise PermissionDenied(_("Only platform admins can change priority classes."))
    return form_page(
        request,
        PriorityCreateForm(request.POST or None),
        save=lambda values: services.priority_class_create(actor=request.user, **values),
        saved=lambda priority: _("Priority class %(name)s created.") % {"name": priority.name},
        done=reverse("console:priorities"),
        template="frontend/console/priorities.html",
        context={"section": "priorities", "editable": editable, "priorities": selectors.priority_classes()},
    )


@login_required
def priority_edit(request, name):
    if not permissions.is_platform_admin(request.user):
        raise PermissionDenied(_("Only platform admins can change priority classes."))
    priority = get_object_or_404(PriorityClass, name=name)
    return form_page(
        request,
        PriorityForm(
            request.POST or None,
            initial={"value": priority.value, "preemptible": priority.preemptible, "description": priority.description},
        ),
        save=lambda values: services.priority_class_update(actor=request.user, priority=priority, **values),
        saved=_("Priority class %(name)s saved.") % {"name": priority.name},
        done=reverse("console:priorities"),
        template="frontend/console/priority_edit.html",
        context={"section": "priorities", "priority": priority},
    )
