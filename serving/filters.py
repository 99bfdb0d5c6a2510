"""Query filters of the deployment list (API.md "Deployments and inference"): they narrow deployments_for."""

from __future__ import annotations

import django_filters

from serving.models import Deployment


class DeploymentFilter(django_filters.FilterSet):
    department = django_filters.CharFilter(field_name="department__slug", strip=False, help_text="Department slug")

    class Meta:
        model = Deployment
        fields = ["department"]
