"""examples/digits through the portal (API, Celery worker, local executor): preempted by a reclaim, the job
resumes from PORTAL_CHECKPOINT_DIR and finishes, and only the GPU-time since its last checkpoint is lost."""

from __future__ import annotations

import json

import pytest

from demo.data import publish_example_repo
from jobs import running
from jobs.models import Job as PortalJob
from models_registry.selectors import job_run_dirs
from tests.examples.digits_harness import ROOT, assert_good_model
from tests.processes import Processes, wait_for


def wait_until(predicate, *, timeout: float, what: str, processes):
    """Poll, playing the periodic reconcile meanwhile (no beat runs here); on time-out show what the portal saw."""
    try:
        return wait_for(predicate, timeout=timeout, what=what, interval=0.5)
    except AssertionError as timed_out:
        for job in PortalJob.objects.order_by("pk"):
            print(
                job.pk,
                job.name,
                job.status,
                job.status_message,
                list(job.events.values_list("to_status", "reason", "message")),
            )
        print(processes.logs())
        pytest.fail(str(timed_out))


@pytest.mark.django_db(transaction=True)
def test_through_the_portal_a_job_preempted_by_a_reclaim_resumes_from_its_checkpoint(world, tmp_path):
    processes = Processes(tmp_path)
    processes.purge_broker()
    processes.worker()
    try:
        repo = publish_example_repo(source=ROOT / "examples" / "digits", target=tmp_path / "digits-repo")
        bob, alice = world.api(world.bob), world.api(world.alice)

        def submit(client, **fields):
            response = client.post("/api/v1/jobs/", {"code_url": repo, **fields}, format="json")
            assert response.status_code == 201, response.json()
            return response.json()["id"]

        def log(job_id) -> str:
            return bob.get(f"/api/v1/jobs/{job_id}/logs/").content.decode()

        def status(job_id) -> str:
            return PortalJob.objects.get(pk=job_id).status

        # nlp borrows all 8 GPUs with preemptible work; vision then takes 2 of its nominal back.
        borrower = submit(
            bob,
            name="digits-resume",
            department="nlp",
            gpus_per_worker=8,
            priority="low",
            command="python train.py --epochs 6 --sleep-per-epoch 2",
        )
        wait_until(
            lambda: "epoch 2/6" in log(borrower), timeout=600, what="two epochs of the borrower", processes=processes
        )
        claimant = submit(
            alice,
            name="claimant",
            department="vision",
            gpus_per_worker=2,
            command="python -c \"print('vision has its GPUs back')\"",
        )
        assert PortalJob.objects.get(pk=claimant).pending_reason == "preemption_in_progress"
        wait_until(
            lambda: status(claimant) == "succeeded", timeout=180, what="the claimant to run", processes=processes
        )
        wait_until(
            lambda: status(borrower) in ("succeeded", "failed", "cancelled"),
            timeout=300,
            what="the borrower to run again and end",
            processes=processes,
        )
    finally:
        processes.stop()

    job = PortalJob.objects.get(pk=borrower)
    assert job.status == "succeeded", job.status_message
    assert job.preemptions == 1
    last_log = log(borrower)  # the last run's
    assert "run 1 (resumed after a preemption)" in last_log  # PORTAL_RUN_INDEX=1, PORTAL_RESUMED=1
    assert "resumed from checkpoint" in last_log
    runs = job_run_dirs(job=job, executor_root=running.executor_for(job.cluster).root)
    first = json.loads((runs[0].output / "train-summary.json").read_text())
    last = json.loads((runs[-1].output / "train-summary.json").read_text())
    assert (first["run_index"], first["resumed"]) == (0, False) and first["epochs_this_run"] >= 2
    assert (last["run_index"], last["resumed"], last["epochs_total"]) == (1, True, 6)
    assert 0 < last["epochs_this_run"] < last["epochs_total"]
    assert f"trained {last['epochs_this_run']} epochs in this run, 6/6 in total" in last_log
    assert_good_model(runs[-1].output)
    # Lost: the GPU-time from the last checkpoint marker to the stop, not the whole first run.
    admitted = job.events.filter(to_status="admitted").order_by("id").first().time
    preempted = job.events.get(to_status="preempted")
    assert preempted.reason == "reclaim"
    assert "GPU-seconds lost since its last checkpoint at" in preempted.message
    whole_run = 8 * (preempted.time - admitted).total_seconds()
    assert 0 < job.lost_gpu_seconds < whole_run
    body = bob.get(f"/api/v1/jobs/{borrower}/").json()
    assert (body["preemptions"], body["lost_gpu_seconds"]) == (1, pytest.approx(job.lost_gpu_seconds))
