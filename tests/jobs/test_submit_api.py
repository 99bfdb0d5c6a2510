"""Submitting, listing, cancelling and cloning jobs through the REST API (no executor involved:
admission happens in the request, launching after commit, which these tests do not run)."""

import pytest

from accounts.models import Department
from clusters.models import Cluster, GpuPool, Storage
from jobs.models import Job
from quotas.models import Quota

MINIMAL = {
    "name": "digits",
    "department": "vision",
    "code_url": "https://git.example.com/team/repo.git",
    "command": "python train.py",
}


def submit(world, user, **fields):
    return world.api(user).post("/api/v1/jobs/", {**MINIMAL, **fields}, format="json")


def test_it_needs_only_a_name_a_code_url_and_a_command(world):
    response = submit(world, world.alice)
    assert response.status_code == 201, response.json()
    job = response.json()
    assert {
        k: job[k]
        for k in (
            "cluster",
            "image",
            "workers",
            "gpus_per_worker",
            "gpu_type",
            "priority",
            "tensorboard",
            "submitted_by",
            "department",
        )
    } == {
        "cluster": "local",
        "image": "python",
        "workers": 1,
        "gpus_per_worker": 1.0,
        "gpu_type": "sim",
        "priority": "normal",
        "tensorboard": True,
        "submitted_by": "alice",
        "department": "vision",
    }
    assert job["status"] == "admitted"
    assert job["placement"] == [{"worker": 0, "node": "local-sim-0", "gpus": [0], "gpu_fraction": None}]
    assert job["tensorboard_url"] == f"/tensorboard/{job['id']}/"
    assert job["logs_url"] == f"/api/v1/jobs/{job['id']}/logs/"
    events = world.api(world.alice).get(job["events_url"]).json()["results"]
    assert [(e["from_status"], e["to_status"], e["reason"]) for e in events] == [
        ("", "queued", "submitted"),
        ("queued", "admitted", "admitted"),
    ]
    assert events[1]["message"] == "Admitted: worker 0 on local-sim-0 GPU 0."


def test_it_reports_every_problem_of_a_submission_at_once(world):
    Storage.objects.create(department=Department.objects.get(slug="nlp"), name="corpora", local_path="/srv/c")
    body = {
        "name": "Bad_Name",
        "department": "vision",
        "code_url": "http://insecure.example.com/repo.git",
        "code_ref": "--upload-pack=evil",
        "command": "   ",
        "image": "cobol",
        "requirements": ["numpy==2.1.0", "numpy=1"],
        "workers": 0,
        "gpus_per_worker": 3.5,
        "gpu_type": "A100",
        "priority": "urgent",
        "mounts": [{"storage": "corpora", "path": "/data"}],
        "env": {"RANK": "3", "1BAD": "x", "SEED": "1"},
        "max_runtime_seconds": 0,
        "gpus": 2,
    }
    response = world.api(world.alice).post("/api/v1/jobs/", body, format="json")
    assert response.status_code == 400
    errors = response.json()
    assert set(errors) == {
        "name",
        "code_url",
        "code_ref",
        "command",
        "image",
        "requirements",
        "workers",
        "gpu_type",
        "priority",
        "mounts",
        "env",
        "max_runtime_seconds",
        "gpus",
    }
    assert errors["code_url"] == [
        "Code URLs with 'http://' are not accepted; use https://, ssh://, git:// or "
        "git@host:path (or a local path on this cluster)."
    ]
    assert errors["gpu_type"] == [
        "Department vision has no quota for 'A100' GPUs on cluster local; it has quota for: sim."
    ]
    assert errors["image"] == ["No image called 'cobol' in the catalogue; choose one of: python, pytorch, tensorflow."]
    assert errors["requirements"][0].startswith("Item 2 ('numpy=1') is not a valid pip requirement")
    assert errors["mounts"] == ["Mount 1: vision has no storage called 'corpora' (its storage: vision-datasets)."]
    assert errors["env"] == [
        "RANK is set by the portal for every job and cannot be overridden.",
        "'1BAD' is not a valid variable name (letters, digits and '_', not starting with a digit).",
    ]
    assert errors["gpus"] == ["Unknown field; did you mean 'gpus_per_worker'?"]
    assert Job.objects.count() == 0


def test_it_reports_type_errors_beside_the_other_fields_problems(world):
    response = submit(world, world.alice, workers="many", name="UPPER")
    assert response.status_code == 400
    assert response.json() == {
        "workers": ["A valid integer is required."],
        "name": ["Use lower-case letters, digits and '-', starting with a letter and not ending with '-'."],
    }


@pytest.mark.parametrize(
    "url",
    [
        "https://h/r.git",
        "ssh://git@h/r.git",
        "git://h/r.git",
        "git@github.com:team/repo.git",
        "file:///srv/repo",
        "/srv/repo",
    ],
)
def test_it_accepts_the_code_url_forms_the_cluster_allows(world, url):
    assert submit(world, world.alice, code_url=url).status_code == 201


def test_it_refuses_local_code_on_clusters_that_do_not_allow_it(world):
    cluster = Cluster.objects.create(name="prod", backend="kubernetes", settings={})
    pool = GpuPool.objects.create(cluster=cluster, gpu_type="A100", nodes=2, gpus_per_node=8)
    Quota.objects.create(department=Department.objects.get(slug="vision"), pool=pool, nominal=4)
    response = submit(world, world.alice, cluster="prod", code_url="file:///srv/repo")
    assert response.json()["code_url"] == [
        "cluster prod does not run code from local paths; use an https, ssh or git URL."
    ]
    response = submit(world, world.alice, cluster="prod", gpus_per_worker=0.5)
    assert response.json()["gpus_per_worker"] == [
        "local/sim GPUs are not shared: ask for whole GPUs (1 to 8).".replace("local/sim", "prod/A100")
    ]


@pytest.mark.parametrize(
    "gpus,field,message",
    [
        (
            9,
            "gpus_per_worker",
            "A worker runs on one node and local/sim nodes have 8 GPUs; ask for at most that many per worker and add workers instead.",
        ),
        (1.5, "gpus_per_worker", "Above 1, ask for a whole number of GPUs per worker."),
        (0.333, "gpus_per_worker", "Give a GPU fraction in hundredths, at least 0.05 (e.g. 0.25 or 0.5)."),
        (-1, "gpus_per_worker", "Ask for 0 or more GPUs per worker."),
    ],
)
def test_it_checks_gpus_per_worker_against_the_pool(world, gpus, field, message):
    assert submit(world, world.alice, gpus_per_worker=gpus).json() == {field: [message]}


def test_it_refuses_a_gang_larger_than_the_pool(world):
    response = submit(world, world.alice, workers=3, gpus_per_worker=4)
    assert response.json() == {"workers": ["3 workers x 4 GPUs = 12 GPUs, more than the 8 that local/sim has."]}


def test_it_accepts_fractional_and_cpu_only_workers(world):
    half = submit(world, world.alice, gpus_per_worker=0.5).json()
    assert half["placement"] == [{"worker": 0, "node": "local-sim-0", "gpus": [0], "gpu_fraction": 0.5}]
    cpu = submit(world, world.alice, gpus_per_worker=0, workers=2).json()
    assert [slot["gpus"] for slot in cpu["placement"]] == [[], []]


def test_it_mounts_only_the_departments_own_storage(world):
    job = submit(world, world.alice, mounts=[{"storage": "vision-datasets", "path": "/data", "read_only": True}]).json()
    assert job["mounts"] == [{"storage": "vision-datasets", "path": "/data", "read_only": True}]
    response = submit(world, world.bob, department="nlp", mounts=[{"storage": "vision-datasets", "path": "/data"}])
    assert response.json() == {
        "mounts": ["Mount 1: nlp has no storage called 'vision-datasets' (its storage: nlp-corpora)."]
    }


def test_it_refuses_departments_the_caller_is_not_in(world):
    response = submit(world, world.bob)  # bob is in nlp, not vision
    assert response.status_code == 400
    assert response.json() == {"department": ["You are not a member of a department called 'vision'."]}


def test_it_returns_the_first_job_for_a_repeated_idempotency_key(world):
    client = world.api(world.alice)
    first = client.post("/api/v1/jobs/", MINIMAL, format="json", HTTP_IDEMPOTENCY_KEY="abc-1")
    again = client.post("/api/v1/jobs/", MINIMAL, format="json", HTTP_IDEMPOTENCY_KEY="abc-1")
    assert (first.status_code, again.status_code) == (201, 200)
    assert first.json()["id"] == again.json()["id"]
    other_user = world.api(world.carol).post("/api/v1/jobs/", MINIMAL, format="json", HTTP_IDEMPOTENCY_KEY="abc-1")
    assert other_user.status_code == 201 and other_user.json()["id"] != first.json()["id"]
    assert Job.objects.count() == 2


def test_it_queues_what_does_not_fit_and_says_why(world):
    big = submit(world, world.alice, name="big", workers=1, gpus_per_worker=8).json()  # borrows nlp's idle 4
    waiting = submit(world, world.carol, name="next", gpus_per_worker=2).json()
    guaranteed = submit(world, world.bob, department="nlp", name="guaranteed").json()
    assert big["status"] == "admitted"
    waiting = world.api(world.carol).get(f"/api/v1/jobs/{waiting['id']}/").json()
    # nlp is furthest below its nominal, so its job comes first, and takes back what vision borrows
    assert (guaranteed["status"], guaranteed["pending_reason"], guaranteed["queue_position"]) == (
        "queued",
        "preemption_in_progress",
        1,
    )
    assert guaranteed["status_message"] == (
        f"Preempting #{big['id']} (vision, reclaim) to make room; it starts when they stop."
    )
    big = world.api(world.alice).get(f"/api/v1/jobs/{big['id']}/").json()
    assert big["status"] == "admitted" and big["status_message"].startswith(
        f"Preempted for job #{guaranteed['id']}: vision borrows GPUs that nlp's nominal guarantees."
    )
    # once the big job stops, vision is back under its nominal and the next job fits
    assert (waiting["pending_reason"], waiting["queue_position"]) == ("preemption_in_progress", 2)
    assert waiting["status_message"] == (
        f"Waiting for #{big['id']} to stop (grace period); then it starts. vision uses 8/4 local/sim GPUs (4 borrowed); "
        "this job needs 2 more and only 0 idle GPUs can be borrowed (others use or keep: nlp 1)."
    )  # nlp's 1: the GPU booked for the guaranteed job until it starts
    usage = world.api(world.alice).get("/api/v1/departments/vision/").json()["usage"][0]
    assert (usage["in_use"], usage["borrowed"], usage["pending"]) == (8.0, 4.0, 2.0)
    pools = world.api(world.alice).get("/api/v1/clusters/").json()["results"][0]["pools"]
    assert pools[0]["allocated"] == 8.0


def test_a_job_that_cannot_be_preempted_does_not_borrow(world):
    job = submit(world, world.alice, priority="high", gpus_per_worker=6).json()
    assert (job["status"], job["pending_reason"]) == ("queued", "quota_exhausted")
    assert "a job that cannot be preempted runs only within its department's nominal quota" in job["status_message"]


def test_cancelling_a_waiting_job_ends_it_and_a_finished_one_is_a_conflict(world):
    submit(world, world.alice, name="big", gpus_per_worker=8)
    waiting = submit(world, world.alice, name="waiting").json()
    response = world.api(world.carol).post(f"/api/v1/jobs/{waiting['id']}/cancel/")
    assert response.status_code == 200
    assert response.json()["status"] == "cancelled"
    assert response.json()["finished_at"] is not None
    again = world.api(world.alice).post(f"/api/v1/jobs/{waiting['id']}/cancel/")
    assert again.status_code == 409
    assert again.json() == {"detail": f"Job {waiting['id']} has already cancelled; there is nothing to cancel."}


def test_outsiders_cannot_see_or_touch_a_departments_jobs(world):
    job = submit(world, world.alice).json()
    bob = world.api(world.bob)
    for path in ("", "events/", "logs/"):
        assert bob.get(f"/api/v1/jobs/{job['id']}/{path}").status_code == 404
    assert bob.post(f"/api/v1/jobs/{job['id']}/cancel/").status_code == 404
    assert bob.post(f"/api/v1/jobs/{job['id']}/clone/", {}, format="json").status_code == 404
    assert bob.get("/api/v1/jobs/").json()["count"] == 0
    assert world.api(world.carol).get(f"/api/v1/jobs/{job['id']}/").status_code == 200  # same department
    assert world.api(world.admin).get("/api/v1/jobs/").json()["count"] == 1


def test_it_lists_newest_first_with_filters(world):
    submit(world, world.alice, name="one")
    submit(world, world.carol, name="two", command="python eval.py")
    submit(world, world.bob, department="nlp", name="three")
    client = world.api(world.admin)
    names = lambda query: [j["name"] for j in client.get(f"/api/v1/jobs/{query}").json()["results"]]  # noqa: E731
    assert names("") == ["three", "two", "one"]
    assert names("?department=vision") == ["two", "one"]
    assert names("?submitted_by=carol") == ["two"]
    assert names("?search=eval") == ["two"]
    assert names("?status=admitted") == ["three", "two", "one"]
    assert names("?status=queued,failed") == []


def test_it_clones_a_job_with_overrides(world):
    source = submit(world, world.alice, requirements=["numpy==2.1.0"], env={"SEED": "1"}).json()
    clone = world.api(world.carol).post(
        f"/api/v1/jobs/{source['id']}/clone/", {"workers": 2, "name": "digits-2"}, format="json"
    )
    assert clone.status_code == 201
    body = clone.json()
    assert (body["name"], body["workers"], body["requirements"], body["env"], body["submitted_by"]) == (
        "digits-2",
        2,
        ["numpy==2.1.0"],
        {"SEED": "1"},
        "carol",
    )
    bad = world.api(world.alice).post(f"/api/v1/jobs/{source['id']}/clone/", {"workers": 100}, format="json")
    assert bad.json() == {"workers": ["Use between 1 and 64 workers."]}


@pytest.mark.parametrize(("placement", "second_node"), [("binpack", "local-sim-0"), ("spread", "local-sim-1")])
def test_the_pools_placement_policy_decides_where_admission_puts_a_job(world, placement, second_node):
    """Each pool's policy (clusters.GpuPool.placement) is what the live cycle places with."""
    GpuPool.objects.filter(cluster__name="local", gpu_type="sim").update(nodes=2, gpus_per_node=4, placement=placement)
    Quota.objects.filter(department__slug="vision", pool__gpu_type="sim").update(nominal=8)
    first, second = (submit(world, world.alice, name=f"place-{i}").json() for i in range(2))
    assert first["placement"][0]["node"] == "local-sim-0"
    assert second["status"] == "admitted" and second["placement"][0]["node"] == second_node


def test_the_cluster_list_shows_each_pools_placement_policy(world):
    GpuPool.objects.filter(cluster__name="local").update(placement="fragmentation")
    clusters = world.api(world.alice).get("/api/v1/clusters/").json()
    local = next(c for c in clusters["results"] if c["name"] == "local")
    assert {pool["placement"] for pool in local["pools"]} == {"fragmentation"}
