"""Watches (``?watch=true``), as the API server streams them: one JSON event per line.

From resourceVersion 0 (or none) the current state comes first as synthetic ADDED events; from a later
version, the events after it. A version older than the last compaction (``fake.compact()``) gets an ERROR
event with a 410 Expired Status, which the ``kubernetes`` client's watch raises as ApiException(410) so the
caller relists. Label and field selectors filter the events; ``timeoutSeconds`` ends the stream.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import json
import time
from typing import TYPE_CHECKING

import aiohttp.web

from tests.k8s.kfake.api import status_body
from tests.k8s.kfake.selectors import field_matches, parse_selector, selector_matches

if TYPE_CHECKING:
    from tests.k8s.kfake.fake import KubeFake


async def watch(fake: KubeFake, raw, resource, namespace, params):
    selector = parse_selector(params.get("labelSelector", ""))
    fields_ = params.get("fieldSelector", "")
    since = params.get("resourceVersion") or "0"
    deadline = time.monotonic() + float(params.get("timeoutSeconds") or 1800)
    response = aiohttp.web.StreamResponse(status=200, headers={"Content-Type": "application/json"})
    await response.prepare(raw)

    def wanted(obj: dict) -> bool:
        return (
            (namespace is None or obj["metadata"].get("namespace") == namespace)
            and selector_matches(selector, obj["metadata"].get("labels") or {})
            and field_matches(fields_, obj)
        )

    async def send(type_: str, obj: dict) -> None:
        await response.write(json.dumps({"type": type_, "object": obj}).encode() + b"\n")

    with fake.lock:
        if since == "0":  # the current state first, as synthetic ADDED events
            initial = [copy.deepcopy(o) for (r, _, _), o in fake.store.objects.items() if r == resource and wanted(o)]
            position = fake.store.rv
        elif int(since) < fake.store.compacted:
            initial, position = None, 0
        else:
            initial, position = [], int(since)
    if initial is None:
        await send("ERROR", status_body(410, "Expired", f"too old resource version: {since} ({fake.store.compacted})"))
        await response.write_eof()
        return response
    for obj in initial:
        await send("ADDED", obj)
    with contextlib.suppress(ConnectionResetError, asyncio.CancelledError):
        while time.monotonic() < deadline:
            changed = fake._changed
            assert changed is not None
            with fake.lock:
                if position < fake.store.compacted:
                    gone = True
                    events = []
                else:
                    gone = False
                    events = [e for e in fake.store.events if e.rv > position and e.resource == resource]
                    position = fake.store.rv
            if gone:
                await send(
                    "ERROR",
                    status_body(410, "Expired", f"too old resource version: {position} ({fake.store.compacted})"),
                )
                break
            for event in events:
                if wanted(event.object):
                    await send(event.type, event.object)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(changed.wait(), timeout=max(0.0, min(0.5, deadline - time.monotonic())))
        await response.write_eof()
    return response
