"""`python manage.py heartbeat`: the heartbeats of worker, beat, watcher and the scheduling cycle.

Without options it lists every heartbeat with its age. ``--check NAME`` is a liveness probe for the process
``NAME`` on this host (platform/kustomize): exit 0 while its heartbeat is at most ``--max-age`` seconds old,
1 with a sentence otherwise. When the database does not answer, liveness cannot be judged and the check passes
(with a warning): restarting a process helps nobody during a database outage.
"""

from __future__ import annotations

from django.core.management.base import BaseCommand, CommandError
from django.db import DatabaseError
from django.utils import timezone

from core import heartbeats
from core.models import Heartbeat


class Command(BaseCommand):
    help = "List the processes' heartbeats, or check one as a liveness probe (--check worker --max-age 60)."

    def add_arguments(self, parser):
        parser.add_argument("--check", choices=heartbeats.PROCESSES, help="exit 1 unless this host's NAME is alive")
        parser.add_argument(
            "--max-age", type=float, default=None, help="seconds (default PORTAL_HEALTH_MAX_AGE_SECONDS)"
        )

    def handle(self, *args, check=None, max_age=None, **options):
        if check is None:
            self.list()
            return
        limit = heartbeats.max_age(check) if max_age is None else max_age
        try:
            age = heartbeats.own_age(check)
        except DatabaseError as exc:
            self.stderr.write(
                f"The database does not answer ({type(exc).__name__}), so the {check}'s liveness cannot be "
                "judged; the check passes, since restarting it would not help."
            )
            return
        host = heartbeats.host()
        if age is None:
            raise CommandError(
                f"The {check} on {host} has never recorded a heartbeat: it has not started, or it cannot reach "
                "the database. See its log."
            )
        if age > limit:
            raise CommandError(
                f"The {check} on {host} last beat {age:.0f} s ago (more than {limit:.0f} s): it is frozen, "
                "dead or cut off from the broker. See its log; its supervisor restarts it."
            )
        self.stdout.write(f"{check} on {host}: alive, last beat {age:.1f} s ago")

    def list(self) -> None:
        now = timezone.now()
        rows = Heartbeat.objects.order_by("name", "host")
        if not rows:
            self.stdout.write("No heartbeat recorded yet.")
        for row in rows:
            age = (now - row.beat_at).total_seconds()
            state = "stale" if age > heartbeats.max_age(row.name) else "ok"
            self.stdout.write(f"{row.name:<17} {row.host:<30} pid {row.pid:<8} {age:8.1f} s ago  {state}")
