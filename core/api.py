"""REST conventions shared by every app: pagination, throttling, the error shapes and 404 for what is not the
caller's (API.md "Conventions")."""

import difflib
from typing import TypeVar

from django.conf import settings
from django.http import Http404
from rest_framework import serializers
from rest_framework.exceptions import ValidationError
from rest_framework.fields import SkipField
from rest_framework.pagination import PageNumberPagination
from rest_framework.throttling import AnonRateThrottle, UserRateThrottle

T = TypeVar("T")


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
    from core.db_busy import busy_api_response  # the database pool stayed busy: 503 + Retry-After, never 500

    if (busy := busy_api_response(exc)) is not None:
        return busy
    return drf_handler(exc, context)


def visible_or_404(found: T | None, message: str) -> T:
    """What a selector found among the caller's own, or a 404 with ``message`` (API.md: not yours reads as not there)."""
    if found is None:
        raise Http404(message)
    return found


def parse_input(
    serializer: type[serializers.Serializer],
    data,
    *,
    what: str,
    partial: bool = False,
    fixed_on_patch: dict[str, str] | None = None,
    prefix_guesses: bool = False,
) -> tuple[dict, dict]:
    """Each field on its own, so that one bad field does not hide the problems of the others.

    Returns (values of the fields that parsed, errors of those that did not and of unknown fields). ``what``
    ends "Send a JSON object describing ..."; ``fixed_on_patch`` names the fields a PATCH cannot change, and why.
    ``prefix_guesses``: an unknown field that starts a known one is guessed as that one ("gpus": gpus_per_worker).
    """
    if not isinstance(data, dict):
        raise ValidationError({"non_field_errors": [f"Send a JSON object describing {what}."]})
    fields = serializer().fields
    values, errors = {}, {}
    for name, field in fields.items():
        if partial and name not in data:
            continue
        try:
            values[name] = field.run_validation(field.get_value(data))
        except ValidationError as exc:
            errors[name] = exc.detail
        except SkipField:
            pass
    for unknown in sorted(set(data) - set(fields)):
        if partial and unknown in (fixed_on_patch or {}):
            errors[unknown] = [fixed_on_patch[unknown]]
            continue
        guess = [name for name in fields if name.startswith(unknown)] if prefix_guesses else []
        guess = guess or difflib.get_close_matches(unknown, fields, n=1)
        errors[unknown] = [f"Unknown field{f'; did you mean {guess[0]!r}?' if guess else '.'}"]
    return values, errors
