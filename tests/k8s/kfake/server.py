"""The HTTP side: kmock serves, ``_Handler`` routes each request to the store as the API server would.

kmock (``kmock.Server`` serves, ``kmock.RawHandler`` is the handler base) has a ``KubernetesEmulator`` that
keeps objects but has no uid / resourceVersion / label selectors / 410 / ownerReference garbage collection /
status subresource / pod logs, and its storage cannot be extended to them, so ``_Handler`` serves the API
itself. Paths are the API server's (``/api/v1/...``, ``/apis/GROUP/VERSION/...``, namespaced or not,
``/status`` and ``/log`` subresources; ``/version``). POST checks apiVersion / kind and the namespace
against the path (400); PUT with a stale resourceVersion is a 409 Conflict; PATCH is a merge patch (dict
body) or a JSON patch (list body); the main resource keeps the status, ``/status`` changes only it; DELETE
takes ``propagationPolicy`` from the query or the DeleteOptions body, and without a name is a
deletecollection by label selector. Injected faults (``fake.inject``) are answered here; an exception in the
fake itself is a 500 and lands in ``fake.errors``.
"""

from __future__ import annotations

import asyncio
import copy
import json
import re
import traceback
from typing import TYPE_CHECKING, Any

import aiohttp.web
import attrs
import kmock

from tests.k8s.kfake.api import RESOURCES, ApiError, api_version_of, status_body
from tests.k8s.kfake.logs import pod_log
from tests.k8s.kfake.patches import json_patch, merge_patch
from tests.k8s.kfake.selectors import field_matches, parse_selector, selector_matches
from tests.k8s.kfake.watch import watch

if TYPE_CHECKING:
    from tests.k8s.kfake.fake import KubeFake

_PATH = re.compile(
    r"^/(?:api/(?P<cv>v1)|apis/(?P<g>[^/]+)/(?P<v>[^/]+))"
    r"(?:/namespaces/(?P<ns>[^/]+)(?=/))?/(?P<plural>[^/]+)(?:/(?P<name>[^/]+)(?:/(?P<sub>[^/]+))?)?$"
)


@attrs.define(kw_only=True)
class _Handler(kmock.RawHandler):
    fake: KubeFake = None  # type: ignore[assignment]

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
        body: Any = data if isinstance(data, (dict, list)) else None

        if sub == "log" and method == "GET":
            return await pod_log(fake, raw, namespace, name, params)
        if method == "GET" and params.get("watch") in ("true", "1", "True"):
            return await watch(fake, raw, resource, namespace, params)
        with fake.lock:
            if method == "GET" and name is None:
                return _json(self._list(resource, kind, namespace, params))
            if method == "GET":
                return _json(fake._read(key))
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
                current = fake._read(key)
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


def _json(body: dict, status: int = 200) -> aiohttp.web.Response:
    return aiohttp.web.json_response(body, status=status)
