from django.urls import path

from jobs import api

urlpatterns = [
    path("jobs/", api.JobListApi.as_view(), name="api-jobs"),
    path("jobs/<int:job_id>/", api.JobDetailApi.as_view(), name="api-job"),
    path("jobs/<int:job_id>/cancel/", api.JobCancelApi.as_view(), name="api-job-cancel"),
    path("jobs/<int:job_id>/clone/", api.JobCloneApi.as_view(), name="api-job-clone"),
    path("jobs/<int:job_id>/events/", api.JobEventsApi.as_view(), name="api-job-events"),
    path("jobs/<int:job_id>/logs/", api.JobLogsApi.as_view(), name="api-job-logs"),
    path("queue/", api.QueueApi.as_view(), name="api-queue"),
    path("jobs/<int:job_id>/tensorboard/", api.JobTensorBoardApi.as_view(), name="api-job-tensorboard"),
    path("tensorboards/", api.TensorBoardListApi.as_view(), name="api-tensorboards"),
    path("tensorboards/<int:board_id>/", api.TensorBoardDetailApi.as_view(), name="api-tensorboard"),
]
