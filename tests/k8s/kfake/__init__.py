"""KubeFake: an honest Kubernetes API fake that the real ``kubernetes`` client talks to over HTTP.

The package's modules: ``fake`` (KubeFake: the server thread, the test controls), ``server`` (HTTP
routing on kmock), ``store`` (objects, resourceVersions, events, deletion), ``validation`` (schemas),
``watch``, ``logs``, ``selectors``, ``patches``, ``faults``, ``operator`` (Training Operator, Job controller,
kubelet) and ``api`` (resources, Status errors).

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

from tests.k8s.kfake.api import RESOURCES, VALIDATED, ApiError, api_version_of, now_iso, resource_of, status_body
from tests.k8s.kfake.fake import KubeFake
from tests.k8s.kfake.faults import Fault
from tests.k8s.kfake.operator import API_VERSIONS, Operator
from tests.k8s.kfake.patches import json_patch, merge_patch
from tests.k8s.kfake.selectors import field_matches, parse_selector, selector_matches
from tests.k8s.kfake.store import Event, Store

FAKE_READY = True  # create/get/list/watch/delete/patch/status/logs work through the real client

__all__ = [
    "API_VERSIONS",
    "FAKE_READY",
    "RESOURCES",
    "VALIDATED",
    "ApiError",
    "Event",
    "Fault",
    "KubeFake",
    "Operator",
    "Store",
    "api_version_of",
    "field_matches",
    "json_patch",
    "merge_patch",
    "now_iso",
    "parse_selector",
    "resource_of",
    "selector_matches",
    "status_body",
]
