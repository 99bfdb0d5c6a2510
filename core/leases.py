"""Leadership: exactly one process of several does a job (the scheduler service), and another takes over when it dies.

- PostgreSQL: a session advisory lock (``pg_try_advisory_lock``) held on a connection of its own, outside
  Django's pool. The server releases it the moment that connection ends, so a leader killed with SIGKILL, or cut
  off, is replaced as soon as a standby next tries (every ``retry`` seconds). The same connection LISTENs, so the
  leader is woken by NOTIFY (``wait``).
- SQLite (no advisory locks, no NOTIFY): a row (core.models.Lease) the leader renews; a standby takes it once it
  has expired, ``lease`` seconds after the last renewal. ``wait`` polls.

Leadership decides who runs cycles, not whether a cycle is safe: every cycle still takes the cycle lock and moves
each job with a conditional update (jobs.admission), so two leaders for a moment (a frozen SQLite leader that
wakes up after its lease passed) cannot over-commit a pool.
"""

from __future__ import annotations

import logging
import os
import time
from datetime import timedelta

import psycopg
from django.conf import settings
from django.db import DatabaseError, IntegrityError, connection, transaction
from django.db.models import Q
from django.utils import timezone

log = logging.getLogger(__name__)


class Leadership:
    """One candidate for ``name``; ``acquire`` and ``renew`` answer whether it leads now."""

    def acquire(self) -> bool:
        raise NotImplementedError

    def renew(self) -> bool:
        raise NotImplementedError

    def release(self) -> None:
        raise NotImplementedError

    def wait(self, timeout: float) -> bool:
        """Wait up to ``timeout`` seconds for a notification (True) or nothing (False)."""
        raise NotImplementedError


class AdvisoryLock(Leadership):
    """PostgreSQL: a session advisory lock on a dedicated connection, which also LISTENs on ``channel``."""

    def __init__(self, key: int, *, channel: str):
        self.key, self.channel = key, channel
        self.conn: psycopg.Connection | None = None
        self.leading = False

    def _connect(self) -> psycopg.Connection:
        db = settings.DATABASES["default"]
        conn = psycopg.connect(
            dbname=db["NAME"],
            user=db.get("USER") or None,
            password=db.get("PASSWORD") or None,
            host=db.get("HOST") or None,
            port=db.get("PORT") or None,
            autocommit=True,
            application_name=f"portal-leadership:{os.getpid()}",  # which process holds it, for operators
        )
        conn.execute(f"LISTEN {self.channel}")
        return conn

    def acquire(self) -> bool:
        try:
            if self.conn is None or self.conn.closed:
                self.leading = False
                self.conn = self._connect()
            row = self.conn.execute("SELECT pg_try_advisory_lock(%s)", [self.key]).fetchone()
        except psycopg.Error as exc:  # a database outage: not leading, try again later
            log.warning("leadership: the database does not answer (%s)", exc)
            self._drop()
            return False
        self.leading = bool(row and row[0])
        return self.leading

    def renew(self) -> bool:
        """Still leading while the lock's connection lives (the lock goes with it)."""
        if not self.leading or self.conn is None:
            return False
        try:
            self.conn.execute("SELECT 1")
        except psycopg.Error as exc:
            log.warning("leadership: lost the lock's connection (%s)", exc)
            self._drop()
            return False
        return True

    def release(self) -> None:
        self._drop()

    def wait(self, timeout: float) -> bool:
        if self.conn is None:
            time.sleep(timeout)
            return False
        try:
            woken = any(True for _ in self.conn.notifies(timeout=timeout, stop_after=1))
            if woken:  # the rest of a burst's notifications, so that they do not wake the next wait at once
                for _ in self.conn.notifies(timeout=0.001):
                    pass
            return woken
        except psycopg.Error as exc:
            log.warning("leadership: lost the lock's connection while waiting (%s)", exc)
            self._drop()
            return False

    def _drop(self) -> None:
        self.leading = False
        if self.conn is not None:
            try:
                self.conn.close()
            except psycopg.Error:  # already gone
                pass
        self.conn = None


class LeaseRow(Leadership):
    """SQLite: a core.models.Lease row, taken when expired and renewed by its holder."""

    def __init__(self, name: str, *, holder: str, lease_seconds: float, poll_seconds: float = 0.05, clock=None):
        self.name, self.holder, self.lease_seconds = name, holder, lease_seconds
        self.poll_seconds = poll_seconds
        self.clock = clock or timezone.now

    def _take(self, *, only_if_mine: bool) -> bool:
        from core.models import Lease

        now = self.clock()
        until = now + timedelta(seconds=self.lease_seconds)
        try:
            with transaction.atomic():
                mine = Q(holder=self.holder)
                rows = Lease.objects.filter(mine if only_if_mine else mine | Q(expires_at__lt=now), name=self.name)
                if rows.update(holder=self.holder, expires_at=until):
                    return True
                if only_if_mine:
                    return False
                Lease.objects.create(name=self.name, holder=self.holder, expires_at=until)
                return True
        except IntegrityError:  # another candidate created the row first
            return False
        except DatabaseError as exc:
            log.warning("leadership: the database does not answer (%s)", exc)
            return False

    def acquire(self) -> bool:
        return self._take(only_if_mine=False)

    def renew(self) -> bool:
        return self._take(only_if_mine=True)

    def release(self) -> None:
        from core.models import Lease

        try:
            Lease.objects.filter(name=self.name, holder=self.holder).delete()
        except DatabaseError as exc:
            log.warning("leadership: could not give the lease back (%s)", exc)

    def wait(self, timeout: float) -> bool:
        time.sleep(min(timeout, self.poll_seconds))
        return False


def leadership(name: str, key: int, *, holder: str, channel: str) -> Leadership:
    """The right kind of leadership for the default database."""
    if connection.vendor == "postgresql":
        return AdvisoryLock(key, channel=channel)
    return LeaseRow(name, holder=holder, lease_seconds=settings.PORTAL_SCHEDULER_LEASE_SECONDS)
