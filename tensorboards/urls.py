from django.urls import path

from tensorboards import api

urlpatterns = [
    path("jobs/<int:job_id>/tensorboard/", api.JobTensorBoardApi.as_view(), name="api-job-tensorboard"),
    path("tensorboards/", api.TensorBoardListApi.as_view(), name="api-tensorboards"),
    path("tensorboards/<int:board_id>/", api.TensorBoardDetailApi.as_view(), name="api-tensorboard"),
]
