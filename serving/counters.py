"""Adding the routers' in-memory counters to VariantStats (serving/forwarding.py flushes them here, on its
writer thread): one locked read-modify-write per variant, variants removed meanwhile skipped.
"""

from __future__ import annotations

from django.db import transaction

from serving import traffic
from serving.models import Variant, VariantStats

# Added as they are, under the row's lock; latency_counts is merged bucket by bucket.
_SUMMED = ("requests", "errors", "latency_seconds_sum", "outcomes", "successes", "shadow_compared", "shadow_agreed")


def stats_flush(*, deltas: dict[int, dict]) -> None:
    """Add the routers' in-memory counters (variant id -> requests, errors, latency_counts, latency_seconds_sum,
    outcomes, successes, shadow_compared, shadow_agreed) to VariantStats; variants removed meanwhile are skipped."""
    live = set(Variant.objects.filter(pk__in=list(deltas)).values_list("pk", flat=True))
    for variant_id, delta in deltas.items():
        if variant_id not in live:
            continue
        with transaction.atomic():
            stats, _ = VariantStats.objects.select_for_update().get_or_create(variant_id=variant_id)
            for field in _SUMMED:
                setattr(stats, field, getattr(stats, field) + delta.get(field, 0))
            if any(delta.get("latency_counts") or ()):
                stats.latency_counts = traffic.merge(stats.latency_counts or [], delta["latency_counts"])
            stats.save()
