"""The portal's authenticated reverse proxy to TensorBoards (API.md "TensorBoard").

/tensorboard/<job_id>/... serves the job's board, /tensorboard/compare/<board_id>/... a comparison.
The caller is the user of the API token in `Authorization: Token <key>` (the REST API's header and rules:
ApiTokenAuthentication; a malformed, unknown, revoked or expired token is 401, never a fall-back to the
session), else the signed-in user of the session. Tokens in the query string are not read (URLs end up in
logs and histories). Only users who may see every job of the board get through; everyone else gets 404, so a
board's existence is never revealed. POSTs authenticated by the session cookie must come from the portal's
own origin (TensorBoard's UI cannot send Django's CSRF token); token-authenticated ones are not
cookie-authenticated, so no other site can make a browser send them. Path tricks (dot segments, encoded slashes, backslashes, NUL,
absolute URLs) get 400. A board that is not running is started (503 with Retry-After meanwhile).
A browser opening a page (GET, Accept: text/html, no token) gets every refusal as a page of the portal with the
same status: with the portal's navigation and links on its own, a compact one inside the job page's frame
(Sec-Fetch-Dest: iframe); API and token clients get the plain text as before.
TensorBoard's index page names its fonts at the site's root (url(/font-roboto/...)), which behind the
prefix is the portal's: the proxy rewrites those to the board's prefix (_rewrite_index).
Nothing is forwarded to a board whose port is served by another process than the one the portal started
(boards.board_verify, looked at on every request and fully every few seconds): 503, and it starts again.
Responses stream from TensorBoard through one pooled httpx client per event loop; cookies and
credentials of the portal are never passed on.
"""

from __future__ import annotations

import asyncio
import weakref
from typing import Any
from urllib.parse import quote

import httpx
from asgiref.sync import sync_to_async
from django.contrib.auth.views import redirect_to_login
from django.http import HttpResponse, HttpResponseNotAllowed, StreamingHttpResponse
from django.template import loader
from django.urls import path, reverse
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy
from django.views.decorators.csrf import csrf_exempt
from rest_framework.exceptions import AuthenticationFailed

from accounts.authentication import ApiTokenAuthentication
from core.errors import Conflict
from tensorboards import services as boards
from tensorboards.models import TensorBoard

RETRY_SECONDS = 2
# What TensorBoard's UI sends that matters to it; never the portal's cookies or Authorization.
REQUEST_HEADERS = (
    "accept",
    "accept-encoding",
    "accept-language",
    "content-type",
    "if-none-match",
    "if-modified-since",
    "cache-control",
    "pragma",
)
HOP_BY_HOP = {
    "connection",
    "keep-alive",
    "proxy-authenticate",
    "proxy-authorization",
    "te",
    "trailer",
    "trailers",
    "transfer-encoding",
    "upgrade",
    "proxy-connection",
}
# Set by the portal itself, or not TensorBoard's to set on the portal's origin.
NOT_FORWARDED = HOP_BY_HOP | {"set-cookie", "server", "date", "x-frame-options"}
# Added to TensorBoard's own Content-Security-Policy (its scripts by hash, its inline styles), which lets anyone
# frame it: only the portal's pages may, and <base> and form posts stay on the portal.
TENSORBOARD_CSP_EXTRA = "frame-ancestors 'self'; base-uri 'self'; form-action 'self'"
_BAD_ENCODINGS = ("%2f", "%5c", "%00", "%2e")
_TOKEN_AUTH = ApiTokenAuthentication()
# Query parameters someone might put a token in; named in the 401 so that they move it to the header.
_TOKEN_PARAMETERS = ("token", "access_token", "api_token", "auth_token", "key")
# TensorBoard's index.html loads its Roboto fonts from the site's root; behind the prefix they are the board's.
_ROOT_FONTS = b"url(/font-roboto/"
INDEX_MAX_BYTES = 8 * 1024 * 1024  # TensorBoard 2.x's index.html is about 200 KiB

_clients: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, httpx.AsyncClient] = weakref.WeakKeyDictionary()


def _client() -> httpx.AsyncClient:
    loop = asyncio.get_running_loop()
    client = _clients.get(loop)
    if client is None:
        client = _clients[loop] = httpx.AsyncClient(
            timeout=httpx.Timeout(60, connect=2),
            limits=httpx.Limits(max_connections=100, max_keepalive_connections=20),
            follow_redirects=False,
            trust_env=False,  # never through an HTTP_PROXY meant for the outside world
        )
    return client


async def clients_close() -> None:
    """Close this event loop's pooled client (tests end their loop after each request)."""
    client = _clients.pop(asyncio.get_running_loop(), None)
    if client is not None:
        await client.aclose()


@csrf_exempt  # TensorBoard's UI posts forms to its data API without the portal's CSRF token; see _foreign_origin
async def job_board(request, job_id: int, rest: str = ""):
    return await _proxy(request, rest, job_id=job_id)


@csrf_exempt
async def compare_board(request, board_id: int, rest: str = ""):
    return await _proxy(request, rest, board_id=board_id)


urlpatterns = [
    path("<int:job_id>/", job_board, name="tensorboard-job"),
    path("<int:job_id>/<path:rest>", job_board),
    path("compare/<int:board_id>/", compare_board, name="tensorboard-compare"),
    path("compare/<int:board_id>/<path:rest>", compare_board),
]


async def _proxy(request, rest: str, *, job_id: int | None = None, board_id: int | None = None):
    if request.method not in ("GET", "POST"):
        return HttpResponseNotAllowed(["GET", "POST"])
    problem = _path_problem(request, rest)
    if problem:
        return await _refusal(request, 400, problem)
    caller = await _caller(request)
    if isinstance(caller, HttpResponse):
        return caller
    user, by_token = caller
    if not user.is_authenticated:
        if request.method == "GET" and "text/html" in request.headers.get("Accept", ""):
            return redirect_to_login(request.get_full_path())
        if any(name in request.GET for name in _TOKEN_PARAMETERS):
            return _unauthorized(
                "API tokens are not read from the URL (URLs end up in logs and histories): "
                "send the token as the header Authorization: Token <key>."
            )
        return _unauthorized(
            "Sign in to the portal to open TensorBoard, or send an API token as the header Authorization: Token <key>."
        )
    if request.method == "POST" and not by_token and _foreign_origin(request):
        return _text(403, "Cross-origin requests to TensorBoard are not allowed.")
    try:
        board = await sync_to_async(boards.board_open)(user=user, job_id=job_id, board_id=board_id)
    except Conflict as exc:
        return await _refusal(request, 409, str(exc), job_id=job_id)
    if board is None:
        return await _refusal(request, 404, _("No TensorBoard with that id in your departments."))
    if board.status != TensorBoard.Status.RUNNING:
        return await _not_ready(request, board, job_id=job_id)
    client = _client()
    upstream_request = client.build_request(
        request.method,
        f"http://{board.host}:{board.port}{boards.board_url(board)}{quote(rest, safe='/:@!$&()*+,;=-._~')}",
        params=request.META.get("QUERY_STRING", ""),
        # httpx would ask for gzip on a client's behalf that cannot read it: pass on what the client accepts.
        headers={"accept-encoding": "identity"}
        | {name: value for name in REQUEST_HEADERS if (value := request.headers.get(name))},
        content=request.body if request.method == "POST" else None,
    )
    try:
        upstream = await client.send(upstream_request, stream=True)
    except (httpx.ConnectError, httpx.ConnectTimeout):
        # Its process died since it was last looked at: notice it and start it again.
        board = await sync_to_async(boards.board_ensure)(board=board, user=user, restart_failed=False)
        return await _not_ready(request, board, job_id=job_id)
    except httpx.HTTPError as exc:
        return await _refusal(
            request, 502, _("TensorBoard did not answer: %(error)s.") % {"error": exc.__class__.__name__}, job_id=job_id
        )
    if _is_index(upstream):
        response: HttpResponse | StreamingHttpResponse = await _rewrite_index(upstream, boards.board_url(board))
        not_forwarded = NOT_FORWARDED | {"content-encoding", "content-length"}  # its own, decoded and rewritten
    else:
        response, not_forwarded = StreamingHttpResponse(_stream(upstream), status=upstream.status_code), NOT_FORWARDED
    for name, value in upstream.headers.multi_items():
        if name.lower() not in not_forwarded:
            response.headers[name] = value
    response.headers["X-Frame-Options"] = "SAMEORIGIN"  # the job page embeds the board in an iframe
    if policy := response.headers.get("Content-Security-Policy"):  # the portal's own (frontend.csp) otherwise
        response.headers["Content-Security-Policy"] = f"{policy}; {TENSORBOARD_CSP_EXTRA}"
    return response


def _is_index(upstream: httpx.Response) -> bool:
    """TensorBoard's HTML page (its index), read whole to point its fonts at the board; nothing else is read."""
    content_type = upstream.headers.get("content-type", "")
    length = upstream.headers.get("content-length", "")
    small = not length or (length.isdigit() and int(length) <= INDEX_MAX_BYTES)
    return upstream.status_code == 200 and content_type.startswith("text/html") and small


async def _rewrite_index(upstream: httpx.Response, prefix: str) -> HttpResponse:
    """The index with url(/font-roboto/...) made url(<prefix>font-roboto/...), which TensorBoard serves.

    Read decoded (TensorBoard gzips it for a client that accepts gzip) and sent uncompressed: its inline
    styles are allowed by TensorBoard's policy ('unsafe-inline'); its scripts, checked by hash, are untouched.
    """
    try:
        body = await upstream.aread()
    finally:
        await upstream.aclose()
    return HttpResponse(
        body.replace(_ROOT_FONTS, b"url(" + prefix.encode() + b"font-roboto/"), status=upstream.status_code
    )


async def _stream(upstream: httpx.Response):
    try:
        async for chunk in upstream.aiter_raw():  # raw: the client gets TensorBoard's own encoding
            yield chunk
    finally:
        await upstream.aclose()


async def _caller(request) -> tuple[Any, bool] | HttpResponse:
    """(user, whether an API token vouches for them), or the 401 for a token that does not work.

    Authorization: Token <key> is the REST API's header, parsed by the same class; another scheme (e.g. Basic
    from a proxy in front of the portal) is left to the session, as the REST API does.
    """
    if request.headers.get("Authorization"):
        try:
            found = await sync_to_async(_TOKEN_AUTH.authenticate)(request)
        except AuthenticationFailed as exc:
            return _unauthorized(
                f"{exc.detail} Send a working token as Authorization: Token <key> (create one at /tokens/ on the "
                "portal), or sign in to the portal."
            )
        if found is not None:
            return found[0], True
    return await request.auser(), False


def _unauthorized(message: str) -> HttpResponse:
    response = _text(401, message)
    response.headers["WWW-Authenticate"] = "Token"
    return response


def _path_problem(request, rest: str) -> str:
    raw = request.scope.get("raw_path") if hasattr(request, "scope") else None
    if raw and any(code in raw.decode("latin-1").lower() for code in _BAD_ENCODINGS):
        return "Encoded slashes, backslashes, dots or NUL are not allowed in TensorBoard paths."
    if any(ch == "\\" or ord(ch) < 0x20 or ord(ch) == 0x7F for ch in request.path):
        return "Backslashes and control characters are not allowed in TensorBoard paths."
    segments = rest.split("/")
    if any(segment in (".", "..") for segment in request.path.split("/")):
        return "Dot segments (. and ..) are not allowed in TensorBoard paths."
    if "" in segments[:-1] or "://" in rest:
        return "Empty path segments and absolute URLs are not allowed in TensorBoard paths."
    return ""


def _foreign_origin(request) -> bool:
    origin = request.headers.get("Origin")
    return bool(origin) and origin != f"{request.scheme}://{request.get_host()}"


async def _not_ready(request, board, *, job_id: int | None) -> HttpResponse:
    if board.status == TensorBoard.Status.FAILED:
        return await _refusal(
            request,
            502,
            _("TensorBoard could not start: %(reason)s") % {"reason": board.message},
            hint=_("Start it again from the job page."),
            job_id=job_id,
        )
    message = _("TensorBoard is starting; try again in a few seconds.")
    if board.status == TensorBoard.Status.STOPPED and board.message:
        message = board.message  # boards.NOT_OURS: stopped just now, started again by the next request
    if _for_browser(request):
        response = await _refusal(
            request, 503, message, title=_("TensorBoard is starting"), refresh=RETRY_SECONDS, job_id=job_id
        )
    else:
        response = _text(503, message)
    response.headers["Retry-After"] = str(RETRY_SECONDS)
    response.headers["Cache-Control"] = "no-store"
    return response


def _for_browser(request) -> bool:
    """A person's browser opening a page: a refusal is a page of the portal, not text."""
    return (
        request.method == "GET"
        and "text/html" in request.headers.get("Accept", "")
        and not request.headers.get("Authorization")
    )


REFUSAL_TITLES = {
    400: gettext_lazy("This TensorBoard address is not allowed"),
    404: gettext_lazy("TensorBoard not found"),
    409: gettext_lazy("This job has no TensorBoard"),
    502: gettext_lazy("TensorBoard is not available"),
}


async def _refusal(
    request,
    status: int,
    message: str,
    *,
    title: str | None = None,
    hint: str = "",
    refresh: int | None = None,
    job_id: int | None = None,
) -> HttpResponse:
    """Plain text for API and token clients; for a browser, a page of the portal with the same status."""
    if not _for_browser(request):
        return _text(status, f"{message}\n{hint}" if hint else message)
    context = {
        "status": status,
        "title": title or str(REFUSAL_TITLES.get(status, "TensorBoard")),
        "message": message,
        "hint": hint,
        "refresh": refresh,
        # A 404 names no job: whether it exists is not the visitor's to know.
        "job_url": reverse("job-detail", args=[job_id]) if job_id is not None and status != 404 else "",
    }
    framed = request.headers.get("Sec-Fetch-Dest") == "iframe"
    template = "tensorboards/refusal_frame.html" if framed else "tensorboards/refusal.html"
    body = await sync_to_async(loader.render_to_string)(template, context, request)
    return HttpResponse(body, status=status)


def _text(status: int, message: str) -> HttpResponse:
    return HttpResponse(message, status=status, content_type="text/plain; charset=utf-8")
