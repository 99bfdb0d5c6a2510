"""portalctl's job commands against the real portal (conftest.py): submit, follow, list, get, logs, queue and
cancel, and a job's model registered and deployed from the command line."""

from __future__ import annotations

import re

import pytest

from accounts.tokens import token_create
from jobs import running
from jobs.models import Job
from quotas.models import Quota
from serving.models import Deployment
from tests.portalctl.cli_harness import REMOTE, copy_when_registered, finished, launch_when_submitted


@pytest.mark.django_db(transaction=True)
def test_it_drives_a_job_from_submit_to_logs_to_a_deployment(world, cli, repo):
    following = cli.start(
        "submit",
        "--name",
        "digits",
        "--code-url",
        repo,
        "--gpus",
        "1",
        "--env",
        "SEED=1",
        "--no-tensorboard",
        "--follow",
        "--",
        "python",
        "train.py",
        "--epochs",
        "2",
    )
    job_id = launch_when_submitted("digits")
    code, out, err = finished(following)
    assert code == 0, err
    assert "epoch 1 loss 0.5" in out and "saved model.joblib" in out  # stdout is the job's log
    assert f"job {job_id} digits submitted: " in err and f"job {job_id} succeeded (exit code 0)" in err
    job = Job.objects.get(pk=job_id)
    assert (job.department.slug, job.command, job.env, job.tensorboard) == (
        "vision",
        "python train.py --epochs 2",
        {"SEED": "1"},
        False,
    )  # alice's only department by default

    listing = cli("list")
    assert listing.returncode == 0
    header, row = listing.stdout.splitlines()[:2]
    assert header.split() == ["ID", "NAME", "DEPARTMENT", "STATUS", "GPUS", "USER", "AGE"]
    assert row.split()[:6] == [str(job_id), "digits", "vision", "succeeded", "1x1", "alice"]
    assert row.index("succeeded") == header.index("STATUS")  # aligned columns

    shown = cli("get", job_id, "--events").stdout
    assert re.search(r"^Status: +succeeded$", shown, re.M) and re.search(r"^Exit code: +0$", shown, re.M)
    timeline = [line.split()[4] for line in shown.split("TIME", 1)[1].splitlines()[1:]]
    assert timeline == ["queued", "admitted", "starting", "running", "succeeded"]
    assert cli("logs", job_id, "--tail", "1").stdout == "saved model.joblib\n"

    assert cli("models", "create", "digits").returncode == 0
    for number in (1, 2):
        registering = cli.start("models", "register", "digits", "--job", job_id, "--metric", "accuracy=0.9")
        copy_when_registered(number)
        code, out, err = finished(registering)
        assert code == 0, err
        assert out == f"model digits version {number} registered (store://digits/{number}/model.joblib)\n"
    versions = cli.json("models", "versions", "digits")["results"]
    assert sorted(v["version"] for v in versions) == [1, 2]
    assert {v["lineage"]["job"] for v in versions} == {job_id}
    assert "digits  vision      2" in cli("models").stdout

    deployed = cli("deploy", "digits-ab", "--model", "digits", "--variant", "a=1:80", "--variant", "b=2:20")
    assert deployed.returncode == 0, deployed.stderr
    assert deployed.stdout.startswith("deployment digits-ab created: revision 1")
    promoted = cli("promote", "digits-ab", "b")
    assert promoted.returncode == 0, promoted.stderr
    weights = {line.split()[0]: line.split()[2] for line in promoted.stdout.splitlines()[2:]}
    assert weights == {"a": "0", "b": "100"}
    assert cli("deployments").stdout.splitlines()[1].endswith("  a=v1:0 b=v2:100")
    assert cli("rollback", "digits-ab").returncode == 0
    deployment = Deployment.objects.get(name="digits-ab")
    assert sorted(deployment.variants.values_list("name", "weight")) == [("a", 80), ("b", 20)]


@pytest.mark.django_db(transaction=True)
def test_logs_follow_exits_6_when_the_job_fails_and_0_when_it_has_succeeded(world, cli, repo):
    submitted = cli.json(
        "submit", "--name", "broken", "--code-url", repo, "--env", "EXIT_CODE=3", "--", "python train.py"
    )
    running.job_launch(job_id=submitted["id"])
    code, out, err = finished(cli.start("logs", submitted["id"], "-f"))
    assert code == 6
    assert "saved model.joblib" in out
    assert f"job {submitted['id']} failed (exit code 3)" in err
    assert cli("logs", submitted["id"], "-f").returncode == 6  # an ended job: its log, then the same answer


@pytest.mark.django_db(transaction=True)
def test_a_waiting_job_shows_its_reason_in_the_queue_and_can_be_cancelled_once(world, cli):
    Quota.objects.filter(department__slug="nlp").update(lending_limit=0)
    cli.json("submit", "--name", "big", "--code-url", REMOTE, "--gpus", "4", "--", "python train.py")
    waiting = cli.json(
        "submit",
        "--name",
        "waits",
        "--code-url",
        REMOTE,
        "--gpus",
        "2",
        "--department",
        "vision",
        "--",
        "python train.py",
    )
    assert (waiting["status"], waiting["pending_reason"]) == ("queued", "quota_exhausted")

    queue = cli("queue", "--cluster", "local")
    assert queue.returncode == 0
    assert queue.stdout.splitlines()[1].split()[:8] == [
        "1",
        str(waiting["id"]),
        "waits",
        "vision",
        "1x2",
        "sim",
        "normal",
        "quota_exhausted",
    ]
    shown = cli("get", waiting["id"]).stdout
    assert re.search(r"^Reason: +quota_exhausted$", shown, re.M) and re.search(r"^Queue: +position 1", shown, re.M)

    cancelled = cli("cancel", waiting["id"])
    assert cancelled.returncode == 0 and cancelled.stdout.startswith(f"job {waiting['id']} waits: cancelled")
    again = cli("cancel", waiting["id"])
    assert again.returncode == 1 and "409" in again.stderr
    assert cli("logs", waiting["id"], "-f").returncode == 6
    assert cli("queue").stderr == "No job is waiting.\n"


@pytest.mark.django_db(transaction=True)
def test_list_mine_shows_only_the_callers_jobs(world, cli):
    carol = token_create(user=world.carol, name="portalctl")[1]
    cli.json("submit", "--name", "alices", "--code-url", REMOTE, "--gpus", "0", "--", "python train.py")
    cli.json(
        "submit", "--name", "carols", "--code-url", REMOTE, "--gpus", "0", "--", "python train.py", PORTAL_TOKEN=carol
    )
    assert [j["name"] for j in cli.json("list")["results"]] == ["carols", "alices"]  # newest first
    assert [j["name"] for j in cli.json("list", "--mine")["results"]] == ["alices"]
