"""What the router does besides answering: counting, flushing, shadow copies, remembering predictions.

Owns, per process: the counters, latency histograms and exact latency sums of each variant, summed in memory
and added to VariantStats every FLUSH_SECONDS or every FLUSH_REQUESTS requests (serving.counters.stats_flush, on
one writer thread, the counts kept for the next flush when the database is away); the background tasks
(shadow copies sent after the answer is ready, whose latency and errors never reach the caller and whose
answers are compared with the primary's: ab_stats.agree); and request_id -> variant in the cache for
FEEDBACK_TTL seconds, for the A/B outcomes. serving/router.py (the interface) calls ``record``, ``counters_of``, ``flush_soon``, ``spawn``, ``mirror``,
``remember`` and ``recall``.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
import weakref
from concurrent.futures import ThreadPoolExecutor

from django import db
from django.core.cache import cache, caches
from django.core.cache.backends.locmem import LocMemCache

from serving import ab_stats
from serving.backends.client import UpstreamError
from serving.backends.client import client as model_client
from serving.counters import stats_flush
from serving.routing_table import Route, refusal

logger = logging.getLogger(__name__)
FLUSH_SECONDS = 2.0
FLUSH_REQUESTS = 5000
FEEDBACK_TTL = 24 * 3600
SHADOW_TIMEOUT = 10.0


# --- Counters ----------------------------------------------------------------------------------------

# Summed as they are; latency_seconds_sum is the exact sum of the latencies counted in latency_counts.
_FIELDS = ("requests", "errors", "outcomes", "successes", "shadow_compared", "shadow_agreed", "latency_seconds_sum")
_pending: dict[int, dict] = {}
_pending_requests = 0
_flush_timer: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.TimerHandle] = weakref.WeakKeyDictionary()
_background: set[asyncio.Task] = set()
_writer = ThreadPoolExecutor(max_workers=1, thread_name_prefix="router-writer")


def counters_of(variant_id: int) -> dict:
    counters = _pending.get(variant_id)
    if counters is None:
        counters = _pending[variant_id] = dict.fromkeys(_FIELDS, 0)
        counters["latency_counts"] = ab_stats.empty_histogram()
    return counters


def record(variant_id: int, ms: float | None, *, error: bool) -> None:
    global _pending_requests
    counters = counters_of(variant_id)
    counters["requests"] += 1
    if error:
        counters["errors"] += 1
    if ms is not None:
        ab_stats.observe(counters["latency_counts"], ms)
        counters["latency_seconds_sum"] += ms / 1000
    _pending_requests += 1
    if _pending_requests >= FLUSH_REQUESTS:
        flush_soon(now=True)
    else:
        flush_soon(now=False)


def flush_soon(*, now: bool) -> None:
    loop = asyncio.get_running_loop()
    if now:
        timer = _flush_timer.pop(loop, None)
        if timer is not None:
            timer.cancel()
        spawn(_flush())
    elif loop not in _flush_timer:
        _flush_timer[loop] = loop.call_later(FLUSH_SECONDS, _timer_fired, loop)


def _timer_fired(loop) -> None:
    _flush_timer.pop(loop, None)
    spawn(_flush())


async def _flush() -> None:
    global _pending, _pending_requests
    deltas, _pending, _pending_requests = _pending, {}, 0
    if not deltas:
        return
    try:
        await in_writer(stats_flush, deltas=deltas)
    except Exception:  # the database is away or locked: keep the counts for the next flush
        logger.warning("could not write the router's counters; trying again in %s s", FLUSH_SECONDS, exc_info=True)
        for variant_id, delta in deltas.items():
            counters = counters_of(variant_id)
            for field in _FIELDS:
                counters[field] += delta[field]
            counters["latency_counts"] = ab_stats.merge(counters["latency_counts"], delta["latency_counts"])
        flush_soon(now=False)


async def in_writer(function, **kwargs):
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


def spawn(coroutine) -> None:
    task = asyncio.ensure_future(coroutine)
    _background.add(task)
    task.add_done_callback(_background.discard)


# --- Shadows -----------------------------------------------------------------------------------------


async def mirror(route: Route, body: bytes, primary: bytes) -> None:
    """Send the shadow its copy; record its latency, errors and whether it agreed with the primary."""
    if await refusal(route):
        record(route.id, None, error=True)
        return
    started = time.perf_counter()
    try:
        status, content = await model_client().post(route.host, route.port, route.path, body, timeout=SHADOW_TIMEOUT)
    except UpstreamError:
        record(route.id, None, error=True)
        return
    ms = (time.perf_counter() - started) * 1000
    record(route.id, ms, error=status >= 500)
    if status == 200:
        try:
            agreed = ab_stats.agree(json.loads(primary)["predictions"], json.loads(content)["predictions"])
        except (ValueError, KeyError, TypeError):
            agreed = False
        counters = counters_of(route.id)
        counters["shadow_compared"] += 1
        counters["shadow_agreed"] += 1 if agreed else 0


# --- Feedback ----------------------------------------------------------------------------------------


def remember(request_id: str, deployment: str, route: Route) -> None:
    value = (deployment, route.id, route.name)
    if isinstance(caches["default"], LocMemCache):
        cache.set(f"serve:{request_id}", value, FEEDBACK_TTL)  # memory only: no I/O on the loop
    else:
        spawn(in_writer(cache.set, key=f"serve:{request_id}", value=value, timeout=FEEDBACK_TTL))


async def recall(request_id: str):
    key = f"serve:{request_id}"
    value = await cache.aget(key)
    if value is not None:
        await cache.adelete(key)  # one outcome per prediction
    return value
