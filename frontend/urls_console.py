"""Routes of the department admin console, mounted at /console/ by frontend.urls."""

from django.urls import include, path

from frontend.console import audit, loans, members, overview, priorities, quotas, storage, usage

app_name = "console"

urlpatterns = [
    path("", overview.index, name="index"),
    path("priorities/", priorities.priorities, name="priorities"),
    path("priorities/<slug:name>/", priorities.priority_edit, name="priority-edit"),
    path("usage/", usage.usage, name="usage"),
    path("audit/", audit.audit, name="audit"),
    path("departments/<slug:slug>/", overview.department, name="department"),
    path("departments/<slug:slug>/members/", members.members, name="members"),
    path("departments/<slug:slug>/members/<int:membership_id>/role/", members.member_role, name="member-role"),
    path("departments/<slug:slug>/members/<int:membership_id>/remove/", members.member_remove, name="member-remove"),
    path("departments/<slug:slug>/members/<int:membership_id>/unlock/", members.member_unlock, name="member-unlock"),
    path("departments/<slug:slug>/quotas/", quotas.quotas, name="quotas"),
    path("departments/<slug:slug>/loans/", loans.loans, name="loans"),
    path("departments/<slug:slug>/loans/<int:loan_id>/end/", loans.loan_end, name="loan-end"),
    path("departments/<slug:slug>/storage/", storage.storage, name="storage"),
    path("departments/<slug:slug>/storage/<int:storage_id>/", storage.storage_edit, name="storage-edit"),
    path("departments/<slug:slug>/storage/<int:storage_id>/delete/", storage.storage_delete, name="storage-delete"),
    path("departments/<slug:slug>/webhooks/", include("webhooks.urls_console")),
]
