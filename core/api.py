"""REST conventions shared by every app: pagination and throttling (API.md "Conventions")."""

from django.conf import settings
from rest_framework.pagination import PageNumberPagination
from rest_framework.throttling import AnonRateThrottle, UserRateThrottle


class Pagination(PageNumberPagination):
    page_size = 50
    page_size_query_param = "page_size"
    max_page_size = 200


class _RateFromSettings:
    # DRF copies the rates into a class attribute at import time; reading them
    # per request lets tests and admins change them without a restart.
    def get_rate(self):
        return settings.REST_FRAMEWORK["DEFAULT_THROTTLE_RATES"][self.scope]


class AnonThrottle(_RateFromSettings, AnonRateThrottle):
    pass


class UserThrottle(_RateFromSettings, UserRateThrottle):
    pass


def exception_handler(exc, context):
    """DRF's handler, plus the service errors of core.errors in the API.md shapes."""
    from rest_framework import status
    from rest_framework.response import Response
    from rest_framework.views import exception_handler as drf_handler

    from core.errors import Conflict, InvalidInput

    if isinstance(exc, InvalidInput):
        return Response(exc.errors, status=status.HTTP_400_BAD_REQUEST)
    if isinstance(exc, Conflict):
        return Response({"detail": str(exc)}, status=status.HTTP_409_CONFLICT)
    return drf_handler(exc, context)
