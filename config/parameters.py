"""Parameters with NUL or other control characters are refused before any view (settings MIDDLEWARE, early).

A NUL in a query parameter reached the database through django-filter filters and the pages' search boxes,
where PostgreSQL refuses it (a 500); no field of the portal means a control character. So the address, every
query parameter and every field of a form body are checked: a name may hold no C0 control character
(U+0000-U+001F), a value none but tab, line feed and carriage return. The answer is a 400 naming the
parameter: JSON ``{"detail": ...}`` under /api/ and /serve/, a short page elsewhere. (JSON bodies are
checked by the API's parser, core/parsers.py.)
"""

from __future__ import annotations

import re

from asgiref.sync import iscoroutinefunction, markcoroutinefunction

from config.errors import error_answer

_IN_NAME = re.compile(r"[\x00-\x1f]")
_IN_VALUE = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f]")
_FORMS = ("application/x-www-form-urlencoded", "multipart/form-data")


def visible(text: str) -> str:
    r"""``text`` with its control characters written out (``\x00``), to be shown back to the person."""
    return _IN_NAME.sub(lambda match: f"\\x{ord(match[0]):02x}", text)


def _character(found: str) -> str:
    code = f"\\x{ord(found):02x}"
    return f"a NUL character ({code})" if found == "\x00" else f"a control character ({code})"


def _in_pairs(pairs, kind: str) -> str | None:
    for name, values in pairs:
        if found := _IN_NAME.search(name):
            return f"The name of the {kind} '{visible(name)}' contains {_character(found[0])}"
        for value in values:
            if found := _IN_VALUE.search(value):
                return f"The {kind} {name!r} contains {_character(found[0])}"
    return None


def problem(request) -> str | None:
    """What is wrong with the request's address, query parameters or form fields, as a sentence; or None."""
    where: str | None
    if found := _IN_NAME.search(request.path):
        where = f"The address '{visible(request.path)}' contains {_character(found[0])}"
    else:
        where = _in_pairs(request.GET.lists(), "query parameter")
        if where is None and request.method == "POST" and request.content_type in _FORMS:
            # The body first: parsing a multipart form from the stream would consume it, and views that read
            # request.body (the TensorBoard proxy passes TensorBoard's own multipart posts on) could not.
            # It is at most PORTAL_MAX_REQUEST_BYTES (config/edge.py), so keeping it costs little.
            request.body  # noqa: B018 - cached on the request for request.POST and the view
            where = _in_pairs(request.POST.lists(), "form field")
    if where is None:
        return None
    return f"{where}, which the portal does not accept. Remove it and try again."


class ControlCharactersMiddleware:
    """Refuses requests whose parameters hold control characters (see the module); sync and async."""

    sync_capable = True
    async_capable = True

    def __init__(self, get_response):
        self.get_response = get_response
        self.async_mode = iscoroutinefunction(get_response)
        if self.async_mode:
            markcoroutinefunction(self)

    def __call__(self, request):
        if self.async_mode:
            return self._acall(request)
        refusal = problem(request)
        if refusal:
            return error_answer(request, 400, "Bad request", refusal)
        return self.get_response(request)

    async def _acall(self, request):
        refusal = problem(request)
        if refusal:
            return error_answer(request, 400, "Bad request", refusal)
        return await self.get_response(request)
