"""The object store: what etcd and the API server's registry do to the objects they keep.

Every write gets one global, increasing resourceVersion and becomes an event (ADDED / MODIFIED / DELETED) in
the history that watches read; ``fake.compact()`` forgets that history, as etcd compaction does (a watch
from before it gets 410 Gone). On create the server sets uid, creationTimestamp and generation (bumped when
spec / data / template change), fills a ``generateName``, and answers 409 AlreadyExists, 404 for a missing
namespace, 422 without a name. Deleting honours finalizers and ``propagationPolicy`` as the garbage
collector does (Background, Foreground: the owner keeps a deletionTimestamp and the ``foregroundDeletion``
finalizer until its dependents are gone; Orphan: the dependents lose the ownerReference); deleting a
namespace deletes what is in it; a pod's logs go with it. A pod with a grace period stays terminating
until the kubelet (``fake.operator``) ends it, when ``fake.operator.graceful`` says so.
"""

from __future__ import annotations

import asyncio
import copy
import uuid
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from tests.k8s.kfake.api import ApiError, now_iso, resource_of

if TYPE_CHECKING:
    from tests.k8s.kfake.operator import Operator


@dataclass
class Event:
    rv: int
    resource: tuple[str, str, str]
    type: str
    object: dict


@dataclass
class Store:
    objects: dict[tuple, dict] = field(default_factory=dict)  # (resource, namespace, name) -> object
    events: list[Event] = field(default_factory=list)
    rv: int = 1000
    compacted: int = 1000  # events at or before this resourceVersion are forgotten
    logs: dict[tuple[str, str, str], str] = field(default_factory=dict)  # (namespace, pod, container) -> text


class StoreMixin:
    """The store's writes, for KubeFake; callers hold ``self.lock``."""

    store: Store
    operator: Operator
    _loop: asyncio.AbstractEventLoop | None
    _changed: asyncio.Event | None

    def _read(self, key) -> dict:
        obj = self.store.objects.get(key)
        if obj is None:
            resource = key[0]
            raise ApiError(
                404,
                "NotFound",
                f'{resource[2]}{"." + resource[0] if resource[0] else ""} "{key[2]}" not found',
                name=key[2],
                group=resource[0],
                kind=resource[2],
            )
        return copy.deepcopy(obj)

    def _next_rv(self) -> str:
        self.store.rv += 1
        return str(self.store.rv)

    def _record(self, resource, type_: str, obj: dict) -> None:
        self.store.events.append(Event(int(obj["metadata"]["resourceVersion"]), resource, type_, copy.deepcopy(obj)))
        if self._loop is not None:
            self._loop.call_soon_threadsafe(self._wake)

    def _wake(self) -> None:
        changed, self._changed = self._changed, asyncio.Event()
        assert changed is not None
        changed.set()

    def _create(self, obj: dict) -> dict:
        resource, namespaced = resource_of(obj["apiVersion"], obj["kind"])
        meta = obj.setdefault("metadata", {})
        if not meta.get("name") and meta.get("generateName"):
            meta["name"] = meta["generateName"] + uuid.uuid4().hex[:5]
        if not meta.get("name"):
            raise ApiError(
                422,
                "Invalid",
                f'{obj["kind"]} "" is invalid: metadata.name: Required value: name or generateName is required',
            )
        namespace = meta.get("namespace") if namespaced else None
        if not namespaced:
            meta.pop("namespace", None)
        elif not namespace:
            raise ApiError(400, "BadRequest", "the namespace of the object is required")
        key = (resource, namespace, meta["name"])
        plural = resource[2]
        if key in self.store.objects:
            raise ApiError(
                409,
                "AlreadyExists",
                f'{plural}.{resource[0]} "{meta["name"]}" already exists'.replace(". ", " ").replace('.""', '"'),
                name=meta["name"],
                group=resource[0],
                kind=plural,
            )
        if namespaced and (("", "v1", "namespaces"), None, namespace) not in self.store.objects:
            raise ApiError(404, "NotFound", f'namespaces "{namespace}" not found', name=namespace, kind="namespaces")
        meta.update(uid=str(uuid.uuid4()), creationTimestamp=now_iso(), generation=1)
        for server_owned in ("deletionTimestamp", "resourceVersion"):
            meta.pop(server_owned, None)
        if obj["kind"] == "Namespace":
            obj["status"] = {"phase": "Active"}
        return self._store(key, obj, "ADDED")

    def _store(self, key, obj: dict, type_: str, *, spec_changed: bool = True) -> dict:
        old = self.store.objects.get(key)
        if old is not None and spec_changed and any(obj.get(k) != old.get(k) for k in ("spec", "data", "template")):
            obj["metadata"]["generation"] = old["metadata"].get("generation", 1) + 1
        obj["metadata"]["resourceVersion"] = self._next_rv()
        self.store.objects[key] = obj
        self._record(key[0], type_, obj)
        meta = obj["metadata"]
        if meta.get("deletionTimestamp") and not meta.get("finalizers") and not self._terminating(obj):
            self._remove(key)  # a terminating pod goes once it ended
        return copy.deepcopy(obj)

    def _remove(self, key) -> dict:
        obj = self.store.objects.pop(key)
        obj["metadata"]["resourceVersion"] = self._next_rv()
        self._record(key[0], "DELETED", obj)
        if key[0] == ("", "v1", "pods"):
            for log_key in [k for k in self.store.logs if k[:2] == (key[1], key[2])]:
                del self.store.logs[log_key]
        if key[0] == ("", "v1", "namespaces"):
            for inner in [k for k in self.store.objects if k[1] == key[2]]:
                self.store.objects.get(inner) and self._remove(inner)
        self._collect_owners()
        return obj

    def _dependents(self, uid: str) -> list[tuple]:
        return [
            k
            for k, o in self.store.objects.items()
            if any(ref.get("uid") == uid for ref in o["metadata"].get("ownerReferences") or [])
        ]

    def _delete(self, key, propagation: str = "Background") -> dict:
        obj = self.store.objects.get(key)
        if obj is None:
            resource = key[0]
            raise ApiError(
                404,
                "NotFound",
                f'{resource[2]}{"." + resource[0] if resource[0] else ""} "{key[2]}" not found',
                name=key[2],
                group=resource[0],
                kind=resource[2],
            )
        meta = obj["metadata"]
        dependents = self._dependents(meta["uid"])
        if propagation == "Orphan":
            for dep in dependents:
                refs = self.store.objects[dep]["metadata"]["ownerReferences"]
                self.store.objects[dep]["metadata"]["ownerReferences"] = [r for r in refs if r["uid"] != meta["uid"]]
        elif dependents:
            for dep in dependents:
                if dep in self.store.objects and not self.store.objects[dep]["metadata"].get("deletionTimestamp"):
                    self._delete(dep, propagation)
        if key not in self.store.objects:
            return obj
        if propagation == "Foreground" and self._dependents(meta["uid"]):
            finalizers = meta.setdefault("finalizers", [])
            if "foregroundDeletion" not in finalizers:
                finalizers.append("foregroundDeletion")
        if meta.get("finalizers") or self._terminating(obj):
            if not meta.get("deletionTimestamp"):
                meta["deletionTimestamp"] = now_iso()
                meta["deletionGracePeriodSeconds"] = 0
                return self._store(key, obj, "MODIFIED", spec_changed=False)
            return copy.deepcopy(obj)
        return self._remove(key)

    def _terminating(self, obj: dict) -> bool:
        """A pod with a grace period stays (with a deletionTimestamp) until the kubelet ends it, when the
        operator simulation says so (``fake.operator.graceful = True``)."""
        return (
            self.operator.graceful
            and obj["kind"] == "Pod"
            and obj.get("status", {}).get("phase") in ("Pending", "Running")
        )

    def _collect_owners(self) -> None:
        """Foreground deletion finishes once an owner has no dependents left."""
        for key, obj in list(self.store.objects.items()):
            meta = obj["metadata"]
            if (
                key in self.store.objects
                and "foregroundDeletion" in (meta.get("finalizers") or [])
                and not self._dependents(meta["uid"])
            ):
                meta["finalizers"] = [f for f in meta["finalizers"] if f != "foregroundDeletion"]
                self._store(key, obj, "MODIFIED", spec_changed=False)
