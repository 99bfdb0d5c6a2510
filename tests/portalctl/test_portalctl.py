"""portalctl as a user runs it: a real `python -m portalctl` process against the real portal (daphne on the
test database), and the exit codes scripts rely on.

The portal runs under daphne rather than pytest-django's WSGI `live_server`, because `logs -f` streams an
asynchronous response that a WSGI server would buffer until the job has ended. No Celery worker runs: where
a job has to run, the test launches it and reconciles in its own process, as the worker and beat would.
"""

from __future__ import annotations

import json
import os
import re
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest
from django.conf import global_settings

from accounts.tokens import token_create
from jobs import running
from jobs.models import Job
from models_registry import services as registry_services
from models_registry.models import ModelVersion
from portalctl import output
from quotas.models import Quota
from serving.models import Deployment
from tests.jobs.test_job_flow import make_repo
from tests.processes import Processes, free_port

ROOT = Path(__file__).resolve().parents[2]
REMOTE = "https://git.example.com/team/repo.git"  # nobody launches jobs of these tests that use it


class Portalctl:
    """Runs `python -m portalctl` as alice by default, with its own (empty) config file and HOME."""

    def __init__(self, url: str, token: str, home: Path):
        self.url, self.token, self.home = url, token, home
        self.config = home / "config" / "portalctl.toml"
        self.started: list[subprocess.Popen] = []

    def env(self, **overrides) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("PORTAL_URL", "PORTAL_TOKEN", "PORTALCTL_"))}
        env.update(HOME=str(self.home), PORTALCTL_CONFIG=str(self.config), PORTAL_URL=self.url, PORTAL_TOKEN=self.token)
        for key, value in overrides.items():
            if value is None:
                env.pop(key, None)
            else:
                env[key] = value
        return env

    def argv(self, args) -> list[str]:
        return [sys.executable, "-m", "portalctl", *map(str, args)]

    def __call__(self, *args, stdin: str | None = None, **env) -> subprocess.CompletedProcess:
        return subprocess.run(
            self.argv(args), cwd=ROOT, env=self.env(**env), input=stdin, capture_output=True, text=True, timeout=60
        )

    def json(self, *args, **env):
        result = self("-o", "json", *args, **env)  # before the command: words after `--` belong to the job
        assert result.returncode == 0, result.stderr
        return json.loads(result.stdout)

    def start(self, *args, **env) -> subprocess.Popen:
        process = subprocess.Popen(
            self.argv(args), cwd=ROOT, env=self.env(**env), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        self.started.append(process)
        return process

    def stop(self) -> None:
        for process in self.started:
            if process.poll() is None:
                process.kill()
            process.communicate(timeout=10)


def wait_for(predicate, *, what: str, timeout: float = 60, reconcile: bool = True):
    """Poll with a deadline; reconcile the jobs meanwhile as the beat task does."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if reconcile:
            running.jobs_reconcile()
        value = predicate()
        if value:
            return value
        time.sleep(0.1)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}")


def finished(process: subprocess.Popen) -> tuple[int, str, str]:
    """Wait (reconciling) until a following portalctl has exited; its exit code, stdout and stderr."""
    try:
        wait_for(lambda: process.poll() is not None, what="portalctl to exit")
    except AssertionError:
        process.kill()
        out, err = process.communicate(timeout=10)
        raise AssertionError(f"portalctl did not exit; it printed:\n{out}\n{err}") from None
    out, err = process.communicate(timeout=10)
    return process.returncode, out, err


@pytest.fixture(scope="module")
def channel_layer(django_db_setup, tmp_path_factory):
    """The channel layer's tables, once: the portal pushes live job updates through it."""
    Processes(tmp_path_factory.mktemp("channels")).migrate_channel_layer()


@pytest.fixture
def portal(channel_layer, tmp_path):
    processes = Processes(tmp_path)
    try:
        yield f"http://127.0.0.1:{processes.web()}"
    finally:
        processes.stop()


@pytest.fixture
def cli(world, portal, tmp_path):
    portalctl = Portalctl(portal, token_create(user=world.alice, name="portalctl")[1], tmp_path / "home")
    yield portalctl
    portalctl.stop()


@pytest.fixture
def repo(tmp_path):
    return make_repo(
        tmp_path / "repo",
        {
            "train.py": "import os, sys\nprint('epoch 1 loss 0.5', flush=True)\n"
            "open(os.path.join(os.environ['PORTAL_OUTPUT_DIR'], 'model.joblib'), 'wb').write(b'weights')\n"
            "print('saved model.joblib', flush=True)\nsys.exit(int(os.environ.get('EXIT_CODE', '0')))\n",
        },
    )


def launch_when_submitted(name: str) -> int:
    """Play the worker: launch the job once the portal has admitted it (submitting and admitting are two steps)."""
    job = wait_for(
        lambda: Job.objects.filter(name=name, status="admitted").first(),
        what=f"job {name} to be admitted",
        reconcile=False,
    )
    running.job_launch(job_id=job.pk)
    return job.pk


def copy_when_registered(number: int) -> None:
    """Play the worker: copy the version's artifact once the portal has registered it (portalctl waits meanwhile)."""
    version = wait_for(
        lambda: ModelVersion.objects.filter(version=number, status="registering").first(),
        what=f"version {number} to be registering",
        reconcile=False,
    )
    registry_services.version_artifact_copy(version_id=version.pk)


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


@pytest.mark.django_db(transaction=True)
def test_list_mine_shows_only_the_callers_jobs(world, cli):
    carol = token_create(user=world.carol, name="portalctl")[1]
    cli.json("submit", "--name", "alices", "--code-url", REMOTE, "--gpus", "0", "--", "python train.py")
    cli.json(
        "submit", "--name", "carols", "--code-url", REMOTE, "--gpus", "0", "--", "python train.py", PORTAL_TOKEN=carol
    )
    assert [j["name"] for j in cli.json("list")["results"]] == ["carols", "alices"]  # newest first
    assert [j["name"] for j in cli.json("list", "--mine")["results"]] == ["alices"]


@pytest.mark.django_db(transaction=True)
def test_login_stores_url_and_token_readable_only_by_the_owner(world, cli, settings):
    # The portal process checks passwords with Django's default hashers, not the tests' fast MD5 one.
    settings.PASSWORD_HASHERS = global_settings.PASSWORD_HASHERS
    world.alice.set_password(world.password)
    world.alice.save(update_fields=["password"])
    wrong = cli(
        "login",
        "--url",
        cli.url,
        "--username",
        "alice",
        "--password-stdin",
        stdin="wrong\n",
        PORTAL_URL=None,
        PORTAL_TOKEN=None,
    )
    assert wrong.returncode == 1 and "Unable to sign in" in wrong.stderr
    assert not cli.config.exists()

    login = cli(
        "login",
        "--url",
        cli.url + "/api/v1/",
        "--username",
        "alice",
        "--password-stdin",
        stdin=world.password + "\n",
        PORTAL_URL=None,
        PORTAL_TOKEN=None,
    )
    assert login.returncode == 0, login.stderr
    assert f"as alice; url and token stored in {cli.config}" in login.stdout
    assert stat.S_IMODE(cli.config.stat().st_mode) == 0o600
    assert stat.S_IMODE(cli.config.parent.stat().st_mode) == 0o700
    assert cli.config.read_text().startswith(f'url = "{cli.url}"\ntoken = "')

    whoami = cli("whoami", PORTAL_URL=None, PORTAL_TOKEN=None)  # from the file alone
    assert whoami.returncode == 0 and whoami.stdout.startswith(f"alice at {cli.url}")
    assert "vision" in whoami.stdout and "member" in whoami.stdout
    assert cli("whoami", PORTAL_URL=None, PORTAL_TOKEN="not-a-token").returncode == 4  # the environment wins


def test_nested_field_errors_are_named_by_their_path():
    errors = {"variants": [{}, {"version": ["Version 9 does not exist."]}], "non_field_errors": ["Weights sum to 90."]}
    assert output.error_lines(errors) == ["variants[1].version: Version 9 does not exist.", "Weights sum to 90."]


def test_the_client_imports_nothing_of_the_portal_or_django():
    probe = (
        "import sys, portalctl.cli; "
        "print(sorted({m.split('.')[0] for m in sys.modules} & {'django', 'rest_framework', 'config', 'jobs', "
        "'quotas', 'models_registry', 'builds', 'frontend'}))"
    )
    result = subprocess.run(
        [sys.executable, "-c", probe],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        env={k: v for k, v in os.environ.items() if k != "DJANGO_SETTINGS_MODULE"},
    )
    assert result.stdout.strip() == "[]", result.stderr
