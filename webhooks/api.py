"""REST endpoints for webhooks (``/api/v1/webhooks/``). Thin: parse, look up, call a service.

Members of a department read its webhooks and delivery logs; its dept_admins and platform admins change
them (others get 403); webhooks of other departments answer 404. The secret is only in the answers to
create and rotate-secret.
"""

from __future__ import annotations

from django.urls import reverse
from drf_spectacular.utils import extend_schema
from rest_framework import generics, serializers, status
from rest_framework.response import Response
from rest_framework.views import APIView

from accounts import selectors as account_selectors
from core.api import parse_input, visible_or_404
from core.errors import InvalidInput
from webhooks import selectors, services
from webhooks.filters import WebhookFilter
from webhooks.models import Delivery, Webhook


class WebhookInputSerializer(serializers.Serializer):
    name = serializers.CharField(max_length=100)
    department = serializers.CharField(max_length=40, help_text="Slug of the department whose events are sent")
    url = serializers.CharField(max_length=2000, help_text="http(s) URL that receives signed POSTs")
    events = serializers.ListField(
        child=serializers.CharField(max_length=50),
        max_length=len(services.EVENTS),
        help_text="Any of: " + ", ".join(services.EVENTS),
    )
    active = serializers.BooleanField(default=True)


class WebhookPatchSerializer(serializers.Serializer):
    name = serializers.CharField(max_length=100, required=False)
    url = serializers.CharField(max_length=2000, required=False)
    events = serializers.ListField(
        child=serializers.CharField(max_length=50), max_length=len(services.EVENTS), required=False
    )
    active = serializers.BooleanField(required=False)


FIXED_ON_PATCH = {"department": "A webhook stays in its department; create one in the other department instead."}


class WebhookOutputSerializer(serializers.ModelSerializer):
    department = serializers.CharField(source="department.slug")
    events = serializers.ListField(child=serializers.CharField())
    created_by = serializers.CharField(source="created_by.username", allow_null=True, default=None)
    deliveries_url = serializers.SerializerMethodField()

    class Meta:
        model = Webhook
        fields = ["id", "department", "name", "url", "events", "active", "created_by", "created_at", "deliveries_url"]

    def get_deliveries_url(self, webhook) -> str:
        return reverse("api-webhook-deliveries", args=[webhook.pk])


class WebhookWithSecretSerializer(WebhookOutputSerializer):
    secret = serializers.CharField(
        help_text="Shown only now: keep it to verify webhook-signature (Standard Webhooks; X-Portal-Signature is deprecated)"
    )

    class Meta(WebhookOutputSerializer.Meta):
        fields = [*WebhookOutputSerializer.Meta.fields, "secret"]


class DeliveryOutputSerializer(serializers.ModelSerializer):
    webhook = serializers.IntegerField(source="webhook_id")
    payload = serializers.JSONField()
    redeliver_url = serializers.SerializerMethodField()

    class Meta:
        model = Delivery
        fields = [
            "id",
            "webhook",
            "event",
            "event_id",
            "status",
            "attempts",
            "response_code",
            "response_excerpt",
            "error",
            "created_at",
            "next_attempt_at",
            "last_attempt_at",
            "delivered_at",
            "payload",
            "redeliver_url",
        ]

    def get_redeliver_url(self, delivery) -> str:
        return reverse("api-webhook-redeliver", args=[delivery.webhook_id, delivery.pk])


def _visible(request, webhook_id) -> Webhook:
    return visible_or_404(
        selectors.webhook_get(user=request.user, webhook_id=webhook_id), "No webhook with that id in your departments."
    )


class WebhookListApi(generics.ListAPIView):
    serializer_class = WebhookOutputSerializer
    filterset_class = WebhookFilter  # narrows the caller's webhooks; DjangoFilterBackend is the default backend

    def get_queryset(self):
        return selectors.webhooks_for(user=self.request.user)

    @extend_schema(request=WebhookInputSerializer, responses={201: WebhookWithSecretSerializer})
    def post(self, request):
        values, type_errors = parse_input(WebhookInputSerializer, request.data, what="the webhook")
        department = account_selectors.department_for_input(
            user=request.user, slug=values.pop("department", None), errors=type_errors
        )
        if department is None:
            raise InvalidInput(type_errors)
        webhook = services.webhook_create(
            actor=request.user,
            department=department,
            name=values.get("name", ""),
            url=values.get("url", ""),
            events=values.get("events", []),
            active=values.get("active", True),
            type_errors=type_errors,
        )
        return Response(WebhookWithSecretSerializer(webhook).data, status=status.HTTP_201_CREATED)


class WebhookDetailApi(APIView):
    @extend_schema(responses=WebhookOutputSerializer)
    def get(self, request, webhook_id):
        return Response(WebhookOutputSerializer(_visible(request, webhook_id)).data)

    @extend_schema(request=WebhookPatchSerializer, responses=WebhookOutputSerializer)
    def patch(self, request, webhook_id):
        webhook = _visible(request, webhook_id)
        values, type_errors = parse_input(
            WebhookPatchSerializer, request.data, what="the webhook", partial=True, fixed_on_patch=FIXED_ON_PATCH
        )
        webhook = services.webhook_update(actor=request.user, webhook=webhook, values=values, type_errors=type_errors)
        return Response(WebhookOutputSerializer(webhook).data)

    @extend_schema(responses={204: None})
    def delete(self, request, webhook_id):
        services.webhook_delete(actor=request.user, webhook=_visible(request, webhook_id))
        return Response(status=status.HTTP_204_NO_CONTENT)


class WebhookRotateSecretApi(APIView):
    @extend_schema(request=None, responses=WebhookWithSecretSerializer)
    def post(self, request, webhook_id):
        webhook = services.webhook_rotate_secret(actor=request.user, webhook=_visible(request, webhook_id))
        return Response(WebhookWithSecretSerializer(webhook).data)


class WebhookPingApi(APIView):
    @extend_schema(request=None, responses={202: DeliveryOutputSerializer})
    def post(self, request, webhook_id):
        delivery = services.webhook_ping(actor=request.user, webhook=_visible(request, webhook_id))
        return Response(DeliveryOutputSerializer(delivery).data, status=status.HTTP_202_ACCEPTED)


class DeliveryListApi(generics.ListAPIView):
    """Newest first."""

    serializer_class = DeliveryOutputSerializer

    def get_queryset(self):
        if getattr(self, "swagger_fake_view", False):  # schema generation has no webhook to look up
            return Delivery.objects.none()
        return selectors.deliveries_of(webhook=_visible(self.request, self.kwargs["webhook_id"]))


class DeliveryRedeliverApi(APIView):
    @extend_schema(request=None, responses={202: DeliveryOutputSerializer})
    def post(self, request, webhook_id, delivery_id):
        delivery = visible_or_404(
            selectors.delivery_get(webhook=_visible(request, webhook_id), delivery_id=delivery_id),
            "This webhook has no delivery with that id.",
        )
        again = services.delivery_redeliver(actor=request.user, delivery=delivery)
        return Response(DeliveryOutputSerializer(again).data, status=status.HTTP_202_ACCEPTED)
