"""GET /api/v1/usage/: GPU-hours from when jobs held GPUs (API.md "Usage and audit")."""

import csv
import io
from datetime import UTC, datetime, timedelta

import pytest
from django.contrib.auth import get_user_model
from django.utils import timezone

from accounts.models import Department, Membership
from clusters.models import GpuPool
from images.models import FrameworkImage
from jobs import usage as job_usage
from jobs.models import Job, JobEvent
from quotas.models import PriorityClass


def at(text: str) -> datetime:
    return datetime.fromisoformat(text).replace(tzinfo=UTC)


def held(user, department: str, *, gpus: float, runs: list[tuple[str, str | None]], ended: str = "succeeded") -> Job:
    """A job that held ``gpus`` GPUs during each run (start, end); the last run may still be going (end None).

    Every run but the last ended in preemption, as the scheduler records it.
    """
    pool = GpuPool.objects.get(gpu_type="sim")
    still_running = runs[-1][1] is None
    job = Job.objects.create(
        name="usage",
        department=Department.objects.get(slug=department),
        cluster=pool.cluster,
        pool=pool,
        submitted_by=user,
        code_url="https://git.example.com/r.git",
        command="python train.py",
        image=FrameworkImage.objects.get(name="python"),
        priority=PriorityClass.objects.get(name="normal"),
        workers=1,
        gpus_per_worker=gpus,
        status="running" if still_running else ended,
    )
    first = at(runs[0][0]) if isinstance(runs[0][0], str) else runs[0][0]
    Job.objects.filter(pk=job.pk).update(created_at=first - timedelta(minutes=5))
    events = [("", "queued", first - timedelta(minutes=5))]
    for index, (start, end) in enumerate(runs):
        start = at(start) if isinstance(start, str) else start
        events += [("queued", "admitted", start), ("admitted", "starting", start), ("starting", "running", start)]
        if end is None:
            continue
        end = at(end) if isinstance(end, str) else end
        if index < len(runs) - 1:
            events += [("running", "preempted", end), ("preempted", "queued", end)]
        else:
            events += [("running", ended, end)]
    JobEvent.objects.bulk_create(JobEvent(job=job, time=time, from_status=a, to_status=b) for a, b, time in events)
    if not still_running:
        Job.objects.filter(pk=job.pk).update(finished_at=events[-1][2])
    return job


def usage(world, user, **params):
    return world.api(user).get("/api/v1/usage/", params)


def test_it_counts_gpu_hours_per_day_splitting_a_run_across_midnight(world):
    held(world.alice, "vision", gpus=2, runs=[("2025-03-10 22:00", "2025-03-11 01:30")])
    held(world.carol, "vision", gpus=0.5, runs=[("2025-03-11 08:00", "2025-03-11 12:00")])
    response = usage(world, world.alice, **{"from": "2025-03-10", "to": "2025-03-12"})
    assert response.status_code == 200
    body = response.json()
    assert (body["from"], body["to"], body["group_by"]) == ("2025-03-10", "2025-03-12", "day")
    assert body["rows"] == [
        {"department": "vision", "day": "2025-03-10", "gpu_hours": 4.0},
        {"department": "vision", "day": "2025-03-11", "gpu_hours": 5.0},  # 2 x 1.5 h + 0.5 x 4 h
    ]
    assert body["gpu_hours"] == 9.0
    assert body["totals"] == [{"department": "vision", "gpu_hours": 9.0, "lost_gpu_hours": 0.0}]


def test_it_counts_only_the_part_inside_the_period(world):
    held(world.alice, "vision", gpus=1, runs=[("2025-03-09 20:00", "2025-03-12 06:00")])
    body = usage(world, world.alice, **{"from": "2025-03-10", "to": "2025-03-11"}).json()
    assert [(row["day"], row["gpu_hours"]) for row in body["rows"]] == [("2025-03-10", 24.0), ("2025-03-11", 24.0)]


def test_a_preempted_job_counts_what_each_run_used_and_not_the_wait_between(world):
    held(
        world.alice,
        "vision",
        gpus=4,
        runs=[("2025-03-10 10:00", "2025-03-10 10:45"), ("2025-03-10 12:00", "2025-03-10 13:00")],
    )
    body = usage(world, world.alice, **{"from": "2025-03-10", "to": "2025-03-10"}).json()
    assert body["rows"] == [{"department": "vision", "day": "2025-03-10", "gpu_hours": 7.0}]


def test_a_running_job_counts_up_to_now(world):
    now = at("2025-03-10 15:00")
    held(world.alice, "vision", gpus=2, runs=[("2025-03-10 12:30", None)])
    report = job_usage.usage_get(
        departments=Department.objects.filter(slug="vision"), start="2025-03-10", end="2025-03-10", now=now
    )
    assert report.rows() == [{"department": "vision", "day": "2025-03-10", "gpu_hours": 5.0}]
    later = job_usage.usage_get(
        departments=Department.objects.filter(slug="vision"),
        start="2025-03-10",
        end="2025-03-11",
        now=now + timedelta(hours=10),
    )
    assert later.rows() == [
        {"department": "vision", "day": "2025-03-10", "gpu_hours": 23.0},
        {"department": "vision", "day": "2025-03-11", "gpu_hours": 2.0},
    ]


def test_the_api_counts_a_running_job_up_to_the_time_of_the_request(world):
    held(world.alice, "vision", gpus=3, runs=[(timezone.now() - timedelta(hours=2), None)])
    body = usage(world, world.carol, group_by="user").json()
    assert body["rows"] == [{"department": "vision", "user": "alice", "gpu_hours": pytest.approx(6.0, abs=0.01)}]


def test_it_groups_by_user_and_by_gpu_type(world):
    held(world.alice, "vision", gpus=1, runs=[("2025-03-10 10:00", "2025-03-10 11:00")])
    held(world.alice, "vision", gpus=1, runs=[("2025-03-11 10:00", "2025-03-11 12:00")])
    held(world.carol, "vision", gpus=2, runs=[("2025-03-10 10:00", "2025-03-10 10:30")])
    period = {"from": "2025-03-01", "to": "2025-03-31"}
    by_user = usage(world, world.carol, group_by="user", **period).json()
    assert by_user["rows"] == [
        {"department": "vision", "user": "alice", "gpu_hours": 3.0},
        {"department": "vision", "user": "carol", "gpu_hours": 1.0},
    ]
    by_type = usage(world, world.carol, group_by="gpu_type", **period).json()
    assert by_type["rows"] == [{"department": "vision", "cluster": "local", "gpu_type": "sim", "gpu_hours": 4.0}]


def test_it_downloads_csv_with_a_header_row(world):
    held(world.alice, "vision", gpus=2, runs=[("2025-03-10 22:00", "2025-03-11 01:30")])
    response = usage(world, world.carol, format="csv", **{"from": "2025-03-10", "to": "2025-03-11"})
    assert response.status_code == 200
    assert response["Content-Type"].startswith("text/csv")
    assert response["Content-Disposition"] == 'attachment; filename="usage-all-day-2025-03-10-2025-03-11.csv"'
    rows = list(csv.reader(io.StringIO(response.content.decode())))
    assert rows == [
        ["department", "day", "gpu_hours"],
        ["vision", "2025-03-10", "4.0"],
        ["vision", "2025-03-11", "3.0"],
    ]
    by_type = usage(world, world.carol, format="csv", group_by="gpu_type", **{"from": "2025-03-10", "to": "2025-03-11"})
    assert by_type.content.decode().splitlines() == ["department,cluster,gpu_type,gpu_hours", "vision,local,sim,7.0"]


def test_csv_cells_never_start_a_spreadsheet_formula(world):
    sneaky = get_user_model().objects.create_user(username="+cmd", password=world.password)
    Membership.objects.create(user=sneaky, department=Department.objects.get(slug="vision"))
    held(sneaky, "vision", gpus=1, runs=[("2025-03-10 10:00", "2025-03-10 11:00")])
    response = usage(world, world.carol, format="csv", group_by="user", **{"from": "2025-03-10", "to": "2025-03-10"})
    assert response.content.decode().splitlines() == ["department,user,gpu_hours", "vision,'+cmd,1.0"]


@pytest.mark.parametrize(
    ("params", "field", "message"),
    [
        ({"from": "10/03/2025"}, "from", "'10/03/2025' is not a date; use YYYY-MM-DD, e.g. 2026-12-01."),
        ({"to": "2025-02-30"}, "to", "'2025-02-30' is not a date; use YYYY-MM-DD, e.g. 2026-12-01."),
        ({"from": "2025-03-12", "to": "2025-03-10"}, "from", "'from' (2025-03-12) is after 'to' (2025-03-10)."),
        ({"from": "2024-01-01", "to": "2025-03-10"}, "to", "Ask for at most 366 days at a time."),
        ({"group_by": "week"}, "group_by", "Group by day, user or gpu_type, not 'week'."),
    ],
)
def test_it_says_what_is_wrong_with_the_parameters(world, params, field, message):
    for extra in ({}, {"format": "csv"}):
        response = usage(world, world.alice, **params, **extra)
        assert response.status_code == 400
        assert response.json() == {field: [message]}


def test_it_names_every_bad_parameter_at_once(world):
    response = usage(world, world.alice, **{"from": "yesterday", "group_by": "team"})
    assert set(response.json()) == {"from", "group_by"}


def test_it_defaults_to_the_last_30_days_by_day(world):
    body = usage(world, world.alice).json()
    today = timezone.now().date()
    assert (body["from"], body["to"], body["group_by"]) == (str(today - timedelta(days=29)), str(today), "day")
    assert body["rows"] == [] and body["totals"] == [{"department": "vision", "gpu_hours": 0.0, "lost_gpu_hours": 0.0}]


def test_members_see_their_departments_and_outsiders_get_404(world):
    held(world.alice, "vision", gpus=1, runs=[("2025-03-10 10:00", "2025-03-10 11:00")])
    held(world.bob, "nlp", gpus=2, runs=[("2025-03-10 10:00", "2025-03-10 11:00")])
    period = {"from": "2025-03-10", "to": "2025-03-10"}
    assert [row["department"] for row in usage(world, world.alice, **period).json()["rows"]] == ["vision"]
    assert [row["department"] for row in usage(world, world.bob, **period).json()["rows"]] == ["nlp"]
    assert usage(world, world.bob, department="vision", **period).status_code == 404
    assert usage(world, world.carol, department="nlp", **period).status_code == 404
    assert usage(world, world.bob, department="no-such", **period).status_code == 404
    everything = usage(world, world.admin, **period).json()
    assert [(row["department"], row["gpu_hours"]) for row in everything["rows"]] == [("nlp", 2.0), ("vision", 1.0)]
    assert usage(world, world.admin, department="nlp", **period).json()["gpu_hours"] == 2.0


def test_anonymous_callers_get_401(world):
    assert world.api().get("/api/v1/usage/").status_code == 401
