"""`python manage.py watch_clusters`: follow every Kubernetes cluster's jobs as they change.

One JobWatcher (list + watch, re-list on 410) per cluster with the kubernetes backend. A change to a
job's object or pods polls that job through the executor and applies the state with
``jobs.services.job_observe``, so the portal hears of starts and endings at once instead of at the next
reconcile tick (which stays the safety net: it also catches what a watcher missed while it was down).
Stops on SIGTERM / SIGINT.
"""

from __future__ import annotations

import logging
import signal
import threading
from functools import partial

from django.conf import settings
from django.core.management.base import BaseCommand
from django.db import close_old_connections

from clusters import health
from clusters.errors import ExecutorError
from clusters.kube import Kube
from clusters.models import Cluster
from clusters.services import cluster_health, cluster_settings
from core import heartbeats
from jobs import lifecycle
from jobs.executors.k8s_watch import JobWatcher
from jobs.executors.kubernetes import KubernetesExecutor
from jobs.models import Job
from jobs.running import job_observe

log = logging.getLogger(__name__)


class Command(BaseCommand):
    help = "Watch the jobs on every Kubernetes cluster and record their state changes at once."

    def add_arguments(self, parser):
        parser.add_argument("--cluster", action="append", default=[], help="only this cluster (repeatable)")

    def handle(self, *args, **options):
        stop = threading.Event()
        for signum in (signal.SIGTERM, signal.SIGINT):
            signal.signal(signum, lambda *_: stop.set())
        clusters = Cluster.objects.filter(backend=Cluster.Backend.KUBERNETES)
        if options["cluster"]:
            clusters = clusters.filter(name__in=options["cluster"])
        lock = threading.Lock()  # one observation at a time: they write jobs and run admission
        threads = []
        for cluster in clusters:
            if cluster_health(cluster).reason == health.RENDERING_ONLY:  # never connected to (clusters/health.py)
                continue
            try:
                kube = Kube.from_settings(cluster.settings)
                executor = KubernetesExecutor(kube, cluster_settings(cluster))
            except ExecutorError as exc:  # one misconfigured cluster must not stop the others being watched
                log.warning("cluster %s is not watched: %s", cluster.name, exc.message)
                continue
            watcher = JobWatcher(kube, on_change=partial(observe, cluster, executor, lock))
            threads.append(
                threading.Thread(target=watcher.run, args=(stop,), name=f"watch-{cluster.name}", daemon=True)
            )
        if not threads:
            # Stay up (idle) rather than exit: process managers (supervisord, Kubernetes) treat an exit as a crash.
            self.stderr.write("No Kubernetes cluster to watch; idle until stopped (restart after adding one).")
            beat_while(stop, threads)
            return
        for thread in threads:
            thread.start()
        self.stdout.write(f"Watching {len(threads)} cluster(s).")
        beat_while(stop, threads)
        for thread in threads:
            thread.join(90)


def beat_while(stop: threading.Event, threads: list[threading.Thread]) -> None:
    """Until stopped, refresh the watcher's heartbeat (core/heartbeats.py) while every watch thread lives: a
    frozen watcher, or one whose watch died, goes stale on /healthz and fails its liveness probe."""
    heartbeats.beat_safely(heartbeats.WATCHER)
    while not stop.wait(settings.PORTAL_HEARTBEAT_SECONDS):
        if all(thread.is_alive() for thread in threads):
            heartbeats.beat_safely(heartbeats.WATCHER)
        else:
            log.error("a cluster watch thread has died; the heartbeat stops so that the watcher is restarted")


def observe(cluster: Cluster, executor: KubernetesExecutor, lock: threading.Lock, run_id: str) -> None:
    """Poll one job that changed on ``cluster`` and apply what the executor reports."""
    with lock:
        close_old_connections()
        try:
            job = Job.objects.filter(cluster=cluster, run_id=run_id, status__in=lifecycle.HOLDS_GPUS).first()
            if job is None or job.launched_at is None:
                return  # not ours, ended already, or its launch is still being recorded
            state = executor.poll([run_id]).get(run_id)
            if state is not None:  # gone: the reconcile decides between cancelled and lost
                job_observe(job=job, state=state)
        except ExecutorError as exc:
            log.warning("cluster %s: could not poll job %s: %s", cluster.name, run_id, exc.message)
        except Exception:  # one bad observation must not stop the watcher
            log.exception("cluster %s: observing job %s failed", cluster.name, run_id)
        finally:
            close_old_connections()
