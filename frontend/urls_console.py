"""Routes of the department admin console, mounted at /console/ by frontend.urls."""

from django.urls import include, path

from frontend import console

app_name = "console"

urlpatterns = [
    path("", console.index, name="index"),
    path("priorities/", console.priorities, name="priorities"),
    path("priorities/<slug:name>/", console.priority_edit, name="priority-edit"),
    path("usage/", console.usage, name="usage"),
    path("audit/", console.audit, name="audit"),
    path("departments/<slug:slug>/", console.department, name="department"),
    path("departments/<slug:slug>/members/", console.members, name="members"),
    path("departments/<slug:slug>/members/<int:membership_id>/role/", console.member_role, name="member-role"),
    path("departments/<slug:slug>/members/<int:membership_id>/remove/", console.member_remove, name="member-remove"),
    path("departments/<slug:slug>/quotas/", console.quotas, name="quotas"),
    path("departments/<slug:slug>/storage/", console.storage, name="storage"),
    path("departments/<slug:slug>/storage/<int:storage_id>/", console.storage_edit, name="storage-edit"),
    path("departments/<slug:slug>/storage/<int:storage_id>/delete/", console.storage_delete, name="storage-delete"),
    path("departments/<slug:slug>/webhooks/", include("webhooks.urls_console")),
]
