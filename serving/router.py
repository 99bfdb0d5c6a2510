"""The inference router (API.md "Deployments and inference"):

    POST /serve/<deployment>/predict   {"instances": [...]} -> {"predictions", "variant", "model_version", "request_id"}
    POST /serve/<deployment>/feedback  {"request_id", "success"}   (an A/B outcome)

Async, and on every prediction's path, so per request it does no database query and no write:
- callers are recognised from an in-memory cache of token identities (TOKEN_TTL seconds; a revoked token
  stops working within that) or from the browser session (with CSRF, as DRF does);
- the deployment's routing table is kept in memory and compared with the database at most once a second
  (selectors.routing_signature: the revision and the servers' addresses), and replaced as a whole, so
  a request sees either the old routing or the new one, never a mix;
- the variant is chosen by traffic.choose (sticky by X-Routing-Key when the deployment is sticky), the
  request forwarded over pooled keep-alive connections, one client per event loop (serving/client.py);
- shadow variants get a copy from a separate task after the answer is ready: their latency and errors
  never reach the caller; their answers are compared with the primary's (traffic.agree);
- counters and latency histograms are summed in memory and added to VariantStats every FLUSH_SECONDS or
  every FLUSH_REQUESTS requests (services.stats_flush), request_id -> variant kept in the cache for
  feedback for FEEDBACK_TTL seconds.
Outsiders get 404 as if the deployment did not exist; anonymous callers 401.
Nothing is sent to a local model server whose port another process serves (a job that killed it and bound
its port): servers.server_verify is asked at most every OWNER_CHECK_SECONDS per variant, and in between
only whether the server's process lives (one read of /proc); such a variant answers 503 and is restarted.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import random
import re
import time
import uuid
import weakref
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from urllib.parse import urlsplit

from asgiref.sync import sync_to_async
from django import db
from django.core.cache import cache, caches
from django.core.cache.backends.locmem import LocMemCache
from django.http import HttpResponse
from django.middleware.csrf import CsrfViewMiddleware
from django.urls import path
from django.views.decorators.csrf import csrf_exempt

from accounts import permissions, tokens
from clusters import local_procs
from serving import selectors, servers, services, traffic
from serving.backends.client import UpstreamError
from serving.backends.client import client as model_client

logger = logging.getLogger(__name__)
TABLE_CHECK_SECONDS = 1.0
TOKEN_TTL = 10.0
FLUSH_SECONDS = 2.0
FLUSH_REQUESTS = 5000
FEEDBACK_TTL = 24 * 3600
UPSTREAM_TIMEOUT = 30.0
SHADOW_TIMEOUT = 10.0
MAX_BODY = 16 * 1024 * 1024
OWNER_CHECK_SECONDS = 3.0
_PREFIX = b'{"predictions":'


# --- Routing tables ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Route:
    id: int
    name: str
    host: str
    port: int
    path: str  # /v1/models/<name>:predict
    model_version: int


@dataclass
class Table:
    name: str
    department_id: int
    sticky: bool
    choices: tuple[tuple[str, int], ...]  # (variant, weight) of the live variants whose server is ready
    routes: dict[str, Route]
    shadows: tuple[Route, ...]
    signature: tuple
    checked_at: float


_tables: dict[str, Table] = {}


def _table_of(data: dict) -> Table:
    routes, choices, shadows = {}, [], []
    for variant in data["variants"]:
        if not variant["ready"]:
            continue
        address = urlsplit(variant["url"])
        # KServe's addresses carry no port (http://<name>.<namespace>.svc.cluster.local): the scheme's default.
        port = address.port or (443 if address.scheme == "https" else 80)
        route = Route(
            id=variant["id"],
            name=variant["name"],
            host=address.hostname,
            port=port,
            path=address.path,
            model_version=variant["model_version"],
        )
        if variant["shadow"]:
            shadows.append(route)
        elif variant["weight"] > 0:
            routes[route.name] = route
            choices.append((route.name, variant["weight"]))
    return Table(
        name=data["name"],
        department_id=data["department_id"],
        sticky=data["sticky"],
        choices=tuple(choices),
        routes=routes,
        shadows=tuple(shadows),
        signature=data["signature"],
        checked_at=time.monotonic(),
    )


async def _table(name: str) -> Table | None:
    table = _tables.get(name)
    now = time.monotonic()
    if table is not None and now - table.checked_at < TABLE_CHECK_SECONDS:
        return table
    if table is not None:
        table.checked_at = now  # the other requests of this second keep using it meanwhile
        signature = await sync_to_async(_fresh(selectors.routing_signature))(name)
        if signature == table.signature:
            return table
    data = await sync_to_async(_fresh(selectors.routing_table))(name)
    if data is None:
        _tables.pop(name, None)
        return None
    table = _tables[name] = _table_of(data)
    return table


def tables_forget() -> None:
    """Drop every cached routing table and look at servers (tests that rebuild the world)."""
    _tables.clear()
    _owners.clear()


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
        caller = await sync_to_async(_fresh(_token_caller))(key)
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


def _fresh(function):
    """Database reads of the fast path, which runs outside Django's request cycle: drop a connection that
    is too old or broken first, as Django does at each request's start."""

    def run(*args, **kwargs):
        db.close_old_connections()
        return function(*args, **kwargs)

    return run


# --- Counters ----------------------------------------------------------------------------------------

_FIELDS = ("requests", "errors", "outcomes", "successes", "shadow_compared", "shadow_agreed")
_pending: dict[int, dict] = {}
_pending_requests = 0
_flush_timer: dict[asyncio.AbstractEventLoop, asyncio.TimerHandle] = weakref.WeakKeyDictionary()
_background: set[asyncio.Task] = set()
_writer = ThreadPoolExecutor(max_workers=1, thread_name_prefix="router-writer")


def _counters(variant_id: int) -> dict:
    counters = _pending.get(variant_id)
    if counters is None:
        counters = _pending[variant_id] = dict.fromkeys(_FIELDS, 0)
        counters["latency_counts"] = traffic.empty_histogram()
    return counters


def _record(variant_id: int, ms: float | None, *, error: bool) -> None:
    global _pending_requests
    counters = _counters(variant_id)
    counters["requests"] += 1
    if error:
        counters["errors"] += 1
    if ms is not None:
        traffic.observe(counters["latency_counts"], ms)
    _pending_requests += 1
    if _pending_requests >= FLUSH_REQUESTS:
        _flush_soon(now=True)
    else:
        _flush_soon(now=False)


def _flush_soon(*, now: bool) -> None:
    loop = asyncio.get_running_loop()
    if now:
        timer = _flush_timer.pop(loop, None)
        if timer is not None:
            timer.cancel()
        _spawn(_flush())
    elif loop not in _flush_timer:
        _flush_timer[loop] = loop.call_later(FLUSH_SECONDS, _timer_fired, loop)


def _timer_fired(loop) -> None:
    _flush_timer.pop(loop, None)
    _spawn(_flush())


async def _flush() -> None:
    global _pending, _pending_requests
    deltas, _pending, _pending_requests = _pending, {}, 0
    if not deltas:
        return
    try:
        await _in_writer(services.stats_flush, deltas=deltas)
    except Exception:  # the database is away or locked: keep the counts for the next flush
        logger.warning("could not write the router's counters; trying again in %s s", FLUSH_SECONDS, exc_info=True)
        for variant_id, delta in deltas.items():
            counters = _counters(variant_id)
            for field in _FIELDS:
                counters[field] += delta[field]
            counters["latency_counts"] = traffic.merge(counters["latency_counts"], delta["latency_counts"])
        _flush_soon(now=False)


async def _in_writer(function, **kwargs):
    """Run a database write off the event loop, after the request that caused it may have ended.

    Not sync_to_async: its default thread belongs to the request, and is gone by the time a timer fires.
    One thread, so flushes apply one after another; its connection is closed after each write."""

    def run():
        try:
            return function(**kwargs)
        finally:
            db.connection.close()

    return await asyncio.get_running_loop().run_in_executor(_writer, run)


async def stats_flush_now() -> None:
    """Write what this process has counted so far (tests, and shutdown hooks)."""
    await _flush()


def _spawn(coroutine) -> None:
    task = asyncio.ensure_future(coroutine)
    _background.add(task)
    task.add_done_callback(_background.discard)


# --- Upstream ----------------------------------------------------------------------------------------


@dataclass
class _Owner:
    address: tuple[str, int]
    checked_at: float
    pid: int | None  # None: not a process on this host (an InferenceService)
    started: int | None


_owners: dict[int, _Owner] = {}  # variant id -> the last full look at its server


async def _refusal(route: Route) -> str:
    """ "" when the route's server is the process the portal started for it; otherwise why it is not used."""
    seen = _owners.get(route.id)
    now = time.monotonic()
    if seen is not None and seen.address == (route.host, route.port):
        if now - seen.checked_at >= OWNER_CHECK_SECONDS:
            seen.checked_at = now  # the other requests of this moment keep the last answer meanwhile
        elif seen.pid is None or local_procs.alive(seen.pid, seen.started):
            return ""
    owner = await sync_to_async(_fresh(servers.server_verify))(variant_id=route.id, host=route.host, port=route.port)
    if owner.ours:
        _owners[route.id] = _Owner((route.host, route.port), time.monotonic(), owner.pid, owner.started)
        return ""
    _owners.pop(route.id, None)
    return owner.message


async def _mirror(route: Route, body: bytes, primary: bytes) -> None:
    """Send the shadow its copy; record its latency, errors and whether it agreed with the primary."""
    if await _refusal(route):
        _record(route.id, None, error=True)
        return
    started = time.perf_counter()
    try:
        status, content = await model_client().post(route.host, route.port, route.path, body, timeout=SHADOW_TIMEOUT)
    except UpstreamError:
        _record(route.id, None, error=True)
        return
    ms = (time.perf_counter() - started) * 1000
    _record(route.id, ms, error=status >= 500)
    if status == 200:
        try:
            agreed = traffic.agree(json.loads(primary)["predictions"], json.loads(content)["predictions"])
        except (ValueError, KeyError, TypeError):
            agreed = False
        counters = _counters(route.id)
        counters["shadow_compared"] += 1
        counters["shadow_agreed"] += 1 if agreed else 0


# --- Requests ----------------------------------------------------------------------------------------

Reply = tuple[int, bytes, tuple[tuple[str, str], ...]]  # status, JSON body, extra headers


async def _predict(caller: Caller, deployment: str, body: bytes, routing_key: str | None) -> Reply:
    table = await _table(deployment)
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
    refusal = await _refusal(route)
    if refusal:
        table.checked_at = 0.0  # its server is failed now: look at the database on the next request
        return _error(503, f"Variant {route.name}: {refusal}", retry=True)
    started = time.perf_counter()
    try:
        status, content = await model_client().post(route.host, route.port, route.path, body, timeout=UPSTREAM_TIMEOUT)
    except UpstreamError as exc:
        _record(route.id, None, error=True)
        table.checked_at = 0.0  # its server may have moved: look at the database on the next request
        return _error(502, f"Variant {route.name} did not answer ({exc}).", retry=True)
    ms = (time.perf_counter() - started) * 1000
    _record(route.id, ms, error=status >= 500)
    if status != 200:
        return _upstream_error(route, status, content)
    request_id = uuid.uuid4().hex
    _remember(request_id, deployment, route)
    for shadow in table.shadows:
        _spawn(_mirror(shadow, body, content))
    tail = f',"variant":{json.dumps(route.name)},"model_version":{route.model_version},"request_id":"{request_id}"}}'
    if content.startswith(_PREFIX) and content.endswith(b"}"):
        return 200, content[:-1] + tail.encode(), ()  # our servers' answer, extended without parsing it
    try:
        predictions = json.loads(content)["predictions"]
    except (ValueError, KeyError, TypeError):
        return _error(502, f"Variant {route.name} answered without predictions.")
    return 200, (_PREFIX.decode() + json.dumps(predictions) + tail).encode(), ()


async def _feedback(caller: Caller, deployment: str, body: bytes) -> Reply:
    table = await _table(deployment)
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
    remembered = await _recall(request_id)
    if remembered is None or remembered[0] != deployment:
        return _error(
            404,
            "Unknown or expired request_id for this deployment (feedback is kept for 24 hours, once).",
            field="request_id",
        )
    _, variant_id, variant_name = remembered
    counters = _counters(variant_id)
    counters["outcomes"] += 1
    counters["successes"] += 1 if success else 0
    _flush_soon(now=False)
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


def _remember(request_id: str, deployment: str, route: Route) -> None:
    value = (deployment, route.id, route.name)
    if isinstance(caches["default"], LocMemCache):
        cache.set(f"serve:{request_id}", value, FEEDBACK_TTL)  # memory only: no I/O on the loop
    else:
        _spawn(_in_writer(cache.set, key=f"serve:{request_id}", value=value, timeout=FEEDBACK_TTL))


async def _recall(request_id: str):
    key = f"serve:{request_id}"
    value = await cache.aget(key)
    if value is not None:
        await cache.adelete(key)  # one outcome per prediction
    return value


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
