"""portalctl's output for scripts: the exit codes, the field errors it names, and `-o json`, the API's JSON."""

from __future__ import annotations

import json
import re

import pytest

from accounts.tokens import token_create
from jobs.models import Job
from portalctl import output
from tests.portalctl.cli_harness import REMOTE
from tests.processes import free_port


@pytest.mark.django_db(transaction=True)
def test_invalid_input_exits_1_and_names_every_field(world, cli):
    result = cli(
        "submit",
        "--name",
        "Bad_Name",
        "--code-url",
        "ftp://example.com/x",
        "--workers",
        "0",
        "--mount",
        "no-such-storage:/data:ro",
        "--",
        "python train.py",
    )
    assert result.returncode == 1
    assert "400 Bad Request" in result.stderr
    for field in ("name", "code_url", "workers", "mounts"):
        assert re.search(rf"^  {field}: \S", result.stderr, re.M), result.stderr
    assert "no storage called 'no-such-storage'" in result.stderr
    assert not Job.objects.exists()


@pytest.mark.django_db(transaction=True)
def test_exit_codes_for_not_found_authentication_usage_and_an_unreachable_portal(world, cli):
    job = cli.json("submit", "--name", "mine", "--code-url", REMOTE, "--", "python train.py")
    bob = token_create(user=world.bob, name="portalctl")[1]

    missing = cli("get", "999999")
    assert missing.returncode == 3 and "404" in missing.stderr
    assert cli("get", job["id"], PORTAL_TOKEN=bob).returncode == 3  # another department's job does not exist
    assert cli("promote", "no-such-deployment", "a").returncode == 3

    refused = cli("whoami", PORTAL_TOKEN="not-a-token")
    assert refused.returncode == 4 and "401" in refused.stderr

    down = cli("list", PORTAL_URL=f"http://127.0.0.1:{free_port()}")
    assert down.returncode == 5 and "cannot reach the portal" in down.stderr

    assert cli("get", "not-a-number").returncode == 2
    assert cli("submit", "--name", "x", "--code-url", REMOTE).returncode == 2  # no command after --
    unconfigured = cli("whoami", PORTAL_URL=None)
    assert unconfigured.returncode == 2 and "PORTAL_URL" in unconfigured.stderr
    assert "4  authentication or permission" in cli("--help").stdout


@pytest.mark.django_db(transaction=True)
def test_json_output_is_the_apis_json(world, cli):
    submitted = cli.json(
        "submit",
        "--name",
        "exact",
        "--code-url",
        REMOTE,
        "--requirement",
        "numpy==2.1.0",
        "--mount",
        "vision-datasets:/data:ro",
        "--",
        "python",
        "train.py",
        "--lr",
        "0.1 0.2",
    )
    api = world.api(world.alice)
    assert cli.json("get", submitted["id"]) == api.get(f"/api/v1/jobs/{submitted['id']}/").json()
    assert submitted["command"] == "python train.py --lr '0.1 0.2'"
    assert (submitted["requirements"], submitted["mounts"]) == (
        ["numpy==2.1.0"],
        [{"storage": "vision-datasets", "path": "/data", "read_only": True}],
    )
    assert cli.json("list", "--status", "admitted,queued") == api.get("/api/v1/jobs/?status=admitted,queued").json()
    assert cli.json("whoami") == api.get("/api/v1/me/").json()
    after_the_command = cli("deployments", "-o", "json")
    assert json.loads(after_the_command.stdout) == {"count": 0, "next": None, "previous": None, "results": []}


def test_nested_field_errors_are_named_by_their_path():
    errors = {"variants": [{}, {"version": ["Version 9 does not exist."]}], "non_field_errors": ["Weights sum to 90."]}
    assert output.error_lines(errors) == ["variants[1].version: Version 9 does not exist.", "Weights sum to 90."]
