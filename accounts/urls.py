from django.urls import path

from accounts import api

urlpatterns = [
    path("auth/token/", api.TokenApi.as_view(), name="api-token"),
    path("me/", api.MeApi.as_view(), name="api-me"),
    path("departments/", api.DepartmentListApi.as_view(), name="api-departments"),
    path("audit/", api.AuditListApi.as_view(), name="api-audit"),
    path("tokens/", api.ApiTokenListApi.as_view(), name="api-tokens"),
    path("tokens/<int:token_id>/", api.ApiTokenDetailApi.as_view(), name="api-token-detail"),
]
