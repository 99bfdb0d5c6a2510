"""The job informer of a Kubernetes cluster: JobWatcher lists and watches the portal's job objects and their
pods and says which job changed, so that watch_clusters asks the executor (kubernetes.py) for its state at once
instead of at the next reconcile. No Django here.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable

from clusters.k8s import JOB_ID_LABEL, MANAGED_BY
from clusters.kube import Gone, Kube, KubeError
from jobs.executors.kubernetes import JOB_KINDS

log = logging.getLogger(__name__)


class JobWatcher:
    """List, then watch from the list's resourceVersion; re-list on 410 Gone; reconnect with backoff.

    Calls ``on_change(job_id)`` for every portal job whose object or pods changed (after a re-list: for
    every one listed, as changes during the gap are unknown). One thread per kind while ``run`` runs.
    """

    def __init__(
        self,
        kube: Kube,
        kinds: Iterable[tuple[str, str]] = (*JOB_KINDS, ("v1", "Pod")),
        *,
        on_change: Callable[[str], None],
        timeout_seconds: int = 60,
        backoff_seconds: float = 1,
        max_backoff_seconds: float = 60,
    ):
        self.kube, self.kinds, self.on_change = kube, tuple(kinds), on_change
        self.timeout, self.backoff, self.max_backoff = timeout_seconds, backoff_seconds, max_backoff_seconds
        self.lists = 0  # how many times a kind was (re-)listed, for tests and logs
        self._lock = threading.Lock()

    def run(self, stop: threading.Event) -> None:
        threads = [
            threading.Thread(target=self.run_kind, args=(api_version, kind, stop), daemon=True, name=f"watch-{kind}")
            for api_version, kind in self.kinds
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()

    def run_kind(self, api_version: str, kind: str, stop: threading.Event) -> None:
        selector = f"app.kubernetes.io/managed-by={MANAGED_BY},{JOB_ID_LABEL}"
        if kind == "Pod":
            selector = JOB_ID_LABEL
        version, failures = None, 0
        while not stop.is_set():
            try:
                if version is None:
                    items, version = self.kube.list(api_version, kind, labels=selector)
                    with self._lock:
                        self.lists += 1
                    for job_id in sorted({item["metadata"]["labels"][JOB_ID_LABEL] for item in items}):
                        self.on_change(job_id)
                for _, obj in self.kube.watch(
                    api_version, kind, labels=selector, resource_version=version, timeout_seconds=self.timeout
                ):
                    version = obj["metadata"].get("resourceVersion") or version
                    job_id = (obj["metadata"].get("labels") or {}).get(JOB_ID_LABEL)
                    if job_id:
                        self.on_change(job_id)
                    if stop.is_set():
                        return
                failures = 0
            except Gone:
                log.info("watch of %s expired: listing again", kind)
                version = None
            except KubeError as exc:
                if exc.status == 404 and kind != "Pod":
                    log.info("%s is not served by this cluster: not watched", kind)
                    return
                failures += 1
                delay = min(self.max_backoff, self.backoff * 2 ** (failures - 1))
                log.warning("watch of %s failed (%s); again in %.1f s", kind, exc.message, delay)
                stop.wait(delay)  # then watch on from the same version: a 410 says when a re-list is needed
