from django.urls import path

from images import api

urlpatterns = [
    path("images/", api.ImageListApi.as_view(), name="api-images"),
    path("image-builds/", api.BuildListApi.as_view(), name="api-image-builds"),
    path("image-builds/<int:build_id>/", api.BuildDetailApi.as_view(), name="api-image-build"),
    path("image-builds/<int:build_id>/cancel/", api.BuildCancelApi.as_view(), name="api-image-build-cancel"),
    path("image-builds/<int:build_id>/logs/", api.BuildLogsApi.as_view(), name="api-image-build-logs"),
]
