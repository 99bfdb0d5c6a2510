"""Query filters of the job lists (API.md "Jobs"): they narrow what the selectors already scoped to the caller."""

from __future__ import annotations

import django_filters
from django.db.models import Q, QuerySet

from jobs.models import Job


class JobFilter(django_filters.FilterSet):
    # strip=False: a value is matched as sent, as the hand-parsed filters did.
    department = django_filters.CharFilter(field_name="department__slug", strip=False, help_text="Department slug")
    status = django_filters.CharFilter(
        method="filter_status", strip=False, help_text="One status, or several separated by commas"
    )
    submitted_by = django_filters.CharFilter(field_name="submitted_by__username", strip=False, help_text="Username")
    search = django_filters.CharFilter(
        method="filter_search", strip=False, help_text="Text in the name, command or code URL"
    )

    class Meta:
        model = Job
        fields = ["department", "status", "submitted_by", "search"]

    def filter_status(self, queryset: QuerySet[Job], name: str, value: str) -> QuerySet[Job]:
        return queryset.filter(status__in=value.split(","))

    def filter_search(self, queryset: QuerySet[Job], name: str, value: str) -> QuerySet[Job]:
        return queryset.filter(Q(name__icontains=value) | Q(command__icontains=value) | Q(code_url__icontains=value))


class QueueFilter(django_filters.FilterSet):
    cluster = django_filters.CharFilter(field_name="cluster__name", strip=False, help_text="Cluster name")
    gpu_type = django_filters.CharFilter(field_name="pool__gpu_type", strip=False, help_text="GPU type of the pool")

    class Meta:
        model = Job
        fields = ["cluster", "gpu_type"]
