"""`portalctl submit --dry-run`: the portal's start preview (POST /api/v1/jobs/preview/), nothing submitted."""

from __future__ import annotations

import pytest

from jobs.models import Job
from tests.portalctl.cli_harness import REMOTE

ASK = ("submit", "--name", "big", "--code-url", REMOTE, "--priority", "high")


@pytest.mark.django_db(transaction=True)
def test_a_dry_run_says_whether_the_job_would_start_and_what_starts_sooner(world, cli):
    fits = cli(*ASK, "--gpus", "2", "--dry-run", "--", "python train.py")
    assert (fits.returncode, fits.stdout) == (0, "would start now\n")
    assert not Job.objects.exists()

    cli.json(*ASK, "--gpus", "3", "--", "python train.py")  # vision: 3 of its 4 GPUs, work that cannot be preempted
    waits = cli(*ASK, "--gpus", "2", "--dry-run", "--", "python train.py")
    assert waits.returncode == 0, waits.stderr
    lines = waits.stdout.splitlines()
    assert lines[0].startswith("would wait (quota_exhausted): position 1 in the queue, estimated start 20")
    assert lines[1].startswith("  vision runs 3/4 local/sim GPUs")
    assert lines[2] == "starts sooner with --gpus 1: " + lines[2].rsplit(": ", 1)[1]
    assert lines[2].endswith(" UTC")
    assert Job.objects.count() == 1

    answer = cli.json(*ASK, "--gpus", "2", "--dry-run", "--", "python train.py")
    assert answer["would_start"] is False and [a["change"] for a in answer["alternatives"]] == [{"gpus_per_worker": 1}]

    refused = cli(*ASK, "--gpus", "2", "--department", "nlp", "--dry-run", "--", "python train.py")
    assert refused.returncode == 1 and "You are not a member of a department called 'nlp'." in refused.stderr
    no_follow = cli(*ASK, "--dry-run", "--follow", "--", "python train.py")
    assert no_follow.returncode == 2 and "--dry-run submits nothing" in no_follow.stderr
    assert Job.objects.count() == 1
