from django.urls import path

from models_registry import api

urlpatterns = [
    path("models/", api.ModelListApi.as_view(), name="api-models"),
    path("models/<slug:name>/", api.ModelDetailApi.as_view(), name="api-model"),
    path("models/<slug:name>/versions/", api.VersionListApi.as_view(), name="api-model-versions"),
    path("models/<slug:name>/versions/<int:number>/", api.VersionDetailApi.as_view(), name="api-model-version"),
]
