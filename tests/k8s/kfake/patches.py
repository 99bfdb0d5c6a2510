"""PATCH bodies: JSON merge patch (RFC 7386, ``application/merge-patch+json``, what the ``kubernetes``
client sends for a dict body) and JSON patch (RFC 6902, a list body: add / remove / replace / test, what
clients send for annotations and finalizers). Strategic merge patch is not faked: the portal does not use it.
"""

from __future__ import annotations

import copy

from tests.k8s.kfake.api import ApiError


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
