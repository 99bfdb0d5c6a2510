from django.urls import path

from webhooks import api

urlpatterns = [
    path("webhooks/", api.WebhookListApi.as_view(), name="api-webhooks"),
    path("webhooks/<int:webhook_id>/", api.WebhookDetailApi.as_view(), name="api-webhook"),
    path(
        "webhooks/<int:webhook_id>/rotate-secret/",
        api.WebhookRotateSecretApi.as_view(),
        name="api-webhook-rotate-secret",
    ),
    path("webhooks/<int:webhook_id>/ping/", api.WebhookPingApi.as_view(), name="api-webhook-ping"),
    path("webhooks/<int:webhook_id>/deliveries/", api.DeliveryListApi.as_view(), name="api-webhook-deliveries"),
    path(
        "webhooks/<int:webhook_id>/deliveries/<int:delivery_id>/redeliver/",
        api.DeliveryRedeliverApi.as_view(),
        name="api-webhook-redeliver",
    ),
]
