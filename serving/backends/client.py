"""The router's client for model servers: keep-alive HTTP/1.1 connections pooled per server, one set of
pools per event loop. The one seam through which predictions leave the portal.

Why not httpx, as the TensorBoard proxy uses: on the router's path httpx spent about 1.5 ms of CPU per
request (its pool scans every idle connection's socket on each request), ten times what the model takes;
this client does one write and two reads on an idle connection. Limits: at most ``max_connections`` per
server (callers beyond wait for a free one), a connect timeout, and a deadline per request. A pooled
connection the server closed meanwhile (a restart) is noticed before any answer was read, and the request
is sent once more on a new connection.
"""

from __future__ import annotations

import asyncio
import weakref
from collections import deque


class UpstreamError(Exception):
    """The server could not be reached, closed the connection, answered garbage or too late."""


class _Connection:
    __slots__ = ("reader", "writer")

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter):
        self.reader, self.writer = reader, writer

    async def exchange(self, request: bytes) -> tuple[int, bytes, bool]:
        """(status, body, keep-alive?) of one request on this connection."""
        self.writer.write(request)
        head = await self.reader.readuntil(b"\r\n\r\n")
        lines = head[:-4].split(b"\r\n")
        status = int(lines[0].split(b" ", 2)[1])
        length, chunked, keep = None, False, not lines[0].startswith(b"HTTP/1.0")
        for line in lines[1:]:
            name, _, value = line.partition(b":")
            name = name.strip().lower()
            if name == b"content-length":
                length = int(value)
            elif name == b"transfer-encoding":
                chunked = b"chunked" in value.lower()
            elif name == b"connection":
                keep = value.strip().lower() != b"close"
        if chunked:
            body = await self._chunks()
        elif length is not None:
            body = await self.reader.readexactly(length)
        else:
            body, keep = await self.reader.read(), False
        return status, body, keep

    async def _chunks(self) -> bytes:
        parts: list[bytes] = []
        while True:
            size = int((await self.reader.readuntil(b"\r\n")).split(b";")[0], 16)
            if size == 0:
                while (await self.reader.readuntil(b"\r\n")) != b"\r\n":  # trailers
                    pass
                return b"".join(parts)
            parts.append(await self.reader.readexactly(size))
            await self.reader.readexactly(2)

    def close(self) -> None:
        self.writer.close()


class _Pool:
    def __init__(self, host: str, port: int, *, max_connections: int, connect_timeout: float):
        self.host, self.port = host, port
        self.connect_timeout = connect_timeout
        self.idle: deque[_Connection] = deque()
        self.slots = asyncio.Semaphore(max_connections)

    async def post(self, path: str, body: bytes) -> tuple[int, bytes]:
        request = (
            f"POST {path} HTTP/1.1\r\nHost: {self.host}:{self.port}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\n\r\n"
        ).encode() + body
        async with self.slots:
            for attempt in (1, 2):
                reused = bool(self.idle)
                connection = self.idle.pop() if reused else await self._connect()
                try:
                    status, payload, keep = await connection.exchange(request)
                except (asyncio.IncompleteReadError, ConnectionError) as exc:
                    connection.close()
                    if (
                        reused
                        and attempt == 1
                        and (not isinstance(exc, asyncio.IncompleteReadError) or not exc.partial)
                    ):
                        continue  # the server closed an idle connection (it restarted, or timed it out): once more
                    raise UpstreamError(f"connection lost: {exc.__class__.__name__}") from exc
                except (ValueError, IndexError, asyncio.LimitOverrunError) as exc:
                    connection.close()
                    raise UpstreamError("not an HTTP answer") from exc
                except BaseException:  # cancelled by the caller's deadline: the connection is in an unknown state
                    connection.close()
                    raise
                if keep:
                    self.idle.append(connection)
                else:
                    connection.close()
                return status, payload
        raise AssertionError("unreachable")  # pragma: no cover

    async def _connect(self) -> _Connection:
        try:
            async with asyncio.timeout(self.connect_timeout):
                reader, writer = await asyncio.open_connection(self.host, self.port)
        except (OSError, TimeoutError) as exc:
            raise UpstreamError(f"cannot connect to {self.host}:{self.port}: {exc.__class__.__name__}") from exc
        return _Connection(reader, writer)

    def close(self) -> None:
        while self.idle:
            self.idle.pop().close()


class ModelClient:
    """Pools by server; ``post(url, body, timeout=)`` -> (status, body). Bound to the loop it is used on."""

    def __init__(self, *, max_connections: int = 100, connect_timeout: float = 2):
        self.max_connections = max_connections
        self.connect_timeout = connect_timeout
        self.pools: dict[tuple[str, int], _Pool] = {}

    async def post(self, host: str, port: int, path: str, body: bytes, *, timeout: float) -> tuple[int, bytes]:
        pool = self.pools.get((host, port))
        if pool is None:
            pool = self.pools[(host, port)] = _Pool(
                host, port, max_connections=self.max_connections, connect_timeout=self.connect_timeout
            )
        try:
            async with asyncio.timeout(timeout):
                return await pool.post(path, body)
        except TimeoutError as exc:
            raise UpstreamError(f"no answer within {timeout:g} s") from exc

    def close(self) -> None:
        for pool in self.pools.values():
            pool.close()
        self.pools.clear()


_clients: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, ModelClient] = weakref.WeakKeyDictionary()


def client() -> ModelClient:
    """This event loop's client (connections cannot be shared between loops)."""
    loop = asyncio.get_running_loop()
    found = _clients.get(loop)
    if found is None:
        found = _clients[loop] = ModelClient()
    return found


def clients_close() -> None:
    """Close this loop's connections (tests that end their loop)."""
    found = _clients.pop(asyncio.get_running_loop(), None)
    if found is not None:
        found.close()
