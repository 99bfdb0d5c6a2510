from django.urls import path

from serving import api

urlpatterns = [
    path("deployments/", api.DeploymentListApi.as_view(), name="api-deployments"),
    path("deployments/<slug:name>/", api.DeploymentDetailApi.as_view(), name="api-deployment"),
    path("deployments/<slug:name>/promote/", api.DeploymentPromoteApi.as_view(), name="api-deployment-promote"),
    path("deployments/<slug:name>/rollback/", api.DeploymentRollbackApi.as_view(), name="api-deployment-rollback"),
    path("deployments/<slug:name>/metrics/", api.DeploymentMetricsApi.as_view(), name="api-deployment-metrics"),
]
