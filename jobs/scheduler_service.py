"""The scheduler service (``manage.py run_scheduler``): the one process that runs scheduling cycles.

With PORTAL_SCHEDULER=service, requests do not schedule: a submission, a cancel, an ending or a quota change only
records a CycleRequest in its own transaction (jobs.admission.request_cycle; on PostgreSQL a NOTIFY too). Several
instances may run (make run starts one, platform/kustomize two); one leads (core/leases.py: a PostgreSQL advisory
lock, a lease row on SQLite) and the others wait to take over. The leader:

- runs a cycle when it takes the lead (a full re-read of the database: whatever happened while nobody led);
- waits for requests (woken by NOTIFY on PostgreSQL, polling the table on SQLite), then waits
  PORTAL_SCHEDULER_DELAY_MS more so that a burst of requests becomes one cycle, and runs it;
- runs a cycle at least every PORTAL_SCHEDULER_PERIOD_SECONDS without requests, for what only time changes (a
  loan's end, an estimate, a minimum runtime passed);
- deletes the requests it has handled: those it read before the cycle started, so a request committed during a
  cycle is handled by the next one, never lost;
- when the requests are all submissions and its last full cycle decided nothing, decides the new jobs alone on what
  that cycle kept (jobs.admission.service_cycle: an arrival cycle), after checking under the cycle lock that nothing
  else changed; otherwise, and at least every period, a full cycle.

Each full cycle is jobs.admission.scheduling_cycle: under the cross-process cycle lock, reading the database afresh and
moving each job with a conditional update, so no two cycles (two leaders for a moment included) can over-commit a
pool. A cycle that fails is logged and retried at the next wake-up; the requests stay.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from django.conf import settings
from django.db import DatabaseError, close_old_connections

from core import heartbeats
from core.leases import Leadership, leadership
from jobs import admission
from jobs.models import CycleRequest

log = logging.getLogger(__name__)

LEADER_NAME = "scheduler"
BATCH = 1_000  # requests read (and deleted) at most per cycle; the rest wait for the next one


@dataclass
class Timing:
    delay: float  # coalescing window after the first request, seconds
    period: float  # longest time between two cycles, seconds
    retry: float = 1.0  # a standby tries to take the lead this often, seconds
    renew: float = 1.0  # the leader renews its leadership this often, seconds
    heartbeat: float = 5.0  # the service's heartbeat (liveness probe), seconds

    @classmethod
    def from_settings(cls) -> Timing:
        lease = settings.PORTAL_SCHEDULER_LEASE_SECONDS
        return cls(
            delay=settings.PORTAL_SCHEDULER_DELAY_SECONDS,
            period=settings.PORTAL_SCHEDULER_PERIOD_SECONDS,
            retry=min(1.0, lease / 3),
            renew=min(1.0, lease / 3),
            heartbeat=settings.PORTAL_HEARTBEAT_SECONDS,
        )


def pending_requests() -> list[tuple[int, str, int | None]]:
    """(id, reason, job id) of the requests no cycle has handled yet, oldest first (at most BATCH)."""
    return list(CycleRequest.objects.order_by("pk").values_list("pk", "reason", "job_id")[:BATCH])


def arrivals(requests: list[tuple[int, str, int | None]]) -> list[int] | None:
    """The jobs the requests queued, when submissions are all they say happened; else None (a full cycle)."""
    if not requests or any(reason != "submitted" or job_id is None for _, reason, job_id in requests):
        return None
    return [job_id for _, _, job_id in requests if job_id is not None]


class SchedulerService:
    """One instance of the service: standby until it leads, then the loop above. ``run`` returns when ``stop`` is
    set (SIGTERM, SIGINT), giving the leadership back so that a standby takes over at once."""

    def __init__(
        self,
        *,
        lead: Leadership | None = None,
        timing: Timing | None = None,
        cycle: Callable[[], object] | None = None,
        clock: Callable[[], float] = time.monotonic,
        tidy: Callable[[], None] = close_old_connections,
        beat: Callable[[], None] = lambda: heartbeats.beat_safely(heartbeats.SCHEDULER),
    ):
        """``cycle``: what a cycle runs (default: jobs.admission.service_cycle with the requests it handles and the
        service's memory); ``tidy`` drops connections a database outage broke (tests, inside their transaction, pass a
        no-op); ``beat`` records the service's heartbeat."""
        self.holder = f"{socket.gethostname()}:{os.getpid()}"
        self.lead = lead or leadership(
            LEADER_NAME, admission.LEADER_LOCK_KEY, holder=self.holder, channel=admission.CHANNEL
        )
        self.timing = timing or Timing.from_settings()
        self.cycle = cycle or self._service_cycle
        self.memory = admission.ServiceMemory()
        self._handling: list[tuple[int, str, int | None]] = []  # the requests the cycle running now handles
        self.clock = clock
        self.tidy, self.beat = tidy, beat
        self.leading = False
        self.cycles = 0
        self._last_cycle = float("-inf")
        self._last_renew = float("-inf")
        self._last_beat = float("-inf")

    def run(self, stop: threading.Event) -> None:
        try:
            while not stop.is_set():
                self._beat()
                if not self.leading:
                    self._try_to_lead(stop)
                    continue
                self._lead_once(stop)
        finally:
            if self.leading:
                log.info("scheduler %s: stopping, giving the lead back", self.holder)
            self.lead.release()
            self.leading = False

    def _beat(self) -> None:
        now = self.clock()
        if now - self._last_beat >= self.timing.heartbeat:
            self.beat()
            self._last_beat = now

    def _try_to_lead(self, stop: threading.Event) -> None:
        self.tidy()
        if self.lead.acquire():
            self.leading = True
            self._last_renew = self.clock()
            log.info("scheduler %s: leading; a full cycle first", self.holder)
            self.memory.forget()
            self._run_cycle(pending_requests)  # whatever happened while nobody led
        else:
            stop.wait(self.timing.retry)

    def _lead_once(self, stop: threading.Event) -> None:
        now = self.clock()
        if now - self._last_renew >= self.timing.renew:
            if not self.lead.renew():
                log.warning("scheduler %s: lost the lead; standing by", self.holder)
                self.leading = False
                self.memory.forget()  # another leader may change anything meanwhile
                return
            self._last_renew = now
        due = self._last_cycle + self.timing.period
        wait = max(0.0, min(due - now, self.timing.renew, self.timing.heartbeat))
        self.lead.wait(wait)  # a NOTIFY (PostgreSQL) ends it early; the requests' rows say what to do
        if stop.is_set():
            return
        try:
            waiting = pending_requests()
        except DatabaseError as exc:
            log.warning("scheduler: cannot read the requests (%s)", exc)
            self.tidy()
            stop.wait(self.timing.retry)
            return
        if waiting:
            if self.timing.delay:
                stop.wait(self.timing.delay)  # the rest of a burst
            self._run_cycle(pending_requests)
        elif self.clock() >= due:
            self._run_cycle(lambda: [])

    def _run_cycle(self, requests: Callable[[], list[tuple[int, str, int | None]]]) -> None:
        """Read the requests, run one cycle, and delete what it handled (only after it succeeded)."""
        try:
            self._handling = handled = requests()
            self.cycle()
            self.cycles += 1
            if handled:
                CycleRequest.objects.filter(pk__in=[pk for pk, _, _ in handled]).delete()
        except Exception:
            log.exception("scheduler: the cycle failed; the requests stay for the next one")
            self.memory.forget()
            self.tidy()
        finally:
            self._last_cycle = self.clock()

    def _service_cycle(self) -> None:
        admission.service_cycle(self.memory, arrivals=arrivals(self._handling))
