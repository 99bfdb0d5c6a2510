"""Browser routes of deployments, mounted at /deployments/ (config/urls.py)."""

from django.urls import path

from serving import views

urlpatterns = [
    path("", views.deployment_list, name="deployment-list"),
    path("<slug:name>/", views.deployment_detail, name="deployment-detail"),
    path("<slug:name>/promote/", views.deployment_promote, name="deployment-promote"),
    path("<slug:name>/rollback/", views.deployment_rollback, name="deployment-rollback"),
]
