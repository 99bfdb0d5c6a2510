"""Django's error answers (config/urls.py handler400/403/404/500, CSRF_FAILURE_VIEW): JSON ``{"detail": ...}``
under /api/ and /serve/, never an HTML page there; every other path gets the portal's own page
(frontend/error_pages.py: what happened, what to do, the portal's navigation).

DRF answers its own errors in JSON (core/api.py's exception_handler); these cover what happens outside or
before a DRF view: an unknown /api/ path, a body Django refuses (RequestDataTooBig, TooManyFieldsSent), any
other SuspiciousOperation, an exception no handler caught.
"""

from __future__ import annotations

from django.conf import settings
from django.core.exceptions import RequestDataTooBig, TooManyFieldsSent, TooManyFilesSent
from django.http import HttpResponse, JsonResponse

from config.edge import page, size, wants_json
from frontend import error_pages


def error_answer(request, status: int, title: str, message: str) -> HttpResponse:
    """JSON for the API paths, else a short page, with ``message`` as the detail."""
    if wants_json(request.path):
        return JsonResponse({"detail": message}, status=status)
    return HttpResponse(page(title, message), status=status, content_type="text/html; charset=utf-8")


def bad_request(request, exception=None):
    if not wants_json(request.path):
        return error_pages.bad_request(request, exception)
    if isinstance(exception, RequestDataTooBig):
        message = (
            f"The request body is larger than the {size(settings.DATA_UPLOAD_MAX_MEMORY_SIZE)} the portal accepts. "
            "Send a smaller body."
        )
    elif isinstance(exception, TooManyFieldsSent | TooManyFilesSent):
        message = "The request has more fields than the portal accepts. Send fewer fields, or send JSON."
    else:
        message = "The portal could not accept this request as it was sent. Check its address, headers and body."
    return JsonResponse({"detail": message}, status=400)


def permission_denied(request, exception=None):
    if not wants_json(request.path):
        return error_pages.permission_denied(request, exception)
    return JsonResponse({"detail": "You do not have permission to do this."}, status=403)


def csrf_failure(request, reason: str = ""):
    """CSRF_FAILURE_VIEW. DRF checks the token of its own session-authenticated requests (a JSON 403 there)."""
    if not wants_json(request.path):
        return error_pages.csrf_failure(request, reason)
    return JsonResponse(
        {"detail": "The request has no valid CSRF token. Send the token of the page, or use an API token."},
        status=403,
    )


def page_not_found(request, exception=None):
    if not wants_json(request.path):
        return error_pages.page_not_found(request, exception)
    return JsonResponse(
        {"detail": f"There is no {request.path} in the API. The paths are listed at /api/v1/docs/."}, status=404
    )


def server_error(request):
    if not wants_json(request.path):
        return error_pages.server_error(request)
    return JsonResponse(
        {
            "detail": "The portal failed on this request (a server error, logged for its operators). "
            "Try again; if it keeps failing, tell your platform admins."
        },
        status=500,
    )
