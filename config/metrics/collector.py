"""The portal's metrics, built at every scrape from the database (selectors.py)."""

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


class PortalCollector(Collector):
    def collect(self):
        pools = selectors.pools()
        names = {pool.pk: [pool.cluster.name, pool.gpu_type] for pool in pools}
        slugs = selectors.department_slugs()

        def quota_labels(department_id: int, pool_id: int) -> list[str]:
            return [*names[pool_id], slugs[department_id]]

        total = GaugeMetricFamily("portal_gpus_total", "GPUs of the pool (nodes x GPUs per node).", labels=POOL)
        for pool in pools:
            total.add_metric(names[pool.pk], pool.total)
        yield total
        nominal = selectors.nominal_gpus()
        yield from _quota_gauges(nominal, selectors.gpus_held(), quota_labels)
        yield from _queue_gauges(nominal, selectors.queued_since(), quota_labels)
        yield from _event_counters(quota_labels, slugs)
        yield from _router_metrics(selectors.variant_stats())


def _quota_gauges(nominal, held, quota_labels):
    families = {
        "nominal": GaugeMetricFamily("portal_gpus_nominal", "GPUs guaranteed to the department (its quota's nominal).", labels=QUOTA),
        "allocated": GaugeMetricFamily("portal_gpus_allocated", "GPUs held by the department's admitted, starting and running jobs.", labels=QUOTA),
        "borrowed": GaugeMetricFamily("portal_gpus_borrowed", "GPUs the department holds above its nominal (idle capacity of others).", labels=QUOTA),
    }
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
    jobs = GaugeMetricFamily("portal_queue_jobs", "Jobs waiting for admission.", labels=QUOTA)
    oldest = GaugeMetricFamily("portal_queue_oldest_wait_seconds", "How long the longest-waiting queued job has waited.", labels=QUOTA)
    mean = GaugeMetricFamily("portal_queue_mean_wait_seconds", "Mean wait of the queued jobs so far.", labels=QUOTA)
    for key in sorted(set(nominal) | set(waits)):  # every quota, so an empty queue reads 0 rather than nothing
        jobs.add_metric(quota_labels(*key), len(waits.get(key, ())))
    for key, seconds in sorted(waits.items()):
        oldest.add_metric(quota_labels(*key), max(seconds))
        mean.add_metric(quota_labels(*key), sum(seconds) / len(seconds))
    yield from (jobs, oldest, mean)


def _event_counters(quota_labels, slugs):
    admissions = CounterMetricFamily("portal_admissions", "Admissions (a job's gang reserved and placed).", labels=QUOTA)
    for key, count in sorted(selectors.admissions().items()):
        admissions.add_metric(quota_labels(*key), count)
    yield admissions
    preemptions = CounterMetricFamily("portal_preemptions", "Preemptions by reason (reclaim, priority, service, move).",
                                      labels=[*QUOTA, "reason"])
    for (department_id, pool_id, reason), count in sorted(selectors.preemptions().items()):
        preemptions.add_metric([*quota_labels(department_id, pool_id), reason], count)
    yield preemptions
    finished = CounterMetricFamily("portal_jobs_finished", "Jobs that ended, by final status.", labels=["department", "status"])
    for (department_id, status), count in sorted(selectors.jobs_finished().items()):
        finished.add_metric([slugs[department_id], status], count)
    yield finished


def _router_metrics(rows):
    requests = CounterMetricFamily("portal_router_requests", "Requests the router sent to the variant.", labels=VARIANT)
    errors = CounterMetricFamily("portal_router_errors", "Requests to the variant that failed.", labels=VARIANT)
    # The routers keep bucket counts only, so there is no _sum: use histogram_quantile() on the buckets.
    latency = HistogramMetricFamily("portal_router_latency_seconds", "Latency of the variant's answers through the router.",
                                    labels=VARIANT)
    for stats in rows:
        labels = [stats.variant.deployment.name, stats.variant.name]
        requests.add_metric(labels, stats.requests)
        errors.add_metric(labels, stats.errors)
        counts = traffic.merge(stats.latency_counts, [])  # padded to the full histogram
        latency.add_metric(labels, list(zip(LATENCY_BOUNDS_S, accumulate(counts))), sum_value=None)
    yield from (requests, errors, latency)
