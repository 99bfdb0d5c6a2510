"""Django settings for security, star-imported by config/settings.py: login protection and API tokens, sessions,
websockets and response headers (CSP, HTTPS), and the edge's limits and trusted proxies.
"""

from datetime import timedelta

from csp import constants as _csp_constants
from django.core.exceptions import ImproperlyConfigured

from config.environment import SETTINGS as _s

# --- Login protection and API tokens (accounts/login.py, accounts/tokens.py) ---
# axes first: it refuses a locked-out account or address before any password is checked, on every path that
# calls authenticate() (the login page, the Django admin, POST /api/v1/auth/token/). The second backend is
# Django's ModelBackend that also writes the "login" audit entry.
AUTHENTICATION_BACKENDS = ["axes.backends.AxesStandaloneBackend", "accounts.login.PasswordBackend"]
AXES_FAILURE_LIMIT = _s["login_failure_limit"]
AXES_COOLOFF_TIME = timedelta(minutes=_s["login_lockout_minutes"]) if _s["login_lockout_minutes"] else None
AXES_LOCKOUT_PARAMETERS = _s["login_lockout_parameters"]
# The address is REMOTE_ADDR, which the ASGI layer sets to the real client behind trusted proxies: never a header.
AXES_CLIENT_IP_CALLABLE = "accounts.login.client_address"
AXES_LOCKOUT_CALLABLE = "accounts.login.lockout_response"
# Tries while locked out do not push the end of the lock-out back: the time the page gives holds.
AXES_RESET_COOL_OFF_ON_FAILURE_DURING_LOCKOUT = False
# A right password does not forget earlier failures: that would also forget the address's, and one valid
# account would then let an address guess others' passwords without end.
AXES_RESET_ON_SUCCESS = False
AXES_DISABLE_ACCESS_LOG = True  # sign-ins, sign-outs and lock-outs are in the portal's audit log instead
AXES_SENSITIVE_PARAMETERS = ["password"]
AXES_VERBOSE = False
PORTAL_TOKEN_MAX_DAYS = _s["token_max_days"]

# --- Sessions, sockets and headers (frontend/csp.py, frontend/ws_*.py; platform/README.md "Serving over HTTPS") ---
# Open websockets look again this often whether their session or API token still holds (they also close at once
# on logout and revocation: frontend/ws_sessions.py).
PORTAL_WS_RECHECK_SECONDS = _s["ws_recheck_seconds"]
# Off by default: `make run` serves http://127.0.0.1, where Secure cookies would never be sent back.
PORTAL_HTTPS = _s["https"]
SESSION_COOKIE_SECURE = PORTAL_HTTPS
CSRF_COOKIE_SECURE = PORTAL_HTTPS
# Django sends HSTS only on HTTPS answers (request.is_secure(): behind a proxy, PORTAL_TRUSTED_PROXIES).
SECURE_HSTS_SECONDS = _s["hsts_seconds"] if PORTAL_HTTPS else 0
SECURE_HSTS_INCLUDE_SUBDOMAINS = PORTAL_HTTPS and _s["hsts_subdomains"]
SECURE_HSTS_PRELOAD = PORTAL_HTTPS and _s["hsts_preload"]
SECURE_SSL_REDIRECT = PORTAL_HTTPS and _s["ssl_redirect"]
SECURE_REDIRECT_EXEMPT = [r"^healthz$", r"^metrics$"]  # probes and scrapers inside the cluster speak plain HTTP
for _name, _needs in (("PORTAL_SSL_REDIRECT", "ssl_redirect"), ("PORTAL_HSTS_PRELOAD", "hsts_preload")):
    if _s[_needs] and not PORTAL_HTTPS:
        raise ImproperlyConfigured(
            f"Invalid setting: {_name}=true needs PORTAL_HTTPS=true (the portal is served over HTTPS)"
        )
if SECURE_HSTS_PRELOAD and not (SECURE_HSTS_INCLUDE_SUBDOMAINS and SECURE_HSTS_SECONDS >= 365 * 86400):
    raise ImproperlyConfigured(
        "Invalid setting: PORTAL_HSTS_PRELOAD=true needs PORTAL_HSTS_INCLUDE_SUBDOMAINS=true and "
        "PORTAL_HSTS_SECONDS of at least 31536000 (one year): browsers' preload lists accept nothing less"
    )
SECURE_CONTENT_TYPE_NOSNIFF = True
SECURE_REFERRER_POLICY = "same-origin"
SECURE_CROSS_ORIGIN_OPENER_POLICY = "same-origin"
# No script reads the CSRF cookie: portal.js sends the token of the page's own forms, Swagger UI and the
# browsable API the one rendered into them.
CSRF_COOKIE_HTTPONLY = True
# A refused form is the portal's page saying what to do (JSON under /api/ and /serve/): config/errors.py.
CSRF_FAILURE_VIEW = "config.errors.csrf_failure"
# Content-Security-Policy (django-csp 4): no inline script or style without the request's nonce, nothing from
# other sites, no framing by others. frontend.csp (in MIDDLEWARE, config/settings.py) adds the websocket origins
# of the host a page was served from.
CONTENT_SECURITY_POLICY = {
    "DIRECTIVES": {
        "default-src": ["'self'"],
        "script-src": ["'self'", _csp_constants.NONCE],
        "style-src": ["'self'", _csp_constants.NONCE],
        "img-src": ["'self'", "data:"],  # Swagger UI's and uPlot's icons are data: URLs
        "connect-src": ["'self'"],
        "frame-src": ["'self'"],  # the job page's TensorBoard
        "frame-ancestors": ["'self'"],
        "object-src": ["'none'"],
        "base-uri": ["'self'"],
        "form-action": ["'self'"],
    },
}

# --- The edge: request limits, JSON errors, trusted proxies (config/edge.py, config/asgi.py) ---
# Bodies over these are answered 413 at the ASGI layer, before Django reads them or anyone is authenticated.
PORTAL_MAX_REQUEST_BYTES = _s["max_request_bytes"]
PORTAL_SERVE_MAX_REQUEST_BYTES = _s["serve_max_request_bytes"]
# Django's own check (on request.body / request.POST) stays behind the edge's: it never refuses what the edge let in.
DATA_UPLOAD_MAX_MEMORY_SIZE = max(PORTAL_MAX_REQUEST_BYTES, PORTAL_SERVE_MAX_REQUEST_BYTES)
PORTAL_JSON_MAX_DEPTH = _s["json_max_depth"]
# X-Forwarded-For / X-Forwarded-Proto are applied to the ASGI scope (client address, scheme) by uvicorn's
# ProxyHeadersMiddleware for peers in these networks only; REMOTE_ADDR and request.is_secure() are then right
# everywhere, so Django needs no SECURE_PROXY_SSL_HEADER (which would believe the header from anyone).
PORTAL_TRUSTED_PROXIES = _s["trusted_proxies"]
