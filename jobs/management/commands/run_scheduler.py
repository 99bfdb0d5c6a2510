"""`python manage.py run_scheduler`: the scheduler service (jobs/scheduler_service.py).

Run one or more (make run starts one, platform/kustomize two): one leads and runs every scheduling cycle, the
others stand by and take over within seconds when it dies. Requests reach it only with PORTAL_SCHEDULER=service
(otherwise every request runs its own cycle and this process has nothing to do; it says so and still leads).
Stops on SIGTERM / SIGINT, giving the lead back at once.
"""

from __future__ import annotations

import logging
import signal
import threading

from django.conf import settings
from django.core.management.base import BaseCommand

from jobs.scheduler_service import SchedulerService

log = logging.getLogger(__name__)


class Command(BaseCommand):
    help = "Run the scheduler service: one leader runs the scheduling cycles, the others stand by."

    def handle(self, *args, **options):
        stop = threading.Event()
        for signum in (signal.SIGTERM, signal.SIGINT):
            signal.signal(signum, lambda *_: stop.set())
        if settings.PORTAL_SCHEDULER != "service":
            log.warning(
                "PORTAL_SCHEDULER=%s: requests run their own cycles; this service only adds the periodic ones",
                settings.PORTAL_SCHEDULER,
            )
        service = SchedulerService()
        log.info("scheduler %s: standing by for the lead", service.holder)
        service.run(stop)
        log.info("scheduler %s: stopped after %d cycles", service.holder, service.cycles)
