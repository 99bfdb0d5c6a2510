"""How many PostgreSQL connections the portal may open: the pool of each process and the budget they share.

Every portal process (the web server, the Celery worker's main process and each of its prefork children, beat,
the cluster watcher) keeps its own pool of at most ``max_size`` connections (Django's
``DATABASES["default"]["OPTIONS"]["pool"]``, psycopg_pool). A request that finds its process's pool busy waits
up to ``timeout`` seconds for a connection, then fails with psycopg_pool.PoolTimeout, which the web process
answers 503 (core/db_busy.py) and a Celery task retries (core/celery.py).

The budget (platform/README.md "Database connections"):

    processes x max_size + headroom <= max_connections - superuser_reserved_connections

``headroom`` is what everything else needs (migrations, ``manage.py`` commands, psql, backups, monitoring).
``manage.py migrate`` and ``manage.py check --database default`` compare it with the server (core/db_checks.py).

Pure module: no Django, so that config/settings.py can use it before settings exist.
"""

from __future__ import annotations

from dataclasses import dataclass

# What a process that finds its pool busy is told to wait before trying again (the Retry-After header).
RETRY_AFTER_SECONDS = 5


@dataclass(frozen=True)
class PoolSizes:
    """One process's pool (``max_size`` 0: no pool, a connection per request) and the budget it counts in."""

    min_size: int
    max_size: int
    timeout: float
    processes: int
    headroom: int

    def __post_init__(self) -> None:
        if self.max_size and self.min_size > self.max_size:
            raise ValueError(
                f"PORTAL_DB_POOL_MIN={self.min_size} is above PORTAL_DB_POOL_MAX={self.max_size}: "
                "a pool cannot keep more idle connections than it may open"
            )

    @property
    def pooled(self) -> bool:
        return self.max_size > 0

    def django_options(self) -> dict:
        """The value of ``OPTIONS["pool"]``: psycopg_pool.ConnectionPool's arguments."""
        return {
            "min_size": self.min_size,
            "max_size": self.max_size,
            "timeout": self.timeout,
            # Connections above min_size that nobody used for this long are closed (psycopg_pool's default).
            "max_idle": 600,
            # A connection is replaced after an hour, spreading reconnections over time (psycopg_pool's default).
            "max_lifetime": 3600,
            "name": "portal",
        }

    def connections(self) -> int:
        """The most connections all the portal's processes together may hold."""
        return self.processes * self.max_size


def budget_problem(sizes: PoolSizes, *, max_connections: int, reserved: int) -> str | None:
    """What is wrong with ``sizes`` on a server of ``max_connections`` (``reserved`` kept for superusers), or None.

    The answer is a sentence an operator can act on: the numbers, the formula and what to change.
    """
    if not sizes.pooled:
        return None
    available = max_connections - reserved
    needed = sizes.connections() + sizes.headroom
    if needed <= available:
        return None
    fitting = max(0, (available - sizes.headroom) // sizes.processes)
    advice = (
        f"lower PORTAL_DB_POOL_MAX to {fitting} or less" if fitting else "run fewer processes"
    ) + f", or raise PostgreSQL's max_connections to {needed + reserved} or more"
    return (
        f"{sizes.processes} processes (PORTAL_DB_PROCESSES) x {sizes.max_size} connections each "
        f"(PORTAL_DB_POOL_MAX) + {sizes.headroom} of headroom (PORTAL_DB_HEADROOM) = {needed} connections, but "
        f"PostgreSQL accepts {available} ({max_connections} max_connections - {reserved} reserved for superusers): "
        f"under load the portal would meet 'too many clients'. {advice[0].upper()}{advice[1:]}."
    )


def is_pool_timeout(exc: BaseException | None) -> bool:
    """Whether ``exc`` is, or was caused by, a pool that stayed busy for its whole timeout.

    Django raises psycopg_pool.PoolTimeout as ``django.db.utils.OperationalError`` with the original as its
    ``__cause__`` (BaseDatabaseWrapper.ensure_connection wraps connect() in wrap_database_errors).
    """
    try:
        from psycopg_pool import PoolTimeout
    except ImportError:  # pragma: no cover - psycopg_pool is a locked dependency
        return False
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        if isinstance(exc, PoolTimeout):
            return True
        seen.add(id(exc))
        exc = exc.__cause__ or exc.__context__
    return False
