"""What the process backends (TensorBoard servers in tensorboards/, model servers in serving/) share: the
error they raise, the interface every backend offers, and the helpers the local and Kubernetes backends
of both use (a free loopback port, the "<namespace>/<name>" handle, calls to the cluster). No Django here.
"""

from __future__ import annotations

import socket
from collections.abc import Callable
from typing import Protocol, TypeVar

from clusters.errors import ExecutorError

SpecT = TypeVar("SpecT", contravariant=True)
ProcessT = TypeVar("ProcessT")
ErrorT = TypeVar("ErrorT", bound="BackendError")
ResultT = TypeVar("ResultT")


class BackendError(ExecutorError):
    """A server could not be started or reached; ``permanent`` says whether trying again can help (ExecutorError's)."""


class ProcessBackend(Protocol[SpecT, ProcessT]):
    """A server per spec, started and watched by the app that owns the rows (BoardBackend, ServingBackend)."""

    def start(self, spec: SpecT) -> ProcessT:
        """Start serving ``spec``; returns at once, before it answers."""

    def alive(self, process: ProcessT) -> bool: ...

    def ready(self, process: ProcessT) -> bool:
        """Does it answer?"""

    def stop(self, process: ProcessT) -> None:
        """SIGTERM, a short grace, then SIGKILL."""

    def output(self, server_id: int, /) -> str:
        """The last lines it printed, to say why it died."""


def free_port() -> int:
    """A port free on 127.0.0.1 now (the server binds it a moment later)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def kube_call(operation: Callable[[], ResultT], error: type[ErrorT]) -> ResultT:
    """Run a cluster call; an ExecutorError (KubeError: the API server's own message) becomes ``error``."""
    try:
        return operation()
    except ExecutorError as exc:
        raise error(exc.message, permanent=exc.permanent) from exc


def kube_where(handle: str, error: type[ErrorT], what: str) -> tuple[str, str]:
    """The (namespace, name) of a "<namespace>/<name>" handle; ``what`` names the object in the error."""
    namespace, _, name = handle.partition("/")
    if not namespace or not name:
        raise error(f"{handle!r} does not name {what} (namespace/name).", permanent=True)
    return namespace, name
