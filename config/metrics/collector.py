"""The portal's metrics, built at every scrape from the database (selectors.py).

Names follow https://prometheus.io/docs/practices/naming/: the unit last and plural (``_gpus``, ``_jobs``,
``_seconds``), ``_total`` only on counters (prometheus_client adds it to a counter's samples), histograms with
their ``_bucket``, ``_sum`` and ``_count``. RENAMED lists the names of earlier releases.
"""

from __future__ import annotations

from collections import defaultdict
from itertools import accumulate

from django.utils import timezone
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily
from prometheus_client.registry import Collector

from config.metrics import selectors
from serving import traffic

POOL = ["cluster", "gpu_type"]
QUOTA = ["cluster", "gpu_type", "department"]
VARIANT = ["deployment", "variant"]
# traffic.LATENCY_BUCKETS_MS are upper bounds with counts[i] in (bound[i-1], bound[i]]: Prometheus' "le"
# buckets exactly; the one count more is "over 60 s" (+Inf).
LATENCY_BOUNDS_S = [f"{ms / 1000:g}" for ms in traffic.LATENCY_BUCKETS_MS] + ["+Inf"]
ADMISSION_WAIT_BOUNDS_S = selectors.ADMISSION_WAIT_BOUNDS_S

# Families: (kind, name, help, labels). A counter's name is without _total: its samples get it.
FAMILIES = {
    "pool": (GaugeMetricFamily, "portal_pool_gpus", "GPUs of the pool (nodes x GPUs per node).", POOL),
    "nominal": (
        GaugeMetricFamily,
        "portal_quota_nominal_gpus",
        "GPUs guaranteed to the department (its quota's nominal).",
        QUOTA,
    ),
    "allocated": (
        GaugeMetricFamily,
        "portal_allocated_gpus",
        "GPUs held by the department's admitted, starting and running jobs.",
        QUOTA,
    ),
    "borrowed": (
        GaugeMetricFamily,
        "portal_borrowed_gpus",
        "GPUs the department holds above its nominal (idle capacity of others).",
        QUOTA,
    ),
    "queued": (GaugeMetricFamily, "portal_queue_jobs", "Jobs waiting for admission.", QUOTA),
    "oldest": (
        GaugeMetricFamily,
        "portal_queue_oldest_wait_seconds",
        "How long the longest-waiting queued job has waited so far.",
        QUOTA,
    ),
    "mean": (GaugeMetricFamily, "portal_queue_mean_wait_seconds", "Mean wait so far of the jobs still queued.", QUOTA),
    "admissions": (CounterMetricFamily, "portal_admissions", "Admissions (a job's gang reserved and placed).", QUOTA),
    "waits": (
        HistogramMetricFamily,
        "portal_admission_wait_time_seconds",
        (
            "How long admitted jobs waited: from the job's submission, or its re-queue after a preemption, to its "
            "admission. One observation per admission."
        ),
        QUOTA,
    ),
    "preemptions": (
        CounterMetricFamily,
        "portal_preemptions",
        "Preemptions by reason (reclaim, priority, service, move).",
        [*QUOTA, "reason"],
    ),
    "finished": (
        CounterMetricFamily,
        "portal_jobs_finished",
        "Jobs that ended, by final status.",
        ["department", "status"],
    ),
    "requests": (CounterMetricFamily, "portal_router_requests", "Requests the router sent to the variant.", VARIANT),
    "errors": (CounterMetricFamily, "portal_router_errors", "Requests to the variant that failed.", VARIANT),
    "latency": (
        HistogramMetricFamily,
        "portal_router_latency_seconds",
        (
            "Latency of the variant's answers through the router. _sum is the exact sum of the latencies, "
            "counted from the release that added it on: answers counted before are in the buckets and _count "
            "but add nothing to _sum."
        ),
        VARIANT,
    ),
}

# Old name -> new name, for dashboards (README "Metrics").
RENAMED = {
    "portal_gpus_total": "portal_pool_gpus",
    "portal_gpus_nominal": "portal_quota_nominal_gpus",
    "portal_gpus_allocated": "portal_allocated_gpus",
    "portal_gpus_borrowed": "portal_borrowed_gpus",
}


def family(key: str):
    kind, name, documentation, labels = FAMILIES[key]
    return kind(name, documentation, labels=labels)


class PortalCollector(Collector):
    def describe(self):
        # The names without a database read: the registry checks them against its other collectors'.
        return [family(key) for key in FAMILIES]

    def collect(self):
        pools = selectors.pools()
        names = {pool.pk: [pool.cluster.name, pool.gpu_type] for pool in pools}
        slugs = selectors.department_slugs()

        def quota_labels(department_id: int, pool_id: int) -> list[str]:
            return [*names[pool_id], slugs[department_id]]

        capacity = family("pool")
        for pool in pools:
            capacity.add_metric(names[pool.pk], pool.total)
        yield capacity
        nominal = selectors.nominal_gpus()
        yield from _quota_gauges(nominal, selectors.gpus_held(), quota_labels)
        yield from _queue_gauges(nominal, selectors.queued_since(), quota_labels)
        yield from _admissions(selectors.admissions(), quota_labels)
        yield from _event_counters(quota_labels, slugs)
        yield from _router_metrics(selectors.variant_stats())


def _quota_gauges(nominal, held, quota_labels):
    families = {key: family(key) for key in ("nominal", "allocated", "borrowed")}
    for key in sorted(set(nominal) | set(held)):
        labels = quota_labels(*key)
        families["nominal"].add_metric(labels, nominal.get(key, 0))
        families["allocated"].add_metric(labels, held.get(key, 0.0))
        families["borrowed"].add_metric(labels, max(0.0, held.get(key, 0.0) - nominal.get(key, 0)))
    yield from families.values()


def _queue_gauges(nominal, queued, quota_labels):
    now = timezone.now()
    waits: dict[tuple[int, int], list[float]] = defaultdict(list)
    for department_id, pool_id, since in queued:
        waits[(department_id, pool_id)].append(max(0.0, (now - since).total_seconds()))
    jobs, oldest, mean = family("queued"), family("oldest"), family("mean")
    for key in sorted(set(nominal) | set(waits)):  # every quota, so an empty queue reads 0 rather than nothing
        jobs.add_metric(quota_labels(*key), len(waits.get(key, ())))
    for key, seconds in sorted(waits.items()):
        oldest.add_metric(quota_labels(*key), max(seconds))
        mean.add_metric(quota_labels(*key), sum(seconds) / len(seconds))
    yield from (jobs, oldest, mean)


def _admissions(rows: dict[selectors.Key, selectors.Waits], quota_labels):
    """The admissions counter and the wait histogram, from the same rows: its _count is the counter."""
    admissions, waits = family("admissions"), family("waits")
    bounds = [f"{seconds:g}" for seconds in ADMISSION_WAIT_BOUNDS_S] + ["+Inf"]
    for key, row in sorted(rows.items()):
        labels = quota_labels(*key)
        admissions.add_metric(labels, row.count)
        waits.add_metric(labels, list(zip(bounds, [*row.at_most, row.count])), sum_value=row.seconds)
    yield from (admissions, waits)


def _event_counters(quota_labels, slugs):
    preemptions = family("preemptions")
    for (department_id, pool_id, reason), count in sorted(selectors.preemptions().items()):
        preemptions.add_metric([*quota_labels(department_id, pool_id), reason], count)
    yield preemptions
    finished = family("finished")
    for (department_id, status), count in sorted(selectors.jobs_finished().items()):
        finished.add_metric([slugs[department_id], status], count)
    yield finished


def _router_metrics(rows):
    """_sum is VariantStats.latency_seconds_sum, the routers' exact sum. Rows counted before it existed keep
    those answers in their buckets and _count only: an estimate from the buckets for them would be replaced by
    the much smaller exact sum at their first flush, and a counter that goes down reads as a reset."""
    requests, errors, latency = family("requests"), family("errors"), family("latency")
    for stats in rows:
        labels = [stats.variant.deployment.name, stats.variant.name]
        requests.add_metric(labels, stats.requests)
        errors.add_metric(labels, stats.errors)
        counts = traffic.merge(stats.latency_counts, [])  # padded to the full histogram
        buckets = list(zip(LATENCY_BOUNDS_S, accumulate(counts)))
        latency.add_metric(labels, buckets, sum_value=stats.latency_seconds_sum)
    yield from (requests, errors, latency)
