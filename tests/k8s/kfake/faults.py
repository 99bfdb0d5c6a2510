"""Injected faults: what a flaky API server, a load balancer or a slow network does to a request.

``fake.inject(status=500, times=2, method="POST", path_contains="pytorchjobs")`` answers matching requests
with an error Status (InternalError for 5xx, Forbidden otherwise) without touching the store;
``fake.inject(delay=3, land=True)`` is a timeout: the answer comes after the client gave up, and ``land``
says whether the request still took effect. ``Fault.hits`` counts the requests it answered.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class Fault:
    status: int | None = 500
    times: int = 1
    method: str | None = None
    path_contains: str = ""
    delay: float = 0  # seconds before the answer (longer than the client's timeout: a timeout)
    land: bool = False  # with a delay: whether the request still takes effect
    message: str = "injected fault"
    hits: int = 0

    def matches(self, method: str, path: str) -> bool:
        return (
            self.hits < self.times
            and (self.method is None or self.method.upper() == method)
            and self.path_contains in path
        )
