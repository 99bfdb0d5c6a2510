"""The queue, the quota what-if, and live quota usage through the REST API."""

from accounts.models import Department
from jobs.models import Job
from quotas.models import Quota

JOB = {"name": "q", "code_url": "https://git.example.com/r.git", "command": "python train.py"}


def submit(world, user, department="vision", **fields):
    response = world.api(user).post("/api/v1/jobs/", {**JOB, "department": department, **fields}, format="json")
    assert response.status_code == 201, response.json()
    return response.json()


def test_the_queue_lists_waiting_jobs_in_admission_order_with_reason_and_estimate(world):
    submit(world, world.alice, gpus_per_worker=8, max_runtime_seconds=3600)
    first = submit(world, world.bob, department="nlp", max_runtime_seconds=600)
    second = submit(world, world.carol, gpus_per_worker=2)
    queue = world.api(world.admin).get("/api/v1/queue/?cluster=local&gpu_type=sim").json()["results"]
    # vision still holds 8 GPUs (4 borrowed) until its job has stopped: nothing of it starts meanwhile
    assert [(j["id"], j["queue_position"], j["pending_reason"]) for j in queue] == [
        (first["id"], 1, "preemption_in_progress"),
        (second["id"], 2, "quota_exhausted"),
    ]
    assert queue[1]["status_message"].startswith(f"GPUs are being reclaimed for job #{first['id']} (nlp's nominal")
    assert queue[1]["estimated_start"] is not None  # at the latest when the 8-GPU job's hour is up
    assert [j["id"] for j in world.api(world.bob).get("/api/v1/queue/").json()["results"]] == [first["id"]]
    assert world.api(world.bob).get("/api/v1/queue/?gpu_type=A100").json()["count"] == 0


def test_a_bigger_quota_admits_waiting_jobs_at_once(world):
    submit(world, world.alice, gpus_per_worker=4)
    Quota.objects.filter(department__slug="nlp").update(lending_limit=0)
    waiting = submit(world, world.alice, gpus_per_worker=2)
    assert waiting["pending_reason"] == "quota_exhausted"
    body = [{"cluster": "local", "gpu_type": "sim", "nominal": 2, "lending_limit": 0}]
    assert world.api(world.admin).put("/api/v1/departments/nlp/quotas/", body, format="json").status_code == 200
    assert Job.objects.get(pk=waiting["id"]).status == "admitted"


def test_the_quota_preview_says_what_would_happen_and_changes_nothing(world):
    Quota.objects.filter(department__slug="nlp").update(lending_limit=0)
    submit(world, world.alice, gpus_per_worker=4)
    waiting = submit(world, world.alice, name="wants-more", gpus_per_worker=2)
    body = [{"cluster": "local", "gpu_type": "sim", "nominal": 6}]
    for user in (world.alice, world.carol):
        assert (
            world.api(user).post("/api/v1/departments/vision/quotas/preview/", body, format="json").status_code == 403
        )
    too_much = [{"cluster": "local", "gpu_type": "sim", "nominal": 7}]
    refused = world.api(world.admin).post("/api/v1/departments/vision/quotas/preview/", too_much, format="json")
    assert refused.status_code == 400 and "at most 4 can be nominal here" in refused.json()["quotas"][0]["nominal"][0]
    Quota.objects.filter(department__slug="nlp").update(nominal=2)
    preview = world.api(world.admin).post("/api/v1/departments/vision/quotas/preview/", body, format="json").json()
    assert preview == {
        "admitted": [{"id": waiting["id"], "name": "wants-more", "department": "vision"}],
        "preempted": [],
        "waiting": [],
    }
    assert Job.objects.get(pk=waiting["id"]).status == "queued"
    assert Quota.objects.get(department__slug="vision").nominal == 4


def test_a_department_shows_its_queueing_and_lost_gpu_seconds(world):
    body = world.api(world.alice).get("/api/v1/departments/vision/").json()
    assert (body["queueing"], body["lost_gpu_seconds"]) == ("best_effort", 0.0)
    Department.objects.filter(slug="vision").update(queueing="strict")
    assert world.api(world.alice).get("/api/v1/departments/vision/").json()["queueing"] == "strict"
