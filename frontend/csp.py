"""The Content-Security-Policy of every answer (django-csp 4, settings CONTENT_SECURITY_POLICY).

connect-src 'self' already covers ws:// and wss:// of the page's own host and port in browsers that follow
CSP Level 3; older ones (Safari before 15.4) read 'self' as http(s) only, so the websocket origin of the host
the page was served from is added to each answer: the live updates of portal.js need it.
"""

from __future__ import annotations

from csp.middleware import CSPMiddleware, PolicyParts
from django.core.exceptions import DisallowedHost


class PortalCSPMiddleware(CSPMiddleware):
    def get_policy_parts(self, request, response, report_only: bool = False) -> PolicyParts:
        parts = super().get_policy_parts(request, response, report_only)
        try:
            host = request.get_host()  # one of ALLOWED_HOSTS, or it raises
        except DisallowedHost:  # Django answers 400 anyway; the policy stays as configured
            return parts
        socket_origin = f"{'wss' if request.is_secure() else 'ws'}://{host}"
        parts.update = {**(parts.update or {})}
        parts.update["connect-src"] = [*parts.update.get("connect-src", ()), socket_origin]
        return parts
