from django.urls import path

from quotas import api

urlpatterns = [
    path("priority-classes/", api.PriorityClassListApi.as_view(), name="api-priority-classes"),
]
