from django.urls import path

from quotas import api, storage_api

urlpatterns = [
    path("auth/token/", api.TokenApi.as_view(), name="api-token"),
    path("me/", api.MeApi.as_view(), name="api-me"),
    path("departments/", api.DepartmentListApi.as_view(), name="api-departments"),
    path("departments/<slug:slug>/", api.DepartmentDetailApi.as_view(), name="api-department"),
    path("departments/<slug:slug>/quotas/", api.DepartmentQuotasApi.as_view(), name="api-department-quotas"),
    path("departments/<slug:slug>/quotas/preview/", api.QuotaPreviewApi.as_view(), name="api-department-quotas-preview"),
    path("priority-classes/", api.PriorityClassListApi.as_view(), name="api-priority-classes"),
    path("clusters/", api.ClusterListApi.as_view(), name="api-clusters"),
    path("images/", api.ImageListApi.as_view(), name="api-images"),
    path("storage/", storage_api.StorageListApi.as_view(), name="api-storage"),
    path("storage/<int:storage_id>/", storage_api.StorageDetailApi.as_view(), name="api-storage-detail"),
    path("audit/", api.AuditListApi.as_view(), name="api-audit"),
    path("usage/", api.UsageApi.as_view(), name="api-usage"),
    path("tokens/", api.ApiTokenListApi.as_view(), name="api-tokens"),
    path("tokens/<int:token_id>/", api.ApiTokenDetailApi.as_view(), name="api-token-detail"),
]
