"""The connection budget checked against the server at start-up (a Django system check, database tag).

Registered by core.apps.CoreConfig.ready(). Tagged ``database``, so Django runs it where a connection is
expected: ``manage.py migrate`` (``make run``, ``make migrate`` and the Kubernetes migration Job run it before
anything starts) and ``manage.py check --database default``; never on a plain ``manage.py check`` nor on a
web request. It reads the server's own ``max_connections`` and ``superuser_reserved_connections``, since only
the server knows them; the process count comes from PORTAL_DB_PROCESSES (core/db_pool.py has the formula).
"""

from __future__ import annotations

from django.conf import settings
from django.core import checks
from django.db import DatabaseError, connections

from core.db_pool import PoolSizes, budget_problem


def configured_sizes() -> PoolSizes:
    pool = settings.PORTAL_DB_POOL or {}
    return PoolSizes(
        min_size=pool.get("min_size", 0),
        max_size=pool.get("max_size", 0),
        timeout=pool.get("timeout", 0),
        processes=settings.PORTAL_DB_PROCESSES,
        headroom=settings.PORTAL_DB_HEADROOM,
    )


def server_limits(alias: str = "default") -> tuple[int, int]:
    """(max_connections, superuser_reserved_connections + reserved_connections) of the server behind ``alias``."""
    with connections[alias].cursor() as cursor:
        cursor.execute(
            "SELECT name, setting::int FROM pg_settings WHERE name IN "
            "('max_connections', 'superuser_reserved_connections', 'reserved_connections')"
        )
        values = dict(cursor.fetchall())
    return values["max_connections"], values.get("superuser_reserved_connections", 0) + values.get(
        "reserved_connections", 0
    )


@checks.register(checks.Tags.database)
def check_connection_budget(app_configs=None, databases=None, **kwargs) -> list[checks.CheckMessage]:
    if not databases or "default" not in databases or connections["default"].vendor != "postgresql":
        return []
    sizes = configured_sizes()
    if not sizes.pooled:
        return [
            checks.Warning(
                "The database connection pool is off (PORTAL_DB_POOL_MAX=0): every request thread opens its own "
                "PostgreSQL connection and nothing bounds them.",
                hint="Set PORTAL_DB_POOL_MAX (platform/README.md 'Database connections') unless a pooler such "
                "as PgBouncer bounds the connections in front of PostgreSQL.",
                id="core.W001",
            )
        ]
    try:
        max_connections, reserved = server_limits()
    except DatabaseError as exc:
        return [
            checks.Warning(
                f"Could not read max_connections from PostgreSQL to check the connection budget: {exc}",
                hint="Check DATABASE_URL, then run `manage.py check --database default` again.",
                id="core.W002",
            )
        ]
    problem = budget_problem(sizes, max_connections=max_connections, reserved=reserved)
    if problem is None:
        return []
    return [
        checks.Error(
            problem,
            hint="platform/README.md 'Database connections' explains the formula; PORTAL_DB_PROCESSES counts "
            "every process that holds a pool (a Celery worker counts 1 + its --concurrency).",
            id="core.E001",
        )
    ]
