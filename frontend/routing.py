from channels.routing import URLRouter
from django.urls import path

from frontend import consumers
from frontend.ws_auth import TokenOrSessionAuth
from frontend.ws_origin import OriginValidator

websocket_urlpatterns = [
    path("ws/jobs/<int:job_id>/", consumers.JobConsumer.as_asgi()),
    path("ws/departments/<slug:slug>/", consumers.DepartmentConsumer.as_asgi()),
]


def websocket_application():
    """config.asgi's websocket side: the Origin check (scheme, host and port), who it is (token or session),
    then the consumers."""
    return OriginValidator(TokenOrSessionAuth(URLRouter(websocket_urlpatterns)))
