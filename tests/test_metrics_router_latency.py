"""portal_router_latency_seconds_sum: the routers' exact sum of latencies (VariantStats.latency_seconds_sum), added
with the same flush as the buckets; the end-to-end case through uvicorn and a slow model server is in
tests/models_registry/test_router.py."""

from __future__ import annotations

import asyncio
from bisect import bisect_left

import pytest

from models_registry.models import ModelVersion, RegisteredModel
from serving import forwarding, traffic
from serving.models import Deployment, Variant, VariantStats
from tests.test_metrics import scrape, value

SUM, COUNT = "portal_router_latency_seconds_sum", "portal_router_latency_seconds_count"


@pytest.fixture
def variants(world, monkeypatch):
    """Variants a and b with empty stats; the router's flushes are queued and written afterwards on this thread, in
    the test's transaction (the ORM inside an event loop would use a connection of its own)."""
    model = RegisteredModel.objects.create(name="digits", department_id=world.alice.memberships.get().department_id)
    version = ModelVersion.objects.create(model=model, version=1, artifact_uri="file:///m.joblib")
    deployment = Deployment.objects.create(name="digits", department=model.department, model=model)
    found = {}
    for name in ("a", "b"):
        found[name] = Variant.objects.create(deployment=deployment, name=name, version=version, weight=50)
        VariantStats.objects.create(variant=found[name])
    monkeypatch.setattr(forwarding, "in_writer", queued)
    monkeypatch.setattr(forwarding, "_pending", {})
    return found


WRITES: list = []


async def queued(function, **kwargs):
    WRITES.append((function, kwargs))


def answered(latencies: dict[Variant, list[float]]) -> None:
    """The router counts these answers (ms) the way it counts a request's, flushes, and the flush is written."""

    async def run():
        for variant, many in latencies.items():
            for ms in many:
                forwarding.record(variant.pk, ms, error=False)
        await forwarding.stats_flush_now()

    asyncio.run(run())
    while WRITES:
        function, kwargs = WRITES.pop(0)
        function(**kwargs)


def latency(samples, variant: str) -> tuple[float, float]:
    labels = {"deployment": "digits", "variant": variant}
    return value(samples, SUM, **labels), value(samples, COUNT, **labels)


def test_the_sum_is_exact_not_derived_from_the_buckets(variants):
    a, b = variants["a"], variants["b"]
    assert bisect_left(traffic.LATENCY_BUCKETS_MS, 3.0) == bisect_left(traffic.LATENCY_BUCKETS_MS, 2.9)
    answered({a: [2.9, 3.2], b: [3.0, 3.0]})  # the same buckets, different latencies
    samples = scrape()
    assert latency(samples, "a") == (pytest.approx(0.0061), 2)
    assert latency(samples, "b") == (pytest.approx(0.006), 2)
    buckets = lambda name: sorted(  # noqa: E731
        (float(dict(key[1])["le"]), v)
        for key, v in samples.items()
        if key[0] == "portal_router_latency_seconds_bucket" and dict(key[1])["variant"] == name
    )
    assert buckets("a") == buckets("b")
    # Flushes add up: one more answer of 250 ms grows a's _sum by 0.25 s and its _count by one.
    answered({a: [250.0]})
    assert latency(scrape(), "a") == (pytest.approx(0.2561), 3)


def test_a_failed_flush_keeps_the_sum_for_the_next_one(variants, monkeypatch):
    a = variants["a"]

    async def away(function, **kwargs):
        raise ConnectionError("the database is away")

    monkeypatch.setattr(forwarding, "in_writer", away)
    answered({a: [40.0]})
    assert latency(scrape(), "a") == (0, 0)
    monkeypatch.setattr(forwarding, "in_writer", queued)
    answered({a: [60.0]})
    assert latency(scrape(), "a") == (pytest.approx(0.1), 2)


def test_answers_counted_before_the_sum_existed_add_nothing_to_it(variants):
    """Rows flushed before latency_seconds_sum: their answers stay in the buckets and _count, not in _sum (an
    estimate from the buckets would fall to the exact sum at the next flush: a counter reset to Prometheus)."""
    a = variants["a"]
    VariantStats.objects.filter(variant=a).update(latency_counts=traffic.observe(traffic.empty_histogram(), 500.0))
    assert latency(scrape(), "a") == (0, 1)
    answered({a: [20.0]})
    assert latency(scrape(), "a") == (pytest.approx(0.02), 2)
