"""The portal's web process as `make run` starts it (platform/Procfile's `web`): uvicorn, for benchmarks and tests.

uvicorn streams request bodies with flow control, so config/edge.py refuses an oversized body before it is
read (the ASGI server before it handed the application a whole body at once). Proxy headers are
read inside the application (config/asgi.py, PORTAL_TRUSTED_PROXIES), never by uvicorn itself.
"""

from __future__ import annotations

import sys
from pathlib import Path

BIN = Path(sys.executable).parent
APPLICATION = "config.asgi:application"
# websockets-sansio: `--ws websockets` is uvicorn's deprecated implementation on websockets.legacy, which
# warns at start-up; the sans-I/O one speaks the same protocol through the same websockets package.
FLAGS = (
    "--http",
    "httptools",
    "--loop",
    "uvloop",
    "--ws",
    "websockets-sansio",
    "--lifespan",
    "off",
    "--no-server-header",
    "--no-proxy-headers",
    "--no-access-log",
)


def uvicorn_argv(
    port: int, app: str = APPLICATION, *, host: str = "127.0.0.1", log_level: str = "warning"
) -> list[str]:
    """The argv of a web process serving ``app`` on ``host:port``."""
    return [str(BIN / "uvicorn"), app, "--host", host, "--port", str(port), *FLAGS, "--log-level", log_level]


SERVERS = ("uvicorn", "uvicorn-workers:N", "daphne", "gunicorn-uvicorn:N")


def parse_server(spec: str) -> tuple[str, int]:
    """``uvicorn``, ``uvicorn-workers:N``, ``daphne`` or ``gunicorn-uvicorn:N`` as (kind, workers)."""
    kind, _, count = spec.partition(":")
    if kind in ("uvicorn", "daphne") and not count:
        return kind, 1
    if kind in ("uvicorn-workers", "gunicorn-uvicorn") and count.isdigit() and int(count) >= 1:
        return kind, int(count)
    raise ValueError(f"unknown server {spec!r}: one of {', '.join(SERVERS)}")


def server_argv(spec: str, port: int, app: str = APPLICATION, *, host: str = "127.0.0.1") -> list[str]:
    """The argv of a web process of kind ``spec`` (see parse_server) serving ``app`` on ``host:port``."""
    kind, workers = parse_server(spec)
    if kind == "uvicorn":
        return uvicorn_argv(port, app, host=host)
    if kind == "uvicorn-workers":
        return [*uvicorn_argv(port, app, host=host), "--workers", str(workers)]
    if kind == "daphne":
        return [str(BIN / "daphne"), "-b", host, "-p", str(port), "-v", "0", app]
    return [
        str(BIN / "gunicorn"),
        app,
        "--bind",
        f"{host}:{port}",
        "--workers",
        str(workers),
        "--worker-class",
        "bench.gunicorn_worker.PortalUvicornWorker",  # uvicorn.workers.UvicornWorker with FLAGS
        "--keep-alive",
        "5",  # uvicorn's own default; gunicorn's 2 s closes connections idle between the benchmark's slices
        "--log-level",
        "warning",
    ]
