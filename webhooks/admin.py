from django.contrib import admin

from webhooks.models import Delivery, Webhook


@admin.register(Webhook)
class WebhookAdmin(admin.ModelAdmin):
    # Webhooks change through the portal's services (URL checks, audit); the admin only looks, secret hidden.
    list_display = ["id", "name", "department", "url", "active", "created_by", "created_at"]
    list_filter = ["active", "department"]
    search_fields = ["name", "url"]
    exclude = ["secret"]
    readonly_fields = [field.name for field in Webhook._meta.fields if field.name != "secret"]

    def has_add_permission(self, request):
        return False


@admin.register(Delivery)
class DeliveryAdmin(admin.ModelAdmin):
    list_display = ["id", "webhook", "event", "status", "attempts", "response_code", "created_at", "delivered_at"]
    list_filter = ["status", "event"]
    readonly_fields = [field.name for field in Delivery._meta.fields]

    def has_add_permission(self, request):
        return False
