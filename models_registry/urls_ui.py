"""Browser routes of the model registry, mounted at /models/ (config/urls.py)."""

from django.urls import path

from models_registry import views

urlpatterns = [
    path("", views.model_list, name="model-list"),
    path("<slug:name>/", views.model_detail, name="model-detail"),
    path("<slug:name>/versions/", views.version_register, name="model-version-register"),
    path("<slug:name>/versions/<int:number>/", views.version_detail, name="model-version"),
    path("<slug:name>/versions/<int:number>/alias/", views.version_alias, name="model-version-alias"),
    path("<slug:name>/versions/<int:number>/tags/", views.version_tags, name="model-version-tags"),
]
