"""The API's operations as the OpenAPI document lists them, and the rules that say who may call each.

The document is generated in-process with drf-spectacular's generator (the same one /api/v1/schema/ serves),
so an endpoint added to the URLconf is in the matrix on the next run.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache

from drf_spectacular.generators import SchemaGenerator

METHODS = ("get", "post", "put", "patch", "delete")

# Callable without signing in, and only these (schema and docs are not in the document: see test_public_pages).
PUBLIC = {("POST", "/api/v1/auth/token/")}

# Who may call an operation, when it is not the default: GET = "view", a write = "use" (any member of the
# object's department). Levels:
#   view / use   members and admins of the department, platform admins
#   manage       the department's admins, platform admins
#   platform     platform admins only
#   any_admin    an admin of some department (sees only theirs), platform admins
#   owner        the user the object belongs to, nobody else (personal tokens)
#   self         every signed-in user, about themselves (the body names nothing of a department)
#   public       everybody, signed in or not
POLICY = {
    ("POST", "/api/v1/auth/token/"): "public",
    ("PUT", "/api/v1/departments/{slug}/quotas/"): "platform",
    ("POST", "/api/v1/departments/{slug}/quotas/preview/"): "platform",
    ("GET", "/api/v1/audit/"): "any_admin",
    ("DELETE", "/api/v1/tokens/{token_id}/"): "owner",
    ("POST", "/api/v1/tokens/"): "self",
    # The fixture build was asked for by carol; its requester or a department admin may cancel it.
    ("POST", "/api/v1/image-builds/{build_id}/cancel/"): "manage",
    # Storage and webhooks are read by the department's members and changed by its admins.
    ("POST", "/api/v1/storage/"): "manage",
    ("PATCH", "/api/v1/storage/{storage_id}/"): "manage",
    ("DELETE", "/api/v1/storage/{storage_id}/"): "manage",
    ("POST", "/api/v1/webhooks/"): "manage",
    ("PATCH", "/api/v1/webhooks/{webhook_id}/"): "manage",
    ("DELETE", "/api/v1/webhooks/{webhook_id}/"): "manage",
    ("POST", "/api/v1/webhooks/{webhook_id}/rotate-secret/"): "manage",
    ("POST", "/api/v1/webhooks/{webhook_id}/ping/"): "manage",
    ("POST", "/api/v1/webhooks/{webhook_id}/deliveries/{delivery_id}/redeliver/"): "manage",
    # Quota loans are seen by the lender's and the borrower's members, made and ended by the lender's admins.
    ("POST", "/api/v1/quota-loans/"): "manage",
    ("DELETE", "/api/v1/quota-loans/{loan_id}/"): "manage",
}

ROLES = ("anonymous", "outsider", "member", "dept_admin", "platform_admin")


@dataclass(frozen=True)
class Operation:
    method: str  # upper case
    path: str  # as in the document: /api/v1/jobs/{job_id}/
    query: tuple[str, ...]  # names of its query parameters

    @property
    def on_object(self) -> bool:
        return "{" in self.path

    @property
    def level(self) -> str:
        return POLICY.get((self.method, self.path), "view" if self.method == "GET" else "use")

    def __str__(self) -> str:
        return f"{self.method} {self.path}"


@cache
def openapi() -> dict:
    return SchemaGenerator().get_schema(request=None, public=True)


def operations() -> list[Operation]:
    found = []
    for path, item in openapi()["paths"].items():
        for method in METHODS:
            if method in item:
                query = tuple(p["name"] for p in item[method].get("parameters", []) if p["in"] == "query")
                found.append(Operation(method.upper(), path, query))
    return found


def expected(operation: Operation, role: str) -> set[int] | str:
    """The status codes ``role`` must get, or "2xx"."""
    level = operation.level
    if level == "public":
        return "2xx"
    if role == "anonymous":
        return {401}
    if role == "outsider":
        if operation.on_object:
            return {404}  # API.md: an object outside the caller's departments is not revealed
        if level in ("view", "self"):
            return "2xx"  # a list or their own things; what it shows is checked for vision's data
        if level == "any_admin":
            return {403}
        return {400, 403, 404}  # a create naming vision's department or objects
    if level == "owner":
        return "2xx" if role == "member" else {404}  # the fixture token is alice's
    allowed = {
        "member": {"view", "use", "self"},
        "dept_admin": {"view", "use", "self", "manage", "any_admin"},
        "platform_admin": {"view", "use", "self", "manage", "any_admin", "platform"},
    }[role]
    return "2xx" if level in allowed else {403}
