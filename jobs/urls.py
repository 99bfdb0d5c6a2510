from django.urls import path

from jobs import api, quota_api

urlpatterns = [
    path("departments/<slug:slug>/", quota_api.DepartmentDetailApi.as_view(), name="api-department"),
    path("departments/<slug:slug>/quotas/", quota_api.DepartmentQuotasApi.as_view(), name="api-department-quotas"),
    path(
        "departments/<slug:slug>/quotas/preview/",
        quota_api.QuotaPreviewApi.as_view(),
        name="api-department-quotas-preview",
    ),
    path("usage/", quota_api.UsageApi.as_view(), name="api-usage"),
    path("clusters/", quota_api.ClusterListApi.as_view(), name="api-clusters"),
    path("jobs/", api.JobListApi.as_view(), name="api-jobs"),
    path("jobs/preview/", api.JobPreviewApi.as_view(), name="api-job-preview"),
    path("jobs/<int:job_id>/", api.JobDetailApi.as_view(), name="api-job"),
    path("jobs/<int:job_id>/cancel/", api.JobCancelApi.as_view(), name="api-job-cancel"),
    path("jobs/<int:job_id>/clone/", api.JobCloneApi.as_view(), name="api-job-clone"),
    path("jobs/<int:job_id>/events/", api.JobEventsApi.as_view(), name="api-job-events"),
    path("jobs/<int:job_id>/logs/", api.JobLogsApi.as_view(), name="api-job-logs"),
    path("queue/", api.QueueApi.as_view(), name="api-queue"),
]
