"""A busy connection pool answered as such: 503 with Retry-After, never a 500; and one pool per process.

A request that waited PORTAL_DB_POOL_TIMEOUT seconds for a database connection without getting one gets
``503 Service Unavailable`` with ``Retry-After``: ``{"detail": ...}`` under /api/ (also through DRF's handler,
core.api.exception_handler), a short page elsewhere. The page is rendered without templates or context
processors: they would ask the same busy database for the user and the session.

Celery tasks meet the same error as ``django.db.OperationalError``, which PortalTask retries with backoff
(core/celery.py): the work waits in the broker, it is not lost.

A process that forks after using its pool (the Celery worker's main process writes its heartbeat, then
starts or replaces prefork children) would hand its children the parent's open connections: two processes
on one socket. ``forget_inherited_pools`` runs in every child after a fork and makes it open its own pool.
"""

from __future__ import annotations

import logging
import os
import sys

from django.conf import settings
from django.http import HttpResponse, JsonResponse
from django.utils.html import escape

from core.db_pool import RETRY_AFTER_SECONDS, is_pool_timeout

log = logging.getLogger(__name__)

TITLE = "The portal is busy"


def busy_detail() -> str:
    timeout = (settings.PORTAL_DB_POOL or {}).get("timeout")
    waited = f" for {timeout:g} s" if timeout else ""
    return (
        f"The portal is busy: every database connection stayed in use{waited}, so your request was not carried "
        f"out. Try again in {RETRY_AFTER_SECONDS} seconds; if this keeps happening, tell your platform admin."
    )


def _log(request_path: str) -> None:
    pool = settings.PORTAL_DB_POOL or {}
    log.warning(
        "answered 503 to %s: the database pool (max %s connections, PORTAL_DB_POOL_MAX) stayed busy for %s s "
        "(PORTAL_DB_POOL_TIMEOUT); raise PORTAL_DB_POOL_MAX within the budget of platform/README.md "
        "'Database connections', or look for slow requests holding connections",
        request_path,
        pool.get("max_size"),
        pool.get("timeout"),
    )


def busy_api_response(exc: BaseException, path: str = "/api/"):
    """DRF's answer for a pool timeout (core.api.exception_handler), or None for any other exception."""
    if not is_pool_timeout(exc):
        return None
    from rest_framework.response import Response

    _log(path)
    return Response({"detail": busy_detail()}, status=503, headers={"Retry-After": str(RETRY_AFTER_SECONDS)})


def busy_response(request) -> HttpResponse:
    """The 503 for a request: JSON under /api/ (or when JSON is what the caller accepts), a page otherwise."""
    _log(request.path)
    detail = busy_detail()
    wants_json = request.path.startswith("/api/") or "application/json" in request.headers.get("Accept", "")
    if wants_json:
        response: HttpResponse = JsonResponse({"detail": detail}, status=503)
    else:
        response = HttpResponse(
            f'<!doctype html><html lang="en"><head><meta charset="utf-8"><title>{TITLE}</title></head>'
            f"<body><h1>{TITLE}</h1><p>{escape(detail)}</p></body></html>",
            status=503,
            content_type="text/html; charset=utf-8",
        )
    response["Retry-After"] = str(RETRY_AFTER_SECONDS)
    return response


class PoolBusyMiddleware:
    """Turns a pool timeout raised by a view into the 503 of ``busy_response``.

    Last in MIDDLEWARE, so that its process_exception is asked first and the 503 still passes every other
    middleware's process_response (the metrics count it as a 503).
    """

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        return self.get_response(request)

    def process_exception(self, request, exception):
        if is_pool_timeout(exception):
            return busy_response(request)
        return None


# Pools a child inherited: kept referenced, never closed or collected, since closing (or finalising) their
# connections would end the parent's sessions on the sockets both processes share.
_inherited: list = []


def forget_inherited_pools() -> None:
    """In a freshly forked child: leave the parent's pools alone, open this process's own on first use.

    Only the class's dict of pools is touched (no locks, no I/O: a fork may come from any thread). A
    connection the forking thread held is Celery's to drop (its Django fixup closes the descriptor at
    worker_process_init); it then goes back to the inherited pool, which nobody uses any more.
    """
    backend = sys.modules.get("django.db.backends.postgresql.base")  # not imported: no pool to forget
    pools = backend.DatabaseWrapper._connection_pools if backend else None
    if pools:
        _inherited.extend(pools.values())
        pools.clear()


def install_fork_guard() -> None:
    """Register ``forget_inherited_pools`` for every fork of this process (core.apps.CoreConfig.ready)."""
    global _installed
    if not _installed:
        os.register_at_fork(after_in_child=forget_inherited_pools)
        _installed = True


_installed = False
