"""The edge: what every HTTP request meets before Django, authentication or any other work.

``BodyLimit`` caps request bodies at the ASGI layer. A declared ``Content-Length`` over the cap is answered
413 at once, before a byte of the body is read (uvicorn sends no ``100 Continue`` either); a body without a
length (chunked) is counted as it streams in and cut the moment it passes the cap: the 413 goes out, the
application is told the client went away (``http.disconnect``: Django's handler then gives up quietly) and
whatever it still sends is dropped. uvicorn reads a body only as fast as the application asks for it (flow
control), so no more than a chunk or two past the cap is ever held in memory.

Paths under /api/ and /serve/ are answered in JSON (``{"detail": ...}``, API.md "Conventions"); others with a
short page. Pure ASGI: no Django, so that nothing runs before the check.
"""

from __future__ import annotations

import html
import json
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

JSON_PREFIXES = ("/api/", "/serve/")
SERVE_PREFIX = "/serve/"


def wants_json(path: str) -> bool:
    """Whether errors on ``path`` are answered in JSON (the REST API and the inference router)."""
    return path.startswith(JSON_PREFIXES)


def size(count: int) -> str:
    """``4 MiB``, ``600 MiB``, ``1.5 KiB``, ``12 bytes``."""
    for unit, factor in (("GiB", 1024**3), ("MiB", 1024**2), ("KiB", 1024)):
        if count >= factor:
            value = count / factor
            return f"{value:.0f} {unit}" if value == int(value) or value >= 100 else f"{value:.1f} {unit}"
    return f"{count} bytes"


def page(title: str, message: str) -> bytes:
    """The short page a browser gets for an error (styled error pages are another issue's)."""
    return (
        f'<!doctype html>\n<html lang="en"><head><meta charset="utf-8"><title>{html.escape(title)}</title></head>'
        f"<body><h1>{html.escape(title)}</h1><p>{html.escape(message)}</p></body></html>\n"
    ).encode()


async def answer(send: Send, path: str, status: int, title: str, message: str, *, close: bool = False) -> None:
    """A whole error response: JSON ``{"detail": message}`` for the API paths, else a short page."""
    if wants_json(path):
        body, content_type = json.dumps({"detail": message}).encode(), b"application/json"
    else:
        body, content_type = page(title, message), b"text/html; charset=utf-8"
    headers = [(b"content-type", content_type), (b"content-length", str(len(body)).encode())]
    if close:  # the client may still be sending the body: this connection is not reused
        headers.append((b"connection", b"close"))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


class BodyLimit:
    """ASGI middleware: bodies over ``max_bytes`` (``serve_max_bytes`` under /serve/) are refused with 413."""

    def __init__(self, app: ASGIApp, *, max_bytes: int, serve_max_bytes: int):
        self.app = app
        self.max_bytes = max_bytes
        self.serve_max_bytes = serve_max_bytes

    def cap(self, path: str) -> tuple[int, str]:
        """The cap for ``path`` and the setting that sets it."""
        if path.startswith(SERVE_PREFIX):
            return self.serve_max_bytes, "PORTAL_SERVE_MAX_REQUEST_BYTES"
        return self.max_bytes, "PORTAL_MAX_REQUEST_BYTES"

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        path = scope["path"]
        cap, setting = self.cap(path)
        declared = _content_length(scope)
        if declared is not None and declared > cap:
            await self._refuse(send, path, f"The request body is {size(declared)}, more than", cap, setting)
            return

        received = 0
        refused = False
        started = False

        async def limited_receive() -> Message:
            nonlocal received, refused
            if refused:
                return {"type": "http.disconnect"}
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > cap:
                    refused = True
                    if not started:
                        await self._refuse(send, path, "The request body is larger than", cap, setting)
                    return {"type": "http.disconnect"}
            return message

        async def guarded_send(message: Message) -> None:
            nonlocal started
            if refused and not started:
                return  # the 413 went out in the application's place: its own answer is dropped
            started = started or message["type"] == "http.response.start"
            await send(message)

        await self.app(scope, limited_receive, guarded_send)

    @staticmethod
    async def _refuse(send: Send, path: str, opening: str, cap: int, setting: str) -> None:
        where = " for predictions and feedback" if path.startswith(SERVE_PREFIX) else ""
        message = (
            f"{opening} the {size(cap)} the portal accepts{where}. Send a smaller body "
            f"(the portal's operator sets this limit with {setting})."
        )
        await answer(send, path, 413, "Request body too large", message, close=True)


def _content_length(scope: Scope) -> int | None:
    for name, value in scope["headers"]:
        if name == b"content-length":
            try:
                return int(value)
            except ValueError:
                return None  # the HTTP server refuses a malformed length itself
    return None
