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
