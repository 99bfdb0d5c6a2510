"""Query filters of the image build list: they narrow what the selectors already scoped to the caller."""

from __future__ import annotations

import django_filters
from django.db.models import QuerySet

from images.models import ImageBuild


class BuildFilter(django_filters.FilterSet):
    department = django_filters.CharFilter(field_name="department__slug", strip=False, help_text="Department slug")
    status = django_filters.CharFilter(
        method="filter_status", strip=False, help_text="One status, or several separated by commas"
    )

    class Meta:
        model = ImageBuild
        fields = ["department", "status"]

    def filter_status(self, queryset: QuerySet[ImageBuild], name: str, value: str) -> QuerySet[ImageBuild]:
        statuses = [s.strip() for s in value.split(",") if s.strip()]
        return queryset.filter(status__in=statuses) if statuses else queryset
