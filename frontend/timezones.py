"""Times in the reader's time zone: portal.js stores the browser's IANA zone in the ``portal_tz`` cookie and
this middleware activates it for the request, so ``{{ value|when }}`` and Django's date filters show local time.
A missing or unknown zone leaves the portal's TIME_ZONE (UTC); the API is unaffected (it speaks ISO 8601)."""

from __future__ import annotations

import zoneinfo
from functools import lru_cache

from django.utils import timezone

COOKIE = "portal_tz"


@lru_cache(maxsize=512)
def _zone(name: str) -> zoneinfo.ZoneInfo | None:
    if not name or len(name) > 64 or name.startswith(("/", ".")) or ".." in name:
        return None
    try:
        return zoneinfo.ZoneInfo(name)
    except (zoneinfo.ZoneInfoNotFoundError, ValueError, OSError):
        return None


class ReaderTimeZoneMiddleware:
    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        zone = _zone(request.COOKIES.get(COOKIE, ""))
        if zone is None:
            timezone.deactivate()
        else:
            timezone.activate(zone)
        try:
            return self.get_response(request)
        finally:
            timezone.deactivate()
