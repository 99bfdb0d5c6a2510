"""GET /metrics: Prometheus exposition of queue, capacity, admissions, preemptions, endings and the router."""

from __future__ import annotations

import ipaddress
import os
import subprocess
import sys
from collections import defaultdict
from datetime import timedelta
from pathlib import Path

import pytest
from django.db import DatabaseError, connection, transaction
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.urls import resolve
from django.utils import timezone
from prometheus_client import REGISTRY
from prometheus_client.core import CounterMetricFamily
from prometheus_client.parser import text_string_to_metric_families

from config.metrics.collector import FAMILIES, RENAMED
from config.metrics.selectors import ADMISSION_WAIT_BOUNDS_S
from jobs import lifecycle
from jobs.models import Job, JobEvent
from jobs.running import job_stop_on_executor
from jobs.transitions import job_transition
from models_registry.models import ModelVersion, RegisteredModel
from quotas.models import Quota
from serving import traffic
from serving.models import Deployment, Variant, VariantStats

JOB = {"name": "m", "code_url": "https://git.example.com/r.git", "command": "python train.py"}
SIM = {"cluster": "local", "gpu_type": "sim"}
ROOT = Path(__file__).resolve().parent.parent


def submit(world, user, department="vision", **fields) -> Job:
    response = world.api(user).post("/api/v1/jobs/", {**JOB, "department": department, **fields}, format="json")
    assert response.status_code == 201, response.json()
    return Job.objects.get(pk=response.json()["id"])


def scrape(client: Client | None = None, **headers) -> dict[tuple[str, tuple], float]:
    response = (client or Client()).get("/metrics", **headers)
    assert response.status_code == 200, response.content
    assert response["Content-Type"].startswith("text/plain; version=0.0.4")
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(response.content.decode())
        for sample in family.samples
    }


def value(samples, name, **labels) -> float:
    return samples[(name, tuple(sorted(labels.items())))]


@pytest.fixture
def busy(world):
    """vision borrowed 2 GPUs and had them reclaimed for nlp; plus a finished, a failed and a cancelled job."""
    borrower = submit(world, world.alice, gpus_per_worker=6)  # vision's nominal is 4 of the pool's 8
    reclaimer = submit(world, world.bob, department="nlp", gpus_per_worker=4)
    assert Job.objects.get(pk=borrower.pk).preempt_reason == "reclaim"
    job_stop_on_executor(job_id=borrower.pk)  # what the cancel task does: never launched, so re-queued at once
    assert Job.objects.get(pk=borrower.pk).status == lifecycle.QUEUED
    assert Job.objects.get(pk=reclaimer.pk).status == lifecycle.ADMITTED
    Quota.objects.filter(department__slug="nlp").update(borrowing_limit=0)
    small = submit(world, world.bob, department="nlp", name="waits", gpus_per_worker=1)
    assert small.status == lifecycle.QUEUED  # nlp holds its nominal 4 and may not borrow
    # The borrower waits since its re-queue, not since its submission an hour ago.
    Job.objects.filter(pk=borrower.pk).update(created_at=timezone.now() - timedelta(hours=1))
    JobEvent.objects.filter(job=small, to_status=lifecycle.QUEUED).update(time=timezone.now() - timedelta(seconds=600))
    for status in (lifecycle.SUCCEEDED, lifecycle.FAILED):
        done = submit(world, world.carol, name=status, gpus_per_worker=1)
        job_transition(job=done, to=status, reason=status)
    job_transition(job=submit(world, world.carol, gpus_per_worker=1), to=lifecycle.CANCELLED, reason="cancelled")
    return {"borrower": borrower, "reclaimer": reclaimer, "small": small}


def test_it_reports_capacity_quota_and_allocation(busy):
    samples = scrape()
    assert value(samples, "portal_pool_gpus", **SIM) == 8
    for department in ("vision", "nlp"):
        assert value(samples, "portal_quota_nominal_gpus", **SIM, department=department) == 4
    assert value(samples, "portal_allocated_gpus", **SIM, department="nlp") == 4
    assert value(samples, "portal_allocated_gpus", **SIM, department="vision") == 0
    assert value(samples, "portal_borrowed_gpus", **SIM, department="nlp") == 0


def test_it_counts_borrowed_gpus_above_nominal(world):
    submit(world, world.alice, gpus_per_worker=6)
    samples = scrape()
    assert value(samples, "portal_allocated_gpus", **SIM, department="vision") == 6
    assert value(samples, "portal_borrowed_gpus", **SIM, department="vision") == 2
    assert value(samples, "portal_queue_jobs", **SIM, department="vision") == 0  # an empty queue reads 0


def test_it_reports_the_queue_and_how_long_it_waited(busy):
    samples = scrape()
    assert value(samples, "portal_queue_jobs", **SIM, department="vision") == 1
    assert value(samples, "portal_queue_jobs", **SIM, department="nlp") == 1
    assert 600 <= value(samples, "portal_queue_oldest_wait_seconds", **SIM, department="nlp") < 660
    assert value(samples, "portal_queue_oldest_wait_seconds", **SIM, department="vision") < 60
    assert 600 <= value(samples, "portal_queue_mean_wait_seconds", **SIM, department="nlp") < 660


def test_it_counts_admissions_preemptions_and_endings_from_the_database(busy):
    samples = scrape()
    # vision: the borrower once, then succeeded, failed and cancelled jobs' admissions; nlp: the reclaimer
    assert value(samples, "portal_admissions_total", **SIM, department="vision") == 4
    assert value(samples, "portal_admissions_total", **SIM, department="nlp") == 1
    assert value(samples, "portal_preemptions_total", **SIM, department="vision", reason="reclaim") == 1
    assert not [key for key in samples if key[0] == "portal_preemptions_total" and ("department", "nlp") in key[1]]
    for status in ("succeeded", "failed", "cancelled"):
        assert value(samples, "portal_jobs_finished_total", department="vision", status=status) == 1
    # Another process (a worker) ends a job: the next scrape of any web process sees it.
    job_transition(job=Job.objects.get(pk=busy["reclaimer"].pk), to=lifecycle.SUCCEEDED, reason="succeeded")
    assert value(scrape(), "portal_jobs_finished_total", department="nlp", status="succeeded") == 1


@pytest.fixture
def routed(world):
    """A variant whose router counted 5 answers (0.5 ms, 3 ms twice, 250 ms, 90 s), one of them an error."""
    model = RegisteredModel.objects.create(name="digits", department_id=world.alice.memberships.get().department_id)
    version = ModelVersion.objects.create(model=model, version=1, artifact_uri="file:///m.joblib")
    deployment = Deployment.objects.create(name="digits", department=model.department, model=model)
    counts = traffic.empty_histogram()
    for ms in (0.5, 3.0, 3.0, 250.0, 90_000.0):
        traffic.observe(counts, ms)
    VariantStats.objects.create(
        variant=Variant.objects.create(deployment=deployment, name="a", version=version, weight=100),
        requests=5,
        errors=1,
        latency_counts=counts,
        latency_seconds_sum=90.2565,
    )
    return {"deployment": "digits", "variant": "a"}


def test_it_exposes_router_counters_and_the_latency_histogram(routed):
    samples, labels = scrape(), routed
    assert value(samples, "portal_router_requests_total", **labels) == 5
    assert value(samples, "portal_router_errors_total", **labels) == 1
    bucket = {
        float(dict(key[1])["le"]): v for key, v in samples.items() if key[0] == "portal_router_latency_seconds_bucket"
    }
    at_most = lambda seconds: bucket[min(le for le in bucket if le >= seconds)]  # noqa: E731
    assert (at_most(0.0005), at_most(0.003), at_most(0.25), at_most(60.0), bucket[float("inf")]) == (1, 3, 4, 4, 5)
    assert len(bucket) == len(traffic.LATENCY_BUCKETS_MS) + 1  # every bound, and +Inf: the count of answers
    assert value(samples, "portal_router_latency_seconds_count", **labels) == 5
    # _sum is the routers' exact sum, the 90 s answer at 90 s (tests/test_metrics_router_latency.py: from requests)
    assert value(samples, "portal_router_latency_seconds_sum", **labels) == pytest.approx(90.2565)


# What the portal's gauges and histograms count or measure, last in their names (counters end in _total).
UNITS = ("_gpus", "_jobs", "_seconds", "_bytes")


def exposition(**headers) -> str:
    response = Client().get("/metrics", **headers)
    assert response.status_code == 200, response.content
    return response.content.decode()


def sample(text: str, name: str, **labels) -> float:
    """One sample of an exposition; 0 when absent (a labelled counter appears at its first increment)."""
    found = [
        s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if s.name == name and s.labels == labels
    ]
    assert len(found) <= 1
    return found[0] if found else 0.0


def test_every_family_has_the_type_its_name_calls_for(busy, routed):
    """https://prometheus.io/docs/practices/naming/ and the histogram docs, over the whole exposition."""
    families = list(text_string_to_metric_families(exposition()))
    names = [family.name for family in families]
    assert len(names) == len(set(names))
    assert {name for _, name, _, _ in FAMILIES.values()} <= set(names)
    # The same endpoint and registry carry django-prometheus's HTTP and database metrics.
    django = {"django_http_requests_total_by_method", "django_db_execute", "django_db_query_duration_seconds"}
    assert django <= set(names)
    for family in families:
        kind, name = family.type, family.name
        assert kind != "summary" and all("quantile" not in s.labels for s in family.samples), name  # histograms only
        if kind == "gauge":
            assert not name.endswith("_total"), f"{name} is a gauge: _total is for counters"
        if kind == "counter":
            # The parser takes _total off a counter's name; its samples have it.
            assert not name.endswith("_total")
            assert {s.name for s in family.samples} <= {f"{name}_total", f"{name}_created"}, name
        if kind == "histogram":
            series: dict[tuple, dict[str, object]] = defaultdict(dict)
            for s in family.samples:
                key = tuple(sorted((k, v) for k, v in s.labels.items() if k != "le"))
                if s.name == f"{name}_bucket":
                    series[key].setdefault("buckets", []).append((float(s.labels["le"]), s.value))
                else:
                    series[key][s.name.removeprefix(name)] = s.value
            for key, parts in series.items():
                assert {"buckets", "_sum", "_count"} <= set(parts), (name, key, sorted(parts))
                bounds, counts = zip(*parts["buckets"])
                assert bounds[-1] == float("inf") and list(bounds) == sorted(bounds), (name, key)
                assert list(counts) == sorted(counts) and counts[-1] == parts["_count"], (name, key)
        if name.endswith("_info"):
            assert kind in {"gauge", "info"} and {s.value for s in family.samples} == {1.0}, name
        if name.startswith("portal_"):
            if kind in {"gauge", "histogram"}:
                assert name.endswith(UNITS), f"{name}: the unit goes last"
            if any(word in name for word in ("wait", "latency", "duration", "time")):
                assert name.endswith("_seconds"), f"{name}: durations are in seconds"
    assert not set(RENAMED) & set(names)  # the old names are gone, not served twice


def test_the_readme_lists_every_metric_and_every_renamed_one():
    readme = (ROOT / "README.md").read_text()
    section = readme[readme.index("\n## Metrics\n") :]
    section = section[: section.index("\n## ", 1)]
    for kind, name, _, _ in FAMILIES.values():
        assert f"`{name}_total`" in section if kind is CounterMetricFamily else f"`{name}`" in section, name
    for old, new in RENAMED.items():
        assert f"`{old}` -> `{new}`" in section


def test_a_request_shows_in_the_http_metrics(world):
    labels = {"view": resolve("/api/v1/jobs/").view_name, "method": "GET"}
    before = exposition()
    response = world.api(world.alice).get("/api/v1/jobs/")
    assert response.status_code == 200
    after = exposition()
    answered = "django_http_responses_total_by_status_view_method_total"
    assert sample(after, answered, status="200", **labels) == sample(before, answered, status="200", **labels) + 1
    timed = "django_http_requests_latency_seconds_by_view_method"
    assert sample(after, f"{timed}_count", **labels) == sample(before, f"{timed}_count", **labels) + 1
    assert sample(after, f"{timed}_sum", **labels) > sample(before, f"{timed}_sum", **labels)
    # The API request and the second scrape (counted as it comes in, before it answers).
    by_method = "django_http_requests_total_by_method_total"
    assert sample(after, by_method, method="GET") == sample(before, by_method, method="GET") + 2


def test_a_query_shows_in_the_database_metrics(db):
    labels = {"alias": "default", "vendor": connection.vendor}  # "sqlite" or "postgresql": the wrapped backend's

    def now(name: str, **more) -> float:
        return REGISTRY.get_sample_value(name, {**labels, **more}) or 0.0

    executed, timed = now("django_db_execute_total"), now("django_db_query_duration_seconds_count")
    assert not Job.objects.filter(name="nobody").exists()  # one query
    assert (now("django_db_execute_total"), now("django_db_query_duration_seconds_count")) == (executed + 1, timed + 1)

    def errors() -> float:  # by the driver's exception type: OperationalError (sqlite3), UndefinedTable (psycopg)
        return sum(
            s.value
            for metric in REGISTRY.collect()
            if metric.name == "django_db_errors"
            for s in metric.samples
            if s.name == "django_db_errors_total" and labels.items() <= s.labels.items()
        )

    failed = errors()
    with pytest.raises(DatabaseError), transaction.atomic(), connection.cursor() as cursor:
        cursor.execute("SELECT * FROM no_such_table")
    assert errors() == failed + 1
    text = exposition()  # the scrape shows them (its own queries may come after they are read)
    assert sample(text, "django_db_execute_total", **labels) >= executed + 2
    assert sample(text, "django_db_query_duration_seconds_count", **labels) >= timed + 2


def test_the_admission_wait_histogram_counts_admitted_jobs(busy, world):
    nlp, vision = {**SIM, "department": "nlp"}, {**SIM, "department": "vision"}
    waits = "portal_admission_wait_time_seconds"
    before = exposition()
    assert sample(before, f"{waits}_count", **nlp) == 1  # the reclaimer, admitted at once
    assert sample(before, f"{waits}_bucket", **nlp, le="1") == 1
    # The reclaimer ends; the next submission's cycle admits nlp's small job (queued 600 s ago) and vision's
    # borrower, re-queued after its preemption moments ago although submitted an hour ago.
    job_transition(job=Job.objects.get(pk=busy["reclaimer"].pk), to=lifecycle.SUCCEEDED, reason="succeeded")
    submit(world, world.carol, name="next", gpus_per_worker=1)
    assert {Job.objects.get(pk=busy[key].pk).status for key in ("small", "borrower")} == {lifecycle.ADMITTED}
    after = exposition()
    assert sample(after, f"{waits}_count", **nlp) == 2
    assert sample(after, f"{waits}_bucket", **nlp, le="600") == 1  # the small job waited a little over 600 s
    assert sample(after, f"{waits}_bucket", **nlp, le="1200") == 2
    assert 600 <= sample(after, f"{waits}_sum", **nlp) - sample(before, f"{waits}_sum", **nlp) < 660
    # The borrower and "next", both within a minute of their (re-)queueing.
    assert sample(after, f"{waits}_count", **vision) == sample(before, f"{waits}_count", **vision) + 2
    assert sample(after, f"{waits}_bucket", **vision, le="60") == sample(after, f"{waits}_count", **vision)
    assert sample(after, f"{waits}_sum", **vision) < 60
    for labels in (nlp, vision):  # one observation per admission: _count is the admissions counter
        assert sample(after, f"{waits}_count", **labels) == sample(after, "portal_admissions_total", **labels)
    assert [f"{bound:g}" for bound in ADMISSION_WAIT_BOUNDS_S] == [
        s.labels["le"]
        for s in next(f for f in text_string_to_metric_families(after) if f.name == waits).samples
        if s.name.endswith("_bucket") and s.labels["department"] == "nlp"
    ][:-1]


def test_a_wait_below_zero_counts_as_zero(world):
    job = submit(world, world.alice, gpus_per_worker=1)  # admitted at once
    # The admitting machine's clock a little behind the submitting one's.
    JobEvent.objects.filter(job=job, to_status=lifecycle.ADMITTED).update(time=job.created_at - timedelta(seconds=5))
    text, vision = exposition(), {**SIM, "department": "vision"}
    assert sample(text, "portal_admission_wait_time_seconds_bucket", **vision, le="1") == 1
    assert sample(text, "portal_admission_wait_time_seconds_sum", **vision) == 0


def test_a_scrape_costs_the_same_few_queries_however_many_jobs(busy, world):
    def queries() -> int:
        with CaptureQueriesContext(connection) as captured:
            scrape()
        return len(captured)

    few = queries()
    jobs = Job.objects.bulk_create(
        Job(
            name=f"old-{i}",
            department=busy["small"].department if i % 2 else busy["borrower"].department,
            cluster=busy["small"].cluster,
            pool=busy["small"].pool,
            submitted_by=world.bob,
            code_url="x",
            command="x",
            image=busy["small"].image,
            priority=busy["small"].priority,
            status=status,
        )
        for i, status in enumerate([lifecycle.SUCCEEDED, lifecycle.QUEUED, lifecycle.FAILED] * 100)
    )
    JobEvent.objects.bulk_create(JobEvent(job=job, time=timezone.now(), to_status=lifecycle.ADMITTED) for job in jobs)
    assert queries() == few <= 10
    assert value(scrape(), "portal_queue_jobs", **SIM, department="nlp") == 51


@pytest.fixture
def guarded(settings, db):
    settings.PORTAL_METRICS_TOKEN = "metrics-s3cret"
    settings.PORTAL_METRICS_ALLOW = [ipaddress.ip_network("10.0.0.0/8"), ipaddress.ip_network("::1/128")]


@pytest.mark.parametrize(
    ("address", "authorization", "status"),
    [
        ("10.1.2.3", None, 200),  # allowed network, no token
        ("::ffff:10.1.2.3", None, 200),  # the same, as a dual-stack socket reports it
        ("::1", None, 200),
        ("192.0.2.7", None, 403),  # any other network
        ("127.0.0.1", None, 403),  # loopback is only allowed by the default
        ("192.0.2.7", "Bearer metrics-s3cret", 200),  # the token opens it from anywhere
        ("192.0.2.7", "Bearer metrics-s3cre", 401),
        ("10.1.2.3", "Bearer wrong", 401),  # a wrong token is refused even from an allowed network
        ("192.0.2.7", "Token metrics-s3cret", 403),  # not a Bearer token: the network decides
    ],
)
def test_it_serves_only_allowed_networks_and_the_token(guarded, address, authorization, status):
    headers = {"HTTP_AUTHORIZATION": authorization} if authorization else {}
    response = Client(REMOTE_ADDR=address).get("/metrics", **headers)
    assert response.status_code == status
    if status == 200:
        assert b"portal_pool_gpus" in response.content
    else:
        assert b"portal_" not in response.content
    if status == 401:
        assert response["WWW-Authenticate"].startswith("Bearer")


def test_without_a_token_setting_no_token_is_accepted(settings, db):
    settings.PORTAL_METRICS_TOKEN = None
    assert Client(REMOTE_ADDR="192.0.2.7").get("/metrics", HTTP_AUTHORIZATION="Bearer ").status_code == 401
    assert Client(REMOTE_ADDR="192.0.2.7").get("/metrics").status_code == 403
    assert Client().get("/metrics").status_code == 200  # 127.0.0.1 is allowed by default


def test_it_speaks_openmetrics_when_asked(world):
    response = Client().get("/metrics", HTTP_ACCEPT="application/openmetrics-text; version=1.0.0")
    assert response["Content-Type"].startswith("application/openmetrics-text")
    assert response.content.rstrip().endswith(b"# EOF")


def test_the_bench_view_is_not_mounted_by_default(db):
    assert Client().get("/bench/bare").status_code == 404


def test_a_bad_network_stops_start_up_naming_the_setting(tmp_path):
    environ = {k: v for k, v in os.environ.items() if k not in {"DATABASE_URL", "REDIS_URL"}}
    environ.update(PORTAL_DATA_ROOT=str(tmp_path), PORTAL_METRICS_ALLOW="10.0.0.0/8,10.0.0.1/33")
    done = subprocess.run(
        [sys.executable, "manage.py", "check"], cwd=ROOT, env=environ, capture_output=True, text=True, timeout=120
    )
    assert done.returncode != 0
    assert "PORTAL_METRICS_ALLOW" in done.stderr and "10.0.0.1/33" in done.stderr
