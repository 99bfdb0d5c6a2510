"""The console's "Storage" pages of a department: its named volumes (a local path or a PVC) that jobs mount,
listed, created, edited and deleted (a volume that jobs still use is refused with 409).
"""

from __future__ import annotations

from django import forms
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy

from accounts.access import managed_department
from clusters import selectors as cluster_selectors
from clusters import storage as storage_services
from clusters.models import Storage
from core.errors import Conflict
from core.forms import form_page


class StorageForm(forms.Form):
    kind = forms.ChoiceField(
        label=gettext_lazy("Kind"),
        choices=[
            (Storage.Kind.LOCAL, gettext_lazy("Local path")),
            (Storage.Kind.PVC, gettext_lazy("PersistentVolumeClaim")),
        ],
    )
    local_path = forms.CharField(
        label=gettext_lazy("Local path"),
        max_length=500,
        required=False,
        help_text=gettext_lazy(
            "For local storage: an existing directory on the cluster's hosts, "
            "outside the portal's own and the system's directories."
        ),
    )
    pvc_name = forms.CharField(
        label=gettext_lazy("Claim name"),
        max_length=253,
        required=False,
        help_text=gettext_lazy("For Kubernetes: the PersistentVolumeClaim in the department's namespace."),
    )
    description = forms.CharField(label=gettext_lazy("Description"), max_length=200, required=False)


class StorageCreateForm(StorageForm):
    name = forms.CharField(
        label=gettext_lazy("Name"),
        max_length=60,
        help_text=gettext_lazy("Jobs mount it by this name; it cannot be changed later."),
    )
    field_order = ["name", "kind", "local_path", "pvc_name", "description"]


@login_required
def storage(request, slug):
    department = managed_department(request, slug)
    return form_page(
        request,
        StorageCreateForm(request.POST or None),
        save=lambda values: storage_services.storage_create(actor=request.user, department=department, **values),
        saved=lambda created: _("Storage %(name)s created.") % {"name": created.name},
        done=reverse("console:storage", kwargs={"slug": department.slug}),
        template="frontend/console/storage.html",
        context={
            "department": department,
            "section": "storage",
            "storages": cluster_selectors.storages_of(department=department),
        },
    )


@login_required
def storage_edit(request, slug, storage_id):
    department = managed_department(request, slug)
    volume = get_object_or_404(Storage.objects.select_related("department"), pk=storage_id, department=department)
    return form_page(
        request,
        StorageForm(
            request.POST or None,
            initial={
                "kind": volume.kind,
                "local_path": volume.local_path,
                "pvc_name": volume.pvc_name,
                "description": volume.description,
            },
        ),
        save=lambda values: storage_services.storage_update(actor=request.user, storage=volume, values=values),
        saved=_("Storage %(name)s saved.") % {"name": volume.name},
        done=reverse("console:storage", kwargs={"slug": department.slug}),
        template="frontend/console/storage_edit.html",
        context={"department": department, "section": "storage", "volume": volume},
    )


@login_required
def storage_delete(request, slug, storage_id):
    department = managed_department(request, slug)
    volume = get_object_or_404(Storage.objects.select_related("department"), pk=storage_id, department=department)
    error = ""
    if request.method == "POST":
        try:
            storage_services.storage_delete(actor=request.user, storage=volume)
        except Conflict as exc:
            error = str(exc)
        else:
            messages.success(request, _("Storage %(name)s deleted.") % {"name": volume.name})
            return redirect("console:storage", slug=department.slug)
    return render(
        request,
        "frontend/console/storage_delete.html",
        {
            "department": department,
            "section": "storage",
            "volume": volume,
            "error": error,
        },
        status=409 if error else 200,
    )
