"""What every process shares and that knows no concept: heartbeats (core/heartbeats.py)."""

from django.db import models


class Heartbeat(models.Model):
    """The last sign of life of one portal process (``name`` on ``host``), or of a recurring activity.

    worker, beat and watcher each refresh their own row from inside their process; ``scheduling-cycle`` is
    written by every scheduling cycle. A table, so that every process sees it on SQLite and on PostgreSQL,
    with or without Redis. ``/healthz`` reads the freshest row of each name; a process's liveness probe
    (``manage.py heartbeat --check``) reads its own host's.
    """

    name = models.CharField(max_length=40)
    host = models.CharField(max_length=255)
    pid = models.IntegerField(default=0)
    beat_at = models.DateTimeField()

    class Meta:
        constraints = [models.UniqueConstraint(fields=["name", "host"], name="core_heartbeat_name_host")]

    def __str__(self) -> str:
        return f"{self.name}@{self.host} {self.beat_at.isoformat()}"


class Lease(models.Model):
    """Who holds a leadership (``name``) until when: core/leases.py, where PostgreSQL's advisory locks do not exist.

    On SQLite the scheduler service's leader renews its row; another instance takes the lease over once
    ``expires_at`` passed without a renewal (a dead or frozen leader).
    """

    name = models.CharField(max_length=40, primary_key=True)
    holder = models.CharField(max_length=255)
    expires_at = models.DateTimeField()

    def __str__(self) -> str:
        return f"{self.name}: {self.holder} until {self.expires_at.isoformat()}"
