"""gunicorn's worker class for bench.api's ``gunicorn-uvicorn:N``: uvicorn.workers.UvicornWorker configured as
bench/web_server.py's FLAGS configure uvicorn itself (its own defaults would read proxy headers from
127.0.0.1, log every request, send a Server header and try the lifespan protocol Django does not speak).
"""

from __future__ import annotations

import warnings
from typing import Any

with warnings.catch_warnings():
    # "use the uvicorn-worker package instead": the same class, moved; uvicorn 0.54 still ships this one.
    warnings.simplefilter("ignore", DeprecationWarning)
    from uvicorn.workers import UvicornWorker


class PortalUvicornWorker(UvicornWorker):
    CONFIG_KWARGS: dict[str, Any] = {
        "http": "httptools",
        "loop": "uvloop",
        "ws": "websockets-sansio",
        "lifespan": "off",
        "server_header": False,
        "proxy_headers": False,
        "access_log": False,
    }
