"""Query filters of the webhook list: they narrow what the selectors already scoped to the caller."""

from __future__ import annotations

import django_filters

from webhooks.models import Webhook


class WebhookFilter(django_filters.FilterSet):
    department = django_filters.CharFilter(field_name="department__slug", strip=False, help_text="Department slug")

    class Meta:
        model = Webhook
        fields = ["department"]
