"""A job in the API as JobOutputSerializer writes it out (jobs/api.py) is what its DRF fields give: the same keys
in the same order and the same values, so the rendered JSON is the same bytes."""

import json
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest
from django.utils import timezone
from django.utils.dateparse import parse_datetime
from rest_framework import serializers
from rest_framework.renderers import JSONRenderer

from jobs.api import JobOutputSerializer
from jobs.models import Job

from .test_submit_api import MINIMAL, submit


def _drf(job: Job) -> dict:
    """What DRF's field machinery gives for the declared fields."""
    return serializers.ModelSerializer.to_representation(JobOutputSerializer(), job)


def _same(job: Job) -> None:
    lean, drf = JobOutputSerializer(job).data, _drf(job)
    assert list(lean) == list(drf)
    assert lean == drf
    assert JSONRenderer().render(lean) == JSONRenderer().render(drf)


@pytest.mark.parametrize("zone", [None, "Asia/Kolkata", "America/New_York"])
def test_the_written_out_job_is_what_the_drf_fields_give(world, zone):
    job = Job.objects.get(pk=submit(world, world.alice).json()["id"])
    _same(job)  # a fresh one, as a submission answers it
    now = timezone.now()
    job.requirements = ["numpy==2.1.0", "torch"]
    job.env = {"SEED": "1", "EMPTY": ""}
    job.mounts = [
        {"storage": "data", "path": "/data", "read_only": True},
        {"storage": "scratch", "path": "/scratch", "read_only": False},
        {"storage": "old", "path": "/old"},  # written before read_only was stored
    ]
    job.placement = [
        {"worker": 0, "node": "n0", "gpus": [0, 1]},
        {"worker": 1, "node": "n1", "gpus": [2], "gpu_fraction": 0.25},
        {"worker": 2, "node": "n2", "gpus": [], "gpu_fraction": None},
    ]
    job.tensorboard = False
    job.max_runtime_seconds = 3600
    job.queue_position = 3
    job.exit_code = -9
    job.admitted_at = datetime(2026, 1, 2, 3, 4, 5, 123456, tzinfo=UTC)
    job.started_at = job.admitted_at + timedelta(seconds=1)
    job.finished_at = job.started_at + timedelta(hours=2)
    job.files_removed_at = now
    job.estimated_start = now - timedelta(hours=1)  # shown as now at the earliest
    job.latest_start = now + timedelta(days=2)
    job.gpu_seconds = 7200
    job.lost_gpu_seconds = 12.5
    job.preemptions = 2
    job.save()
    with timezone.override(ZoneInfo(zone) if zone else timezone.get_default_timezone()):
        listed = world.api(world.alice).get("/api/v1/jobs/").json()["results"]
        job = Job.objects.select_related("department", "cluster", "pool", "image", "priority", "submitted_by").get(
            pk=job.pk
        )
        lean, drf = JobOutputSerializer(job).data, _drf(job)
        # "Not earlier than now" reads the clock: the answers may be a moment apart, nothing else.
        starts = [parse_datetime(answer.pop("estimated_start")) for answer in (lean, drf, listed[0])]
        assert max(starts) - min(starts) < timedelta(seconds=5)
        assert len({start.utcoffset() for start in starts}) == 1
        assert list(lean) == list(drf) and lean == drf
        # The list loads only the columns the answer needs (jobs.api.JOB_OUTPUT_COLUMNS), and answers the same.
        assert listed[0] == json.loads(JSONRenderer().render(drf))
        job.estimated_start = None
        _same(job)


def test_a_page_of_jobs_costs_the_same_queries_however_many_jobs(world, django_assert_num_queries):
    client = world.api(world.alice)
    client.post("/api/v1/jobs/", MINIMAL, format="json")
    client.get("/api/v1/jobs/")
    # token, roles, count, the page with its related rows, its submitters (jobs.selectors.jobs_page_for)
    with django_assert_num_queries(5):
        one = client.get("/api/v1/jobs/").json()
    for _ in range(3):
        client.post("/api/v1/jobs/", MINIMAL, format="json")
    with django_assert_num_queries(5):
        four = client.get("/api/v1/jobs/").json()
    assert (one["count"], four["count"]) == (1, 4)
