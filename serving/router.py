"""The inference router's interface (API.md "Deployments and inference"):

    POST /serve/<deployment>/predict   {"instances": [...]} -> {"predictions", "variant", "model_version", "request_id"}
    POST /serve/<deployment>/feedback  {"request_id", "success"}   (an A/B outcome)

Owns the requests: who the caller is, parsing and checking the body, choosing the variant, the answer, as
Django views (config/urls.py mounts ``serving.router``) and straight on ASGI (``asgi_fast_path``, which
config/asgi.py puts in front of Django). Async, and on every prediction's path, so per request it does no
database query and no write:
- callers are recognised from an in-memory cache of token identities (TOKEN_TTL seconds; a revoked token
  stops working within that) or from the browser session (with CSRF, as DRF does);
- the deployment's routing table comes from memory (serving/routing_table.py, compared with the database at
  most once a second);
- the variant is chosen by traffic.choose (sticky by X-Routing-Key when the deployment is sticky), the
  request forwarded over pooled keep-alive connections, one client per event loop (serving/backends/client.py);
- counting, flushing the counts to VariantStats, shadow copies and remembering request_id -> variant for
  the feedback are serving/forwarding.py's.
Outsiders get 404 as if the deployment did not exist; anonymous callers 401.
Nothing is sent to a local model server whose port another process serves (a job that killed it and bound
its port): such a variant answers 503 and is restarted (routing_table.refusal).
"""

from __future__ import annotations

import hashlib
import json
import random
import re
import time
import uuid
from dataclasses import dataclass

from asgiref.sync import sync_to_async
from django.http import HttpResponse
from django.middleware.csrf import CsrfViewMiddleware
from django.urls import path
from django.views.decorators.csrf import csrf_exempt

from accounts import permissions, tokens
from serving import forwarding, routing_table, traffic
from serving.backends.client import UpstreamError
from serving.backends.client import client as model_client
from serving.routing_table import Route, Table
from serving.routing_table import tables_forget as tables_forget  # re-exported: tests that rebuild the world

TOKEN_TTL = 10.0
UPSTREAM_TIMEOUT = 30.0
MAX_BODY = 16 * 1024 * 1024
_PREFIX = b'{"predictions":'


# --- Callers -----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Caller:
    user_id: int
    is_admin: bool
    departments: frozenset[int]
    expires: float = 0.0

    def may_use(self, table: Table) -> bool:
        return self.is_admin or table.department_id in self.departments


_token_callers: dict[str, Caller] = {}


def _token_caller(key: str) -> Caller | None:
    token = tokens.token_authenticate(key)
    if token is None:
        return None
    user = token.user
    return Caller(
        user.pk, permissions.is_platform_admin(user), frozenset(permissions.roles(user)), time.monotonic() + TOKEN_TTL
    )


def _session_caller(user) -> Caller:
    return Caller(user.pk, permissions.is_platform_admin(user), frozenset(permissions.roles(user)))


class _CsrfCheck(CsrfViewMiddleware):
    def _reject(self, request, reason):
        return reason


async def _token_caller_of(header: str) -> Caller | Reply:
    keyword, _, key = header.partition(" ")
    key = key.strip()
    if keyword != "Token" or not key:
        return _unauthorized("Send Authorization: Token <key>.")
    digest = hashlib.sha256(key.encode()).hexdigest()
    caller = _token_callers.get(digest)
    if caller is None or caller.expires < time.monotonic():
        caller = await sync_to_async(routing_table.fresh(_token_caller))(key)
        if caller is None:
            _token_callers.pop(digest, None)
            return _unauthorized("Invalid, revoked or expired token.")
        if len(_token_callers) > 10000:
            _token_callers.clear()
        _token_callers[digest] = caller
    return caller


async def _caller(request) -> Caller | Reply:
    header = request.headers.get("Authorization", "")
    if header:
        return await _token_caller_of(header)
    user = await request.auser()
    if not user.is_authenticated:
        return _unauthorized("Authentication credentials were not provided.")
    check = _CsrfCheck(lambda req: None)
    check.process_request(request)
    reason = check.process_view(request, None, (), {})
    if reason:
        return _error(403, f"CSRF failed: {reason}")
    return await sync_to_async(_session_caller)(user)


# --- Requests ----------------------------------------------------------------------------------------

Reply = tuple[int, bytes, tuple[tuple[str, str], ...]]  # status, JSON body, extra headers


async def _predict(caller: Caller, deployment: str, body: bytes, routing_key: str | None) -> Reply:
    table = await routing_table.table_for(deployment)
    if table is None or not caller.may_use(table):
        return _error(404, "No deployment with that name in your departments.")
    problem = _instances_problem(body)
    if problem:
        return _error(400, problem, field="instances")
    if not table.choices:
        return _error(503, "No variant of this deployment has a ready model server yet; try again shortly.", retry=True)
    route = table.routes[
        traffic.choose(table.choices, routing_key=routing_key, sticky=table.sticky, rng=random).variant
    ]
    refusal = await routing_table.refusal(route)
    if refusal:
        table.checked_at = 0.0  # its server is failed now: look at the database on the next request
        return _error(503, f"Variant {route.name}: {refusal}", retry=True)
    started = time.perf_counter()
    try:
        status, content = await model_client().post(route.host, route.port, route.path, body, timeout=UPSTREAM_TIMEOUT)
    except UpstreamError as exc:
        forwarding.record(route.id, None, error=True)
        table.checked_at = 0.0  # its server may have moved: look at the database on the next request
        return _error(502, f"Variant {route.name} did not answer ({exc}).", retry=True)
    ms = (time.perf_counter() - started) * 1000
    forwarding.record(route.id, ms, error=status >= 500)
    if status != 200:
        return _upstream_error(route, status, content)
    request_id = uuid.uuid4().hex
    forwarding.remember(request_id, deployment, route)
    for shadow in table.shadows:
        forwarding.spawn(forwarding.mirror(shadow, body, content))
    tail = f',"variant":{json.dumps(route.name)},"model_version":{route.model_version},"request_id":"{request_id}"}}'
    if content.startswith(_PREFIX) and content.endswith(b"}"):
        return 200, content[:-1] + tail.encode(), ()  # our servers' answer, extended without parsing it
    try:
        predictions = json.loads(content)["predictions"]
    except (ValueError, KeyError, TypeError):
        return _error(502, f"Variant {route.name} answered without predictions.")
    return 200, (_PREFIX.decode() + json.dumps(predictions) + tail).encode(), ()


async def _feedback(caller: Caller, deployment: str, body: bytes) -> Reply:
    table = await routing_table.table_for(deployment)
    if table is None or not caller.may_use(table):
        return _error(404, "No deployment with that name in your departments.")
    try:
        data = json.loads(body)
        request_id, success = data["request_id"], data["success"]
    except (ValueError, KeyError, TypeError):
        return _error(400, 'Send {"request_id": "...", "success": true|false}.')
    if not isinstance(success, bool):
        return _error(400, "success must be true or false.", field="success")
    if not isinstance(request_id, str) or not request_id:
        return _error(400, "request_id must be the request_id of a prediction.", field="request_id")
    remembered = await forwarding.recall(request_id)
    if remembered is None or remembered[0] != deployment:
        return _error(
            404,
            "Unknown or expired request_id for this deployment (feedback is kept for 24 hours, once).",
            field="request_id",
        )
    _, variant_id, variant_name = remembered
    counters = forwarding.counters_of(variant_id)
    counters["outcomes"] += 1
    counters["successes"] += 1 if success else 0
    forwarding.flush_soon(now=False)
    return 200, json.dumps({"request_id": request_id, "variant": variant_name, "success": success}).encode(), ()


# --- Django views (token or session callers) ---------------------------------------------------------


@csrf_exempt  # token callers have no CSRF token; session callers are checked in _caller
async def predict(request, deployment: str):
    if request.method != "POST":
        return _response(_error(405, "Use POST."))
    caller = await _caller(request)
    if not isinstance(caller, Caller):
        return _response(caller)
    return _response(await _predict(caller, deployment, request.body, request.headers.get("X-Routing-Key") or None))


@csrf_exempt
async def feedback(request, deployment: str):
    if request.method != "POST":
        return _response(_error(405, "Use POST."))
    caller = await _caller(request)
    if not isinstance(caller, Caller):
        return _response(caller)
    return _response(await _feedback(caller, deployment, request.body))


urlpatterns = [
    path("<slug:deployment>/predict", predict, name="serve-predict"),
    path("<slug:deployment>/feedback", feedback, name="serve-feedback"),
]


def _response(reply: Reply) -> HttpResponse:
    status, body, headers = reply
    response = HttpResponse(body, status=status, content_type="application/json")
    for name, value in headers:
        response.headers[name] = value
    return response


# --- The same, straight on ASGI (token callers) -------------------------------------------------------

_FAST_PATH = re.compile(r"^/serve/([-a-zA-Z0-9_]+)/(predict|feedback)$")


def asgi_fast_path(django_app):
    """An ASGI app that answers token-authenticated POSTs to /serve/ itself and hands everything else to Django.

    Django's middleware runs each of its hooks in a worker thread when the view is async (about 5 ms a
    request on two cores, more than the model takes): the router's callers with a token need none of it
    (no session, no CSRF, no locale), so config/asgi.py may put this in front of Django. Session callers,
    anonymous ones and every other path still go through Django and the views above, with the same answers.
    """

    async def app(scope, receive, send):
        if scope["type"] == "http" and scope["method"] == "POST" and (match := _FAST_PATH.match(scope["path"])):
            headers = dict(scope["headers"])
            authorization = headers.get(b"authorization", b"")
            if authorization.startswith(b"Token "):
                body = await _read_body(receive)
                if body is None:
                    reply = _error(413, f"The body is larger than {MAX_BODY // (1024 * 1024)} MiB.")
                else:
                    caller = await _token_caller_of(authorization.decode("latin-1"))
                    if not isinstance(caller, Caller):
                        reply = caller
                    elif match[2] == "predict":
                        key = headers.get(b"x-routing-key", b"").decode("latin-1") or None
                        reply = await _predict(caller, match[1], body, key)
                    else:
                        reply = await _feedback(caller, match[1], body)
                status, payload, extra = reply
                await send(
                    {
                        "type": "http.response.start",
                        "status": status,
                        "headers": [
                            (b"content-type", b"application/json"),
                            (b"content-length", str(len(payload)).encode()),
                            *((name.lower().encode(), value.encode()) for name, value in extra),
                        ],
                    }
                )
                await send({"type": "http.response.body", "body": payload})
                return
        await django_app(scope, receive, send)

    return app


async def _read_body(receive) -> bytes | None:
    chunks, size = [], 0
    while True:
        message = await receive()
        if message["type"] != "http.request":
            return b""
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > MAX_BODY:
            return None
        chunks.append(chunk)
        if not message.get("more_body"):
            return b"".join(chunks)


# --- Helpers -----------------------------------------------------------------------------------------


def _instances_problem(body: bytes) -> str:
    if len(body) > MAX_BODY:
        return f"The body is larger than {MAX_BODY // (1024 * 1024)} MiB."
    try:
        data = json.loads(body)
    except ValueError:
        return 'Send JSON: {"instances": [...]}.'
    if not isinstance(data, dict) or not isinstance(data.get("instances"), list) or not data["instances"]:
        return 'Send {"instances": [...]} with at least one instance.'
    return ""


def _upstream_error(route: Route, status: int, content: bytes) -> Reply:
    try:
        message = json.loads(content).get("error") or ""
    except (ValueError, AttributeError):
        message = ""
    if 400 <= status < 500:
        return _error(400, f"Variant {route.name} refused the instances: {message or status}", field="instances")
    return _error(502, f"Variant {route.name} failed ({status}){': ' + message if message else ''}.")


def _error(status: int, message: str, *, field: str | None = None, retry: bool = False) -> Reply:
    body = {field: [message]} if field else {"detail": message}
    return status, json.dumps(body).encode(), (("Retry-After", "1"),) if retry else ()


def _unauthorized(message: str) -> Reply:
    return 401, json.dumps({"detail": message}).encode(), (("WWW-Authenticate", "Token"),)
