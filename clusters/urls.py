from django.urls import path

from clusters import storage_api

urlpatterns = [
    path("storage/", storage_api.StorageListApi.as_view(), name="api-storage"),
    path("storage/<int:storage_id>/", storage_api.StorageDetailApi.as_view(), name="api-storage-detail"),
]
