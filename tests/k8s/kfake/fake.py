"""KubeFake: the server thread and the test's handle on the fake.

The kmock server runs in a background thread with its own event loop; the store is guarded by a lock, so
tests (and the simulated operator, ``fake.operator``) read and change it synchronously from the test thread:
``get`` / ``list`` / ``seed`` (as an administrator would: no validation, its namespace created) /
``update`` (as a controller would) / ``delete``, ``inject`` faults, ``compact`` the event history.
``requests`` records every (method, path?query); ``errors`` the fake's own tracebacks.
"""

from __future__ import annotations

import asyncio
import copy
import threading

import kmock

from tests.k8s.kfake.api import resource_of
from tests.k8s.kfake.faults import Fault
from tests.k8s.kfake.operator import Operator
from tests.k8s.kfake.selectors import parse_selector, selector_matches
from tests.k8s.kfake.server import _Handler
from tests.k8s.kfake.store import Store, StoreMixin
from tests.k8s.kfake.validation import ValidationMixin


class KubeFake(StoreMixin, ValidationMixin):
    """The fake API server. ``with KubeFake() as fake: client = fake.api_client()``."""

    def __init__(self):
        self.store = Store()
        self.lock = threading.RLock()
        self.faults: list[Fault] = []
        self.validators = {}
        self.requests: list[tuple[str, str]] = []  # (method, path?query) of every request, for assertions
        self.errors: list[str] = []  # tracebacks of the fake's own bugs (a test should assert none)
        self.operator = Operator(self)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._changed: asyncio.Event | None = None
        self.url = ""

    # -- lifecycle

    def __enter__(self) -> KubeFake:
        ready = threading.Event()
        self._loop = asyncio.new_event_loop()
        self._stop = asyncio.Event()

        async def serve():
            self._changed = asyncio.Event()
            handler = _Handler(fake=self)
            async with handler, kmock.Server(handler) as server:
                self.url = str(server.url).rstrip("/")
                ready.set()
                await self._stop.wait()

        def run():
            self._loop.run_until_complete(serve())
            self._loop.close()

        self._thread = threading.Thread(target=run, name="kubefake", daemon=True)
        self._thread.start()
        if not ready.wait(10):
            raise RuntimeError("KubeFake did not start")
        return self

    def __exit__(self, *exc) -> None:
        assert self._loop is not None and self._thread is not None
        self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(10)

    def api_client(self):
        import kubernetes.client

        configuration = kubernetes.client.Configuration()
        configuration.host = self.url
        return kubernetes.client.ApiClient(configuration)

    # -- test controls

    def inject(
        self,
        status: int | None = 500,
        *,
        times: int = 1,
        method: str | None = None,
        path_contains: str = "",
        delay: float = 0,
        land: bool = False,
        message: str = "injected fault",
    ) -> Fault:
        fault = Fault(
            status=status,
            times=times,
            method=method,
            path_contains=path_contains,
            delay=delay,
            land=land,
            message=message,
        )
        with self.lock:
            self.faults.append(fault)
        return fault

    def compact(self) -> None:
        """Forget the event history up to now: a watch from an older resourceVersion gets 410 Gone."""
        with self.lock:
            self.store.compacted = self.store.rv
            self.store.events.clear()

    def get(self, api_version: str, kind: str, namespace: str | None, name: str) -> dict | None:
        resource, namespaced = resource_of(api_version, kind)
        with self.lock:
            found = self.store.objects.get((resource, namespace if namespaced else None, name))
            return copy.deepcopy(found)

    def list(self, api_version: str, kind: str, namespace: str | None = None, labels: str = "") -> list[dict]:
        resource, _ = resource_of(api_version, kind)
        selector = parse_selector(labels)
        with self.lock:
            return [
                copy.deepcopy(o)
                for (r, ns, _), o in sorted(self.store.objects.items(), key=lambda i: str(i[0]))
                if r == resource
                and (namespace is None or ns == namespace)
                and selector_matches(selector, o["metadata"].get("labels") or {})
            ]

    def seed(self, manifest: dict) -> dict:
        """Put an object in as an administrator would (no validation, creates its namespace)."""
        namespace = manifest.get("metadata", {}).get("namespace")
        with self.lock:
            if namespace and not self.get("v1", "Namespace", None, namespace):
                self._create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}})
            return self._create(copy.deepcopy(manifest))

    def update(self, obj: dict, *, status: bool = False) -> dict:
        """Write a changed object back (as a controller would): new resourceVersion, MODIFIED event."""
        with self.lock:
            resource, namespaced = resource_of(obj["apiVersion"], obj["kind"])
            key = (resource, obj["metadata"].get("namespace") if namespaced else None, obj["metadata"]["name"])
            if key not in self.store.objects:
                raise KeyError(key)
            return self._store(key, copy.deepcopy(obj), "MODIFIED", spec_changed=not status)

    def delete(
        self, api_version: str, kind: str, namespace: str | None, name: str, propagation: str = "Background"
    ) -> None:
        resource, namespaced = resource_of(api_version, kind)
        with self.lock:
            self._delete((resource, namespace if namespaced else None, name), propagation)
