from django.urls import path

from frontend import consumers

websocket_urlpatterns = [
    path("ws/jobs/<int:job_id>/", consumers.JobConsumer.as_asgi()),
    path("ws/departments/<slug:slug>/", consumers.DepartmentConsumer.as_asgi()),
]
