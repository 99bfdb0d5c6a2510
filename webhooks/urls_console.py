"""The console's Webhooks pages, included by frontend.urls_console under departments/<slug>/webhooks/."""

from django.urls import path

from webhooks import views

urlpatterns = [
    path("", views.webhook_list, name="webhooks"),
    path("<int:webhook_id>/", views.webhook_edit, name="webhook-edit"),
    path("<int:webhook_id>/delete/", views.webhook_delete, name="webhook-delete"),
    path("<int:webhook_id>/rotate-secret/", views.webhook_rotate_secret, name="webhook-rotate-secret"),
    path("<int:webhook_id>/ping/", views.webhook_ping, name="webhook-ping"),
    path("<int:webhook_id>/deliveries/", views.webhook_deliveries, name="webhook-deliveries"),
    path(
        "<int:webhook_id>/deliveries/<int:delivery_id>/redeliver/", views.delivery_redeliver, name="webhook-redeliver"
    ),
]
