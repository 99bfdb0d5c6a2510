"""Query filters of the model list (API.md "Models"): they narrow what the selectors already scoped."""

from __future__ import annotations

import django_filters

from models_registry.models import RegisteredModel


class ModelFilter(django_filters.FilterSet):
    department = django_filters.CharFilter(field_name="department__slug", strip=False, help_text="Department slug")
    search = django_filters.CharFilter(
        field_name="name", lookup_expr="icontains", strip=False, help_text="Text in the name"
    )

    class Meta:
        model = RegisteredModel
        fields = ["department", "search"]
