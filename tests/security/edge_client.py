"""A raw HTTP/1.1 client for the edge tests: it counts what it sends and sees the answer as soon as it comes,
which urllib and httpx hide (they send a whole body before they read)."""

from __future__ import annotations

import json
import select
import socket
import time
from dataclasses import dataclass
from pathlib import Path


@dataclass
class Answer:
    status: int
    headers: dict[str, str]
    body: bytes
    sent: int  # body bytes this client had sent when the answer began

    def json(self):
        return json.loads(self.body)


def rss_bytes(pid: int) -> int:
    """The resident memory of process ``pid`` (VmRSS of /proc/<pid>/status)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError(f"no VmRSS for process {pid}")


def _head(method: str, path: str, headers: dict[str, str]) -> bytes:
    lines = [f"{method} {path} HTTP/1.1", "Host: 127.0.0.1", *(f"{k}: {v}" for k, v in headers.items())]
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


def _read_answer(sock: socket.socket, sent: int, deadline: float) -> Answer:
    data = b""
    while b"\r\n\r\n" not in data:
        data += _recv(sock, deadline)
    head, _, body = data.partition(b"\r\n\r\n")
    status_line, *header_lines = head.decode("latin-1").split("\r\n")
    headers = {k.strip().lower(): v.strip() for k, _, v in (line.partition(":") for line in header_lines)}
    length = int(headers.get("content-length", "0"))
    while len(body) < length:
        body += _recv(sock, deadline)
    return Answer(int(status_line.split()[1]), headers, body[:length], sent)


def _recv(sock: socket.socket, deadline: float) -> bytes:
    sock.settimeout(max(0.01, deadline - time.monotonic()))
    try:
        chunk = sock.recv(65536)
    except TimeoutError:
        raise AssertionError("no answer before the deadline") from None
    if not chunk:
        raise AssertionError("the server closed the connection without an answer")
    return chunk


def declared(port: int, path: str, length: int, *, send: bool = False, timeout: float = 10) -> Answer:
    """Declare a ``length``-byte body and send none of it (the answer must come all the same), or all of it."""
    with socket.create_connection(("127.0.0.1", port)) as sock:
        sock.sendall(_head("POST", path, {"Content-Type": "application/json", "Content-Length": str(length)}))
        if send:
            sock.sendall(b"[" * length)
        return _read_answer(sock, length if send else 0, time.monotonic() + timeout)


def streamed(port: int, path: str, *, limit: int, chunk: int = 256 * 1024, timeout: float = 20) -> Answer:
    """A chunked body (no length) sent until the server answers, or ``limit`` bytes are out and the body ends."""
    with socket.create_connection(("127.0.0.1", port)) as sock:
        sock.sendall(_head("POST", path, {"Content-Type": "application/json", "Transfer-Encoding": "chunked"}))
        deadline, sent, piece = time.monotonic() + timeout, 0, b"[" * chunk
        sock.settimeout(5)
        while sent < limit and time.monotonic() < deadline:
            if select.select([sock], [], [], 0)[0]:
                return _read_answer(sock, sent, deadline)  # the server answered before the body ended
            if not select.select([], [sock], [], 0.05)[1]:
                continue  # the server reads no more for now (flow control): look for its answer again
            try:
                sock.sendall(b"%x\r\n%s\r\n" % (len(piece), piece))
            except OSError:
                break  # closed by the server: its answer may be waiting
            sent += len(piece)
        try:
            sock.sendall(b"0\r\n\r\n")
        except OSError:
            pass
        return _read_answer(sock, sent, deadline)
