"""The router's routing tables and the look at model servers before a request is sent to one.

Owns, per process: the routing table of each deployment (its ready variants' addresses, weights and shadows),
kept in memory and compared with the database at most every TABLE_CHECK_SECONDS (selectors.routing_signature),
replaced as a whole so a request sees the old routing or the new one, never a mix; and whether a variant's
server is still the process the portal started for it (servers.server_verify at most every
OWNER_CHECK_SECONDS, in between one read of /proc). ``fresh`` wraps the database reads of the fast path.
serving/router.py (the interface) asks ``table_for`` and ``refusal``; serving/forwarding.py sends the requests.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from urllib.parse import urlsplit

from asgiref.sync import sync_to_async
from django import db

from clusters import local_procs
from serving import selectors, servers

TABLE_CHECK_SECONDS = 1.0
OWNER_CHECK_SECONDS = 3.0


# --- Routing tables ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Route:
    id: int
    name: str
    host: str
    port: int
    path: str  # /v1/models/<name>:predict
    model_version: int


@dataclass
class Table:
    name: str
    department_id: int
    sticky: bool
    choices: tuple[tuple[str, int], ...]  # (variant, weight) of the live variants whose server is ready
    routes: dict[str, Route]
    shadows: tuple[Route, ...]
    signature: tuple
    checked_at: float


_tables: dict[str, Table] = {}


def _table_of(data: dict) -> Table:
    routes, choices, shadows = {}, [], []
    for variant in data["variants"]:
        if not variant["ready"]:
            continue
        address = urlsplit(variant["url"])
        # KServe's addresses carry no port (http://<name>.<namespace>.svc.cluster.local): the scheme's default.
        port = address.port or (443 if address.scheme == "https" else 80)
        route = Route(
            id=variant["id"],
            name=variant["name"],
            host=address.hostname,
            port=port,
            path=address.path,
            model_version=variant["model_version"],
        )
        if variant["shadow"]:
            shadows.append(route)
        elif variant["weight"] > 0:
            routes[route.name] = route
            choices.append((route.name, variant["weight"]))
    return Table(
        name=data["name"],
        department_id=data["department_id"],
        sticky=data["sticky"],
        choices=tuple(choices),
        routes=routes,
        shadows=tuple(shadows),
        signature=data["signature"],
        checked_at=time.monotonic(),
    )


async def table_for(name: str) -> Table | None:
    table = _tables.get(name)
    now = time.monotonic()
    if table is not None and now - table.checked_at < TABLE_CHECK_SECONDS:
        return table
    if table is not None:
        table.checked_at = now  # the other requests of this second keep using it meanwhile
        signature = await sync_to_async(fresh(selectors.routing_signature))(name)
        if signature == table.signature:
            return table
    data = await sync_to_async(fresh(selectors.routing_table))(name)
    if data is None:
        _tables.pop(name, None)
        return None
    table = _tables[name] = _table_of(data)
    return table


def tables_forget() -> None:
    """Drop every cached routing table and look at servers (tests that rebuild the world)."""
    _tables.clear()
    _owners.clear()


def fresh(function):
    """Database reads of the fast path, which runs outside Django's request cycle: drop a connection that
    is too old or broken first, as Django does at each request's start."""

    def run(*args, **kwargs):
        db.close_old_connections()
        return function(*args, **kwargs)

    return run


# --- Model servers ------------------------------------------------------------------------------------


@dataclass
class _Owner:
    address: tuple[str, int]
    checked_at: float
    pid: int | None  # None: not a process on this host (an InferenceService)
    started: int | None


_owners: dict[int, _Owner] = {}  # variant id -> the last full look at its server


async def refusal(route: Route) -> str:
    """ "" when the route's server is the process the portal started for it; otherwise why it is not used."""
    seen = _owners.get(route.id)
    now = time.monotonic()
    if seen is not None and seen.address == (route.host, route.port):
        if now - seen.checked_at >= OWNER_CHECK_SECONDS:
            seen.checked_at = now  # the other requests of this moment keep the last answer meanwhile
        elif seen.pid is None or local_procs.alive(seen.pid, seen.started):
            return ""
    owner = await sync_to_async(fresh(servers.server_verify))(variant_id=route.id, host=route.host, port=route.port)
    if owner.ours:
        _owners[route.id] = _Owner((route.host, route.port), time.monotonic(), owner.pid, owner.started)
        return ""
    _owners.pop(route.id, None)
    return owner.message
