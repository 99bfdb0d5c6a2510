"""KubeFake: an honest Kubernetes API fake that the real ``kubernetes`` client talks to over HTTP.

Built on kmock (``kmock.Server`` serves, ``kmock.RawHandler`` is the handler base). kmock's own
``KubernetesEmulator`` keeps objects but has no uid / resourceVersion / label selectors / 410 /
ownerReference garbage collection / status subresource / pod logs, and its storage cannot be extended to
them, so ``_Handler`` overrides ``RawHandler._handle`` and serves the API from ``KubeFake``'s store.
The server runs in a background thread with its own event loop; the store is guarded by a lock, so
tests (and the simulated operator, ``fake.operator``) change it synchronously from the test thread.

What it does like the API server:
- validates every created / replaced object with ``manifest_problems`` -> 422 Status (reason Invalid);
  ``fake.validators[(apiVersion, kind)] = fn(manifest) -> list[str]`` adds or replaces one;
- uid, one global resourceVersion counter, creationTimestamp, generation (bumped on spec change);
- 409 AlreadyExists / Conflict (stale resourceVersion on replace), 404 NotFound (also for a missing
  namespace) as Status bodies;
- label selectors (``a=b``, ``a!=b``, ``a in (x,y)``, ``a notin (x)``, ``a``, ``!a``) on list, watch and
  deletecollection; ``metadata.name`` / ``metadata.namespace`` / ``status.phase`` field selectors;
- list returns the collection resourceVersion; watch from a resourceVersion streams the later events and
  answers an ERROR event with a 410 Status when that version was compacted (``fake.compact()``);
- DELETE honours propagationPolicy (Foreground: the owner keeps a deletionTimestamp until its
  dependents are gone; Background; Orphan) and finalizers; ``status`` subresource; merge / JSON patch;
- pod logs with ``container``, ``follow``, ``tailLines``; 400 while the container waits to start.
Faults: ``fake.inject(status=500, times=2, method="POST", path_contains="pytorchjobs")`` or
``fake.inject(delay=3, land=True)`` (a timeout: the answer comes after the client gave up; ``land``
says whether the request took effect). ``Fault.hits`` counts the requests it answered.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import datetime
import json
import re
import threading
import time
import traceback
import uuid
from dataclasses import dataclass, field

import aiohttp.web
import attrs
import kmock

from clusters.manifest_validation import CRD_FILES, manifest_problems

FAKE_READY = True  # create/get/list/watch/delete/patch/status/logs work through the real client

# (group, version, plural) -> (kind, namespaced)
RESOURCES: dict[tuple[str, str, str], tuple[str, bool]] = {
    ("", "v1", "namespaces"): ("Namespace", False),
    ("", "v1", "nodes"): ("Node", False),
    ("", "v1", "persistentvolumes"): ("PersistentVolume", False),
    ("", "v1", "pods"): ("Pod", True),
    ("", "v1", "services"): ("Service", True),
    ("", "v1", "configmaps"): ("ConfigMap", True),
    ("", "v1", "secrets"): ("Secret", True),
    ("", "v1", "serviceaccounts"): ("ServiceAccount", True),
    ("", "v1", "persistentvolumeclaims"): ("PersistentVolumeClaim", True),
    ("", "v1", "resourcequotas"): ("ResourceQuota", True),
    ("", "v1", "events"): ("Event", True),
    ("apps", "v1", "deployments"): ("Deployment", True),
    ("apps", "v1", "statefulsets"): ("StatefulSet", True),
    ("batch", "v1", "jobs"): ("Job", True),
    ("networking.k8s.io", "v1", "ingresses"): ("Ingress", True),
    ("networking.k8s.io", "v1", "networkpolicies"): ("NetworkPolicy", True),
    ("scheduling.k8s.io", "v1", "priorityclasses"): ("PriorityClass", False),
    ("kubeflow.org", "v1", "pytorchjobs"): ("PyTorchJob", True),
    ("kubeflow.org", "v1", "tfjobs"): ("TFJob", True),
    ("kubeflow.org", "v2beta1", "mpijobs"): ("MPIJob", True),
    ("serving.kserve.io", "v1beta1", "inferenceservices"): ("InferenceService", True),
}
# Kinds whose schema manifest_problems knows (core kinds through kubernetes-validate, the CRDs it copies).
VALIDATED = {kind for kind, _ in RESOURCES.values()} - {"Event", "Node", "PersistentVolume"}
_PATH = re.compile(
    r"^/(?:api/(?P<cv>v1)|apis/(?P<g>[^/]+)/(?P<v>[^/]+))"
    r"(?:/namespaces/(?P<ns>[^/]+)(?=/))?/(?P<plural>[^/]+)(?:/(?P<name>[^/]+)(?:/(?P<sub>[^/]+))?)?$"
)


def now_iso() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def api_version_of(group: str, version: str) -> str:
    return f"{group}/{version}" if group else version


def status_body(code: int, reason: str, message: str, **details) -> dict:
    body = {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
        "code": code,
    }
    if details:
        body["details"] = details
    return body


class ApiError(Exception):
    def __init__(self, code: int, reason: str, message: str, **details):
        super().__init__(message)
        self.body = status_body(code, reason, message, **details)
        self.code = code


# ----------------------------------------------------------------------------------- label selectors


def parse_selector(text: str) -> list:
    """'a=b,c!=d,e in (x,y),f notin (z),g,!h' -> [(op, key, values)]; ValueError when malformed."""
    terms, depth, current = [], 0, ""
    for char in text or "":
        depth += char == "("
        depth -= char == ")"
        if char == "," and depth == 0:
            terms.append(current)
            current = ""
        else:
            current += char
    terms.append(current)
    parsed = []
    for term in (t.strip() for t in terms):
        if not term:
            continue
        if match := re.fullmatch(r"(\S+)\s+(in|notin)\s+\(([^)]*)\)", term):
            parsed.append((match[2], match[1], {v.strip() for v in match[3].split(",") if v.strip()}))
        elif match := re.fullmatch(r"([^!=\s]+)\s*(==|=|!=)\s*([^!=\s]*)", term):
            parsed.append(("!=" if match[2] == "!=" else "=", match[1], {match[3]}))
        elif match := re.fullmatch(r"!\s*([^!=\s(),]+)", term):
            parsed.append(("!", match[1], set()))
        elif re.fullmatch(r"[^!=\s(),]+", term):
            parsed.append(("exists", term, set()))
        else:
            raise ValueError(f"unable to parse requirement: {term!r}")
    return parsed


def selector_matches(selector: list, labels: dict) -> bool:
    for op, key, values in selector:
        present, value = key in labels, labels.get(key)
        ok = {
            "=": present and value in values,
            "in": present and value in values,
            "!=": not present or value not in values,
            "notin": not present or value not in values,
            "exists": present,
            "!": not present,
        }[op]
        if not ok:
            return False
    return True


def _field(obj: dict, path: str):
    for part in path.split("."):
        obj = obj.get(part) if isinstance(obj, dict) else None
    return obj


def field_matches(selector: str, obj: dict) -> bool:
    for term in filter(None, (selector or "").split(",")):
        key, op, value = re.fullmatch(r"([^!=]+)(!=|==|=)(.*)", term).groups()
        if (str(_field(obj, key) or "") == value) != (op != "!="):
            return False
    return True


def merge_patch(target, patch):
    """RFC 7386."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


def json_patch(target: dict, operations: list) -> dict:
    """RFC 6902 (add, remove, replace, test) — what clients send for annotations and finalizers."""
    doc = copy.deepcopy(target)
    for op in operations:
        parts = [p.replace("~1", "/").replace("~0", "~") for p in op["path"].lstrip("/").split("/")]
        parent = doc
        for part in parts[:-1]:
            parent = parent[int(part)] if isinstance(parent, list) else parent.setdefault(part, {})
        last = parts[-1]
        if op["op"] == "test":
            if (parent[int(last)] if isinstance(parent, list) else parent.get(last)) != op["value"]:
                raise ApiError(422, "Invalid", f"the test operation on {op['path']} failed")
        elif op["op"] == "remove":
            del parent[int(last) if isinstance(parent, list) else last]
        elif isinstance(parent, list):
            index = len(parent) if last == "-" else int(last)
            parent.insert(index, op["value"]) if op["op"] == "add" else parent.__setitem__(index, op["value"])
        else:
            parent[last] = op["value"]
    return doc


# ----------------------------------------------------------------------------------------- faults


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


# ------------------------------------------------------------------------------------------ store


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


def resource_of(api_version: str, kind: str) -> tuple[tuple[str, str, str], bool]:
    group, _, version = api_version.rpartition("/")
    for (g, v, plural), (k, namespaced) in RESOURCES.items():
        if (g, v, k) == (group, version, kind):
            return (g, v, plural), namespaced
    raise KeyError(f"the fake does not serve {api_version} {kind}")


class KubeFake:
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

    # -- the store (callers hold self.lock)

    def _next_rv(self) -> str:
        self.store.rv += 1
        return str(self.store.rv)

    def _record(self, resource, type_: str, obj: dict) -> None:
        self.store.events.append(Event(int(obj["metadata"]["resourceVersion"]), resource, type_, copy.deepcopy(obj)))
        if self._loop is not None:
            self._loop.call_soon_threadsafe(self._wake)

    def _wake(self) -> None:
        changed, self._changed = self._changed, asyncio.Event()
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

    def _validate(self, obj: dict) -> None:
        key = (obj.get("apiVersion"), obj.get("kind"))
        validator = self.validators.get(key)
        if validator is None and (obj.get("kind") in VALIDATED or key in CRD_FILES):
            validator = manifest_problems
        problems = validator(_without_server_fields(obj)) if validator else []
        if problems:
            name = (obj.get("metadata") or {}).get("name", "")
            raise ApiError(
                422,
                "Invalid",
                f'{obj.get("kind")} "{name}" is invalid: ' + "; ".join(problems),
                name=name,
                kind=obj.get("kind"),
                causes=[{"message": p} for p in problems],
            )


def _without_server_fields(obj: dict) -> dict:
    clean = copy.deepcopy(obj)
    meta = clean.get("metadata") or {}
    for key in (
        "uid",
        "resourceVersion",
        "creationTimestamp",
        "generation",
        "deletionTimestamp",
        "deletionGracePeriodSeconds",
        "managedFields",
        "ownerReferences",
        "finalizers",
    ):
        meta.pop(key, None)
    clean.pop("status", None)
    return clean


# ---------------------------------------------------------------------------------------- the server


@attrs.define(kw_only=True)
class _Handler(kmock.RawHandler):
    fake: KubeFake = None

    async def __call__(self, raw: aiohttp.web.BaseRequest) -> aiohttp.web.StreamResponse:
        # RawHandler.__call__ parses with kmock's Request._parse, which fails on /api/v1/namespaces
        # (kmock 0.8 parse_path); the fake parses its own paths.
        fake = self.fake
        method, path = raw.method.upper(), raw.path
        body = await raw.read()
        try:
            data = json.loads(body) if body else None
        except ValueError:
            data = None
        fake.requests.append((method, raw.path_qs))
        with fake.lock:
            fault = next((f for f in fake.faults if f.matches(method, raw.path_qs)), None)
            if fault:
                fault.hits += 1
        try:
            if fault and not (fault.delay and fault.land):
                await asyncio.sleep(fault.delay)
                if fault.status:
                    raise ApiError(fault.status, "InternalError" if fault.status >= 500 else "Forbidden", fault.message)
            response = await self._serve(data, raw, method, path)
            if fault:  # landed, answered too late
                await asyncio.sleep(fault.delay)
            return response
        except ApiError as error:
            return aiohttp.web.json_response(error.body, status=error.code)
        except Exception:  # noqa: BLE001 - the fake's own bug: visible to the client and to the test
            fake.errors.append(traceback.format_exc())
            return aiohttp.web.json_response(status_body(500, "InternalError", traceback.format_exc()), status=500)

    async def _serve(self, data, raw, method: str, path: str):
        fake, params = self.fake, dict(raw.query)
        if path in ("/version", "/version/"):
            return aiohttp.web.json_response({"major": "1", "minor": "32", "gitVersion": "v1.32.0-kubefake"})
        match = _PATH.match(path)
        if not match:
            raise ApiError(404, "NotFound", "the server could not find the requested resource")
        group, version = ("", "v1") if match["cv"] else (match["g"], match["v"])
        resource = (group, version, match["plural"])
        namespace, name, sub = match["ns"], match["name"], match["sub"]
        if resource not in RESOURCES:
            raise ApiError(404, "NotFound", "the server could not find the requested resource")
        kind, namespaced = RESOURCES[resource]
        key = (resource, namespace if namespaced else None, name)
        body = data if isinstance(data, (dict, list)) else None

        if sub == "log" and method == "GET":
            return await self._log(raw, namespace, name, params)
        if method == "GET" and params.get("watch") in ("true", "1", "True"):
            return await self._watch(raw, resource, namespace, params)
        with fake.lock:
            if method == "GET" and name is None:
                return _json(self._list(resource, kind, namespace, params))
            if method == "GET":
                return _json(self._get(key))
            if method == "POST" and name is None:
                obj = copy.deepcopy(body or {})
                if obj.get("kind") != kind or obj.get("apiVersion") != api_version_of(group, version):
                    raise ApiError(
                        400,
                        "BadRequest",
                        f"the API version in the data ({obj.get('apiVersion')}) does not "
                        f"match the expected API version ({api_version_of(group, version)})",
                    )
                body_ns = (obj.get("metadata") or {}).get("namespace")
                if namespaced and body_ns and body_ns != namespace:
                    raise ApiError(
                        400,
                        "BadRequest",
                        "the namespace of the provided object does not match the namespace sent on the request",
                    )
                if namespaced:
                    obj.setdefault("metadata", {})["namespace"] = namespace
                fake._validate(obj)
                obj.pop("status", None)
                return _json(fake._create(obj), 201)
            if method in ("PUT", "PATCH") and name:
                current = self._get(key)
                if method == "PUT":
                    new = copy.deepcopy(body or {})
                    wanted = (new.get("metadata") or {}).get("resourceVersion")
                    if wanted and wanted != current["metadata"]["resourceVersion"]:
                        raise ApiError(
                            409,
                            "Conflict",
                            f'Operation cannot be fulfilled on {resource[2]} "{name}": the '
                            "object has been modified; please apply your changes to the latest version and try again",
                        )
                elif isinstance(body, list):
                    new = json_patch(current, body)
                else:
                    new = merge_patch(current, body or {})
                if sub == "status":  # only the status changes
                    new = {**current, "status": new.get("status", {})}
                elif sub is None:
                    new["status"] = current.get("status")
                    if new["status"] is None:
                        new.pop("status")
                    for owned in ("uid", "creationTimestamp", "generation", "deletionTimestamp"):
                        if owned in current["metadata"]:
                            new.setdefault("metadata", {})[owned] = current["metadata"][owned]
                    fake._validate(new)
                else:
                    raise ApiError(404, "NotFound", "the server could not find the requested resource")
                return _json(fake._store(key, new, "MODIFIED", spec_changed=sub is None))
            if method == "DELETE":
                options = body if isinstance(body, dict) else {}
                propagation = params.get("propagationPolicy") or options.get("propagationPolicy") or "Background"
                if name:
                    return _json(fake._delete(key, propagation))
                selector = parse_selector(params.get("labelSelector", ""))
                for item in self._list(resource, kind, namespace, params)["items"]:
                    meta = item["metadata"]
                    if selector_matches(selector, meta.get("labels") or {}):
                        fake._delete((resource, meta.get("namespace"), meta["name"]), propagation)
                return _json({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success"})
        raise ApiError(405, "MethodNotAllowed", "the server does not allow this method on the requested resource")

    def _get(self, key) -> dict:
        obj = self.fake.store.objects.get(key)
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

    def _list(self, resource, kind: str, namespace: str | None, params: dict) -> dict:
        try:
            selector = parse_selector(params.get("labelSelector", ""))
        except ValueError as error:
            raise ApiError(400, "BadRequest", f"unable to parse requirement: {error}") from None
        items = [
            copy.deepcopy(o)
            for (r, ns, _), o in sorted(self.fake.store.objects.items(), key=lambda i: str(i[0]))
            if r == resource
            and (namespace is None or ns == namespace)
            and selector_matches(selector, o["metadata"].get("labels") or {})
            and field_matches(params.get("fieldSelector", ""), o)
        ]
        return {
            "apiVersion": api_version_of(resource[0], resource[1]),
            "kind": f"{kind}List",
            "metadata": {"resourceVersion": str(self.fake.store.rv)},
            "items": items,
        }

    async def _watch(self, raw, resource, namespace, params):
        fake = self.fake
        selector = parse_selector(params.get("labelSelector", ""))
        fields_ = params.get("fieldSelector", "")
        since = params.get("resourceVersion") or "0"
        deadline = time.monotonic() + float(params.get("timeoutSeconds") or 1800)
        response = aiohttp.web.StreamResponse(status=200, headers={"Content-Type": "application/json"})
        await response.prepare(raw)

        def wanted(obj: dict) -> bool:
            return (
                (namespace is None or obj["metadata"].get("namespace") == namespace)
                and selector_matches(selector, obj["metadata"].get("labels") or {})
                and field_matches(fields_, obj)
            )

        async def send(type_: str, obj: dict) -> None:
            await response.write(json.dumps({"type": type_, "object": obj}).encode() + b"\n")

        with fake.lock:
            if since == "0":  # the current state first, as synthetic ADDED events
                initial = [
                    copy.deepcopy(o) for (r, _, _), o in fake.store.objects.items() if r == resource and wanted(o)
                ]
                position = fake.store.rv
            elif int(since) < fake.store.compacted:
                initial, position = None, 0
            else:
                initial, position = [], int(since)
        if initial is None:
            await send(
                "ERROR", status_body(410, "Expired", f"too old resource version: {since} ({fake.store.compacted})")
            )
            await response.write_eof()
            return response
        for obj in initial:
            await send("ADDED", obj)
        with contextlib.suppress(ConnectionResetError, asyncio.CancelledError):
            while time.monotonic() < deadline:
                changed = fake._changed
                with fake.lock:
                    if position < fake.store.compacted:
                        gone = True
                        events = []
                    else:
                        gone = False
                        events = [e for e in fake.store.events if e.rv > position and e.resource == resource]
                        position = fake.store.rv
                if gone:
                    await send(
                        "ERROR",
                        status_body(410, "Expired", f"too old resource version: {position} ({fake.store.compacted})"),
                    )
                    break
                for event in events:
                    if wanted(event.object):
                        await send(event.type, event.object)
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(changed.wait(), timeout=max(0.0, min(0.5, deadline - time.monotonic())))
            await response.write_eof()
        return response

    async def _log(self, raw, namespace: str, name: str, params: dict):
        fake = self.fake
        with fake.lock:
            pod = self._get((("", "v1", "pods"), namespace, name))
            names = [c["name"] for c in pod["spec"].get("containers", [])]
            init_names = [c["name"] for c in pod["spec"].get("initContainers", [])]
            container = params.get("container")
            if not container:
                if len(names) != 1:
                    raise ApiError(
                        400, "BadRequest", f"a container name must be specified for pod {name}, choose one of: {names}"
                    )
                container = names[0]
            if container not in names + init_names:
                raise ApiError(400, "BadRequest", f"container {container} is not valid for pod {name}")
            statuses = {
                s["name"]: s
                for s in pod.get("status", {}).get("containerStatuses", [])
                + pod.get("status", {}).get("initContainerStatuses", [])
            }
            state = statuses.get(container, {}).get("state", {"waiting": {"reason": "PodInitializing"}})
            if "waiting" in state and (namespace, name, container) not in fake.store.logs:
                reason = state["waiting"].get("reason", "ContainerCreating")
                raise ApiError(
                    400, "BadRequest", f'container "{container}" in pod "{name}" is waiting to start: {reason}'
                )
        follow = params.get("follow") in ("true", "1", "True")
        tail = int(params["tailLines"]) if params.get("tailLines") else None

        def text() -> str:
            with fake.lock:
                return fake.store.logs.get((namespace, name, container), "")

        def done() -> bool:
            with fake.lock:
                current = fake.store.objects.get((("", "v1", "pods"), namespace, name))
                status = {
                    s["name"]: s
                    for s in (current or {}).get("status", {}).get("containerStatuses", [])
                    + (current or {}).get("status", {}).get("initContainerStatuses", [])
                }
                return current is None or "terminated" in status.get(container, {}).get("state", {})

        content = text()
        if tail is not None:
            lines = content.splitlines(keepends=True)
            content = "".join(lines[-tail:]) if tail else ""
        if not follow:
            return aiohttp.web.Response(text=content, content_type="text/plain")
        response = aiohttp.web.StreamResponse(status=200, headers={"Content-Type": "text/plain"})
        await response.prepare(raw)
        sent = len(text()) - len(content)
        with contextlib.suppress(ConnectionResetError, asyncio.CancelledError):
            while True:
                ended = done()
                current = text()
                if len(current) > sent:
                    await response.write(current[sent:].encode())
                    sent = len(current)
                if ended:
                    break
                changed = fake._changed
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(changed.wait(), timeout=0.5)
            await response.write_eof()
        return response


def _json(body: dict, status: int = 200) -> aiohttp.web.Response:
    return aiohttp.web.json_response(body, status=status)


# ------------------------------------------------------------------------------ operator + kubelet

JOB_NAME_LABEL = "training.kubeflow.org/job-name"
REPLICA_TYPE_LABEL = "training.kubeflow.org/replica-type"
REPLICA_INDEX_LABEL = "training.kubeflow.org/replica-index"
OPERATOR_LABEL = "training.kubeflow.org/operator-name"
REPLICA_FIELDS = {"PyTorchJob": "pytorchReplicaSpecs", "TFJob": "tfReplicaSpecs", "MPIJob": "mpiReplicaSpecs"}
API_VERSIONS = {
    "PyTorchJob": "kubeflow.org/v1",
    "TFJob": "kubeflow.org/v1",
    "MPIJob": "kubeflow.org/v2beta1",
    "Job": "batch/v1",
}


class Operator:
    """The Training Operator, the Job controller and the kubelet, moved by the test (never by wall time).

    Jobs are addressed by (kind, namespace, name); pods by (namespace, pod name).
    ``graceful = True`` keeps deleted running pods terminating until ``terminate_pods()``.
    """

    def __init__(self, fake: KubeFake):
        self.fake = fake
        self.graceful = False

    # -- jobs

    def job(self, kind: str, namespace: str, name: str) -> dict:
        obj = self.fake.get(API_VERSIONS[kind], kind, namespace, name)
        if obj is None:
            raise KeyError(f"no {kind} {namespace}/{name}")
        return obj

    def create_pods(self, kind: str, namespace: str, name: str) -> list[str]:
        """The pods of a job (Pending, init containers waiting), owned by it; the Created condition."""
        job = self.job(kind, namespace, name)
        made = []
        with self.fake.lock:
            if kind == "Job":
                replicas = [("", 0, job["spec"]["template"], f"{name}-{uuid.uuid4().hex[:5]}")]
            else:
                replicas = []
                for rtype, rspec in job["spec"][REPLICA_FIELDS[kind]].items():
                    for index in range(rspec.get("replicas", 1)):
                        pod_name = f"{name}-launcher" if rtype == "Launcher" else f"{name}-{rtype.lower()}-{index}"
                        replicas.append((rtype, index, rspec["template"], pod_name))
            for rtype, index, template, pod_name in replicas:
                if self.fake.get("v1", "Pod", namespace, pod_name):
                    continue
                labels = dict(template.get("metadata", {}).get("labels") or {})
                if kind == "Job":
                    labels.update(
                        {
                            "batch.kubernetes.io/job-name": name,
                            "job-name": name,
                            "batch.kubernetes.io/controller-uid": job["metadata"]["uid"],
                        }
                    )
                else:
                    labels.update(
                        {
                            JOB_NAME_LABEL: name,
                            REPLICA_TYPE_LABEL: rtype.lower(),
                            REPLICA_INDEX_LABEL: str(index),
                            OPERATOR_LABEL: f"{kind.lower()}-controller",
                        }
                    )
                    if rtype in ("Master", "Launcher") or (kind == "TFJob" and index == 0):
                        labels["training.kubeflow.org/job-role"] = "master"
                spec = copy.deepcopy(template["spec"])
                pod = {
                    "apiVersion": "v1",
                    "kind": "Pod",
                    "metadata": {
                        "name": pod_name,
                        "namespace": namespace,
                        "labels": labels,
                        "ownerReferences": [
                            {
                                "apiVersion": job["apiVersion"],
                                "kind": kind,
                                "name": name,
                                "uid": job["metadata"]["uid"],
                                "controller": True,
                                "blockOwnerDeletion": True,
                            }
                        ],
                    },
                    "spec": spec,
                    "status": {
                        "phase": "Pending",
                        "initContainerStatuses": [
                            _waiting(c, "PodInitializing" if i else "ContainerCreating")
                            for i, c in enumerate(spec.get("initContainers", []))
                        ],
                        "containerStatuses": [_waiting(c, "PodInitializing") for c in spec.get("containers", [])],
                    },
                }
                self.fake._create(pod)
                made.append(pod_name)
            job = self.job(kind, namespace, name)
            status = job.setdefault("status", {})
            if kind == "Job":
                status.update(active=len(replicas), startTime=status.get("startTime") or now_iso())
            else:
                status.setdefault("startTime", now_iso())
                status["replicaStatuses"] = {r: {"active": 0} for r in job["spec"][REPLICA_FIELDS[kind]]}
                _condition(status, "Created", f"{kind}Created", f"{kind} {name} is created.")
            self.fake.update(job, status=True)
        return made

    def pods(self, kind: str, namespace: str, name: str) -> list[str]:
        job = self.job(kind, namespace, name)
        with self.fake.lock:
            return sorted(
                o["metadata"]["name"]
                for o in self.fake.list("v1", "Pod", namespace)
                if any(r["uid"] == job["metadata"]["uid"] for r in o["metadata"].get("ownerReferences", []))
            )

    def set_condition(
        self, kind: str, namespace: str, name: str, type_: str, reason: str = "", message: str = ""
    ) -> dict:
        """Set a job condition the way the operator does (Running / Restarting / Succeeded / Failed /
        Suspended, or Complete / Failed for a batch Job); an ending also sets completionTime and, for
        Training Operator jobs, turns Running False."""
        with self.fake.lock:
            job = self.job(kind, namespace, name)
            status = job.setdefault("status", {})
            reason = reason or (f"{kind}{type_}" if kind != "Job" else type_)
            message = message or f"{kind} {name} is {type_.lower()}."
            _condition(status, type_, reason, message)
            if type_ in ("Succeeded", "Failed", "Complete"):
                status["completionTime"] = now_iso()
                for other in status.get("conditions", []):
                    if other["type"] in ("Running", "Restarting") and other["type"] != type_:
                        other["status"] = "False"
                if kind == "Job":
                    status["active"] = 0
            return self.fake.update(job, status=True)

    def succeed(self, kind: str, namespace: str, name: str) -> dict:
        return self.set_condition(
            kind,
            namespace,
            name,
            "Complete" if kind == "Job" else "Succeeded",
            message=f"{kind} {name} successfully completed." if kind != "Job" else "",
        )

    def fail(self, kind: str, namespace: str, name: str, reason: str = "", message: str = "") -> dict:
        if not message:
            message = (
                f"{kind} {name} is failed because 1 Worker replica(s) failed."
                if kind != "Job"
                else "Job has reached the specified backoff limit"
            )
        return self.set_condition(
            kind,
            namespace,
            name,
            "Failed",
            reason or (f"{kind}Failed" if kind != "Job" else "BackoffLimitExceeded"),
            message,
        )

    def exceed_deadline(self, kind: str, namespace: str, name: str) -> dict:
        """activeDeadlineSeconds passed: the operator kills the pods and fails the job with DeadlineExceeded."""
        for pod in self.pods(kind, namespace, name):
            self.fake.delete("v1", "Pod", namespace, pod)
        return self.set_condition(
            kind,
            namespace,
            name,
            "Failed",
            "DeadlineExceeded",
            f"{kind} {name} has failed because it was active longer than specified deadline"
            if kind != "Job"
            else "Job was active longer than specified deadline",
        )

    # -- pods (the kubelet)

    def _pod(self, namespace: str, pod: str) -> dict:
        obj = self.fake.get("v1", "Pod", namespace, pod)
        if obj is None:
            raise KeyError(f"no pod {namespace}/{pod}")
        return obj

    def log(self, namespace: str, pod: str, text: str, container: str | None = None) -> None:
        """Append output to a container's log (default: the pod's main container)."""
        with self.fake.lock:
            container = container or self._pod(namespace, pod)["spec"]["containers"][0]["name"]
            key = (namespace, pod, container)
            self.fake.store.logs[key] = self.fake.store.logs.get(key, "") + text
            self.fake._record(("", "v1", "pods-log"), "LOG", {"metadata": {"resourceVersion": str(self.fake.store.rv)}})

    def init_done(
        self, namespace: str, pod: str, container: str, *, exit_code: int = 0, log: str = "", message: str = ""
    ) -> dict:
        """An init container ends: the next one runs; a failure fails the pod (restartPolicy Never)."""
        with self.fake.lock:
            if log:
                self.log(namespace, pod, log, container)
            obj = self._pod(namespace, pod)
            statuses = obj["status"]["initContainerStatuses"]
            index = next(i for i, s in enumerate(statuses) if s["name"] == container)
            statuses[index].update(state={"terminated": _terminated(exit_code, message)}, ready=exit_code == 0)
            if exit_code:
                obj["status"].update(phase="Failed", reason="", message="")
                for status in obj["status"]["containerStatuses"]:
                    status["state"] = {"waiting": {"reason": "PodInitializing"}}
            elif index + 1 < len(statuses):
                statuses[index + 1]["state"] = {"running": {"startedAt": now_iso()}}
            obj["status"].setdefault("conditions", [])
            return self.fake.update(obj, status=True)

    def run(self, namespace: str, pod: str, *, log: str = "", fetch_log: str = "") -> dict:
        """Init containers done (fetch-code prints ``fetch_log``), the main containers run: pod Running."""
        with self.fake.lock:
            obj = self._pod(namespace, pod)
            for status in obj["status"].get("initContainerStatuses", []):
                if "terminated" not in status["state"]:
                    text = fetch_log if status["name"] == "fetch-code" else ""
                    self.init_done(namespace, pod, status["name"], log=text)
            obj = self._pod(namespace, pod)
            for status in obj["status"]["containerStatuses"]:
                status.update(state={"running": {"startedAt": now_iso()}}, ready=True, started=True)
            obj["status"].update(
                phase="Running",
                startTime=obj["status"].get("startTime") or now_iso(),
                podIP="10.0.0.1",
                hostIP="10.0.1.1",
            )
            obj["spec"]["nodeName"] = obj["spec"].get("nodeName") or "gpu-node-1"
            self.fake.update(obj)
            if log:
                self.log(namespace, pod, log)
            return self._pod(namespace, pod)

    def exit(self, namespace: str, pod: str, exit_code: int = 0, *, log: str = "", reason: str = "") -> dict:
        """The main container ends: pod Succeeded (0) or Failed."""
        with self.fake.lock:
            if log:
                self.log(namespace, pod, log)
            obj = self._pod(namespace, pod)
            for status in obj["status"]["containerStatuses"]:
                started = status["state"].get("running", {}).get("startedAt", now_iso())
                status.update(
                    state={"terminated": {**_terminated(exit_code, "", reason), "startedAt": started}},
                    ready=False,
                    started=False,
                )
            obj["status"]["phase"] = "Failed" if exit_code else "Succeeded"
            return self.fake.update(obj, status=True)

    def evict(self, namespace: str, pod: str, message: str = "The node was low on resource: memory.") -> dict:
        with self.fake.lock:
            obj = self._pod(namespace, pod)
            for status in obj["status"]["containerStatuses"]:
                status.update(state={"terminated": _terminated(137, "", "ContainerStatusUnknown")}, ready=False)
            obj["status"].update(phase="Failed", reason="Evicted", message=message)
            return self.fake.update(obj, status=True)

    def terminate_pods(self, namespace: str | None = None) -> list[str]:
        """The kubelet ends every terminating pod (exit 143 after SIGTERM); owners then finish deleting."""
        ended = []
        with self.fake.lock:
            for (resource, ns, name), obj in list(self.fake.store.objects.items()):
                if (
                    resource == ("", "v1", "pods")
                    and obj["metadata"].get("deletionTimestamp")
                    and (namespace is None or ns == namespace)
                ):
                    self.fake._remove((resource, ns, name))
                    ended.append(name)
        return ended


def _waiting(container: dict, reason: str) -> dict:
    return {
        "name": container["name"],
        "image": container.get("image", ""),
        "ready": False,
        "restartCount": 0,
        "state": {"waiting": {"reason": reason}},
    }


def _terminated(exit_code: int, message: str, reason: str = "") -> dict:
    state = {
        "exitCode": exit_code,
        "reason": reason or ("Completed" if exit_code == 0 else "Error"),
        "startedAt": now_iso(),
        "finishedAt": now_iso(),
    }
    if message:
        state["message"] = message
    return state


def _condition(status: dict, type_: str, reason: str, message: str) -> None:
    conditions = status.setdefault("conditions", [])
    stamp = now_iso()
    for condition in conditions:
        if condition["type"] == type_:
            condition.update(status="True", reason=reason, message=message, lastUpdateTime=stamp)
            return
    conditions.append(
        {
            "type": type_,
            "status": "True",
            "reason": reason,
            "message": message,
            "lastUpdateTime": stamp,
            "lastTransitionTime": stamp,
        }
    )
