"""Issue 14, "Done when": the hostile member of nlp, through the real portal and real processes.

bob (nlp) submits, through the REST API, one job from a repository this test writes while alice's vision job
runs and alice's TensorBoard serves. Its probe (hostile_probe.py) tries every attack of the issue and writes
what each attempt got to its output folder; a Celery worker launches the jobs, the local executor runs them
(bwrap, slirp4netns, the runner), and the tests below judge the verdicts and what is left on the host.

The whole scenario runs twice. On the cluster as the demo sets it up (isolation "sandbox") every attack
fails. With the protection switched off (isolation "none", written straight into the cluster's settings: the
validator refuses "none" for a cluster two departments share, which is exactly the point) each test asserts
the same attack SUCCEEDS, so that each assertion is known to be able to fail.
The setup timeout has its own test: the same hanging setup with and without the timeout.
test_5b is a hole this suite found and that is now closed: the portal's TensorBoard followed the links a job
leaves in its own TENSORBOARD_LOG_DIR; boards (and model servers) now run in a sandbox of their own that sees
only their runs' folders (on a trusted cluster, like its jobs, they do not).
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import socket
import sys
import time
import uuid
from pathlib import Path

import pytest
from django.conf import settings
from django.core.management import call_command
from django.db import connections
from django.test import override_settings
from django.utils import timezone
from tensorboardX import SummaryWriter

from accounts.models import Department
from clusters import local_procs
from clusters.models import Cluster
from clusters.storage import storage_create
from jobs import running
from jobs.models import Job
from tensorboards import services as boards
from tensorboards.models import TensorBoard
from tests.conftest import World
from tests.jobs.executor_harness import slow_package
from tests.jobs.test_job_flow import make_repo
from tests.jobs.test_tensorboard import fetch
from tests.processes import Processes
from tests.security import hostile

# The database mark makes pytest-django create the test database even when only scenario tests are selected.
pytestmark = [
    pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the local executor needs Linux"),
    pytest.mark.django_db,
]

FINAL = {"succeeded", "failed", "cancelled"}
CORPUS = "the nlp corpus, put there by the test\n"
VISION_PY = """\
import os, pathlib, time
out = pathlib.Path(os.environ["PORTAL_OUTPUT_DIR"])
(out / "env.txt").write_text(os.environ.get("PORTAL_PLANTED", "clean") + "\\n")
(out / "model.txt").write_text("vision weights v1\\n")
print("vision running", flush=True)
release = pathlib.Path(os.environ["PORTAL_DATA_VISION_DATASETS"]) / "release"
deadline = time.monotonic() + 120
while not release.exists() and time.monotonic() < deadline:
    time.sleep(0.05)
(out / "done.txt").write_text("finished\\n")
"""


@dataclasses.dataclass
class Outcome:
    """What one run of the scenario showed; the tests judge it."""

    isolation: str
    hints: dict
    verdict: dict
    attack: dict  # the attack job (API), once ended
    attack_log: str
    attack_site: str  # the host folder of the site-packages the attack job ran with
    nlp_in_use_after_attack: float
    left_behind: list[str]  # host processes carrying the marker once the attack job ended
    heartbeat_went_on: bool  # a daemon's heartbeat file still grew after the job ended
    board_alive_after: bool  # alice's TensorBoard process, the very one started for her
    board_proxy_status: int  # alice reading her board through the portal's proxy afterwards
    bob_board_tags: dict  # what bob's own board shows him, through the proxy
    refused: dict  # the nlp job submitted with the vision job's code folder as code_url
    vision: dict  # the vision job, once ended
    vision_output: dict[str, str]
    next_vision_env: str  # what the next vision job found in its environment
    corpus_files: list[str]  # the read-only storage's folder on the host, afterwards
    scratch_files: list[str]
    allocated_at_end: float

    @property
    def sandboxed(self) -> bool:
        return self.isolation == "sandbox"


def stolen(result: dict) -> bool:
    return result["ok"] and bool(result["value"])


def refused(result: dict, *errors: str) -> bool:
    return not result["ok"] and (not errors or result["error"] in errors)


# ------------------------------------------------------------------------------------------ the portal


@dataclasses.dataclass
class Portal:
    processes: Processes
    worker_pid: int


@pytest.fixture(scope="module")
def portal(django_db_setup, django_db_blocker, tmp_path_factory):
    """A real Celery worker on the test database: it launches the jobs (and its environ is a target)."""
    with django_db_blocker.unblock():
        running = Processes(tmp_path_factory.mktemp("hostile-processes"))
        running.purge_broker()
        worker = running.worker()
    yield Portal(running, worker.pid)
    running.stop()


def submit(world: World, user, **fields) -> dict:
    body = {"name": "hostile", "command": "python train.py", "gpus_per_worker": 1} | fields
    response = world.api(user).post("/api/v1/jobs/", body, format="json")
    assert response.status_code == 201, response.json()
    return response.json()


def job_of(world: World, user, job_id: int) -> dict:
    return world.api(user).get(f"/api/v1/jobs/{job_id}/").json()


def log_of(world: World, user, job_id: int) -> str:
    return world.api(user).get(f"/api/v1/jobs/{job_id}/logs/").content.decode()


def ended(world: World, user, job_id: int, *, timeout: float = 60) -> dict:
    return hostile.wait_for(
        lambda: (j := job_of(world, user, job_id))["status"] in FINAL and j,
        timeout=timeout,
        what=f"job {job_id} to end",
    )


def in_use(world: World, user, department: str) -> float:
    return world.api(user).get(f"/api/v1/departments/{department}/").json()["usage"][0]["in_use"]


def allocated(world: World) -> float:
    return world.api(world.admin).get("/api/v1/clusters/").json()["results"][0]["pools"][0]["allocated"]


def set_cluster(**changes) -> None:
    # Straight into the row: the settings validator refuses what these tests need (see the module docstring).
    cluster = Cluster.objects.get(name="local")
    Cluster.objects.filter(pk=cluster.pk).update(settings={**cluster.settings, **changes})


def listening(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=1):
            return True
    except OSError:
        return False


def datastore_targets() -> list[tuple[str, int]]:
    """The host's loopback datastores that really listen here (Redis, PostgreSQL, the configured ones)."""
    candidates = [("127.0.0.1", 6379), ("127.0.0.1", 5432)]
    db = connections["default"].settings_dict
    if not db["ENGINE"].endswith("sqlite3"):
        candidates.append((db["HOST"] or "127.0.0.1", int(db["PORT"] or 5432)))
    found = [target for target in dict.fromkeys(candidates) if listening(*target)]
    # slirp4netns's alias for the host's loopback, which --disable-host-loopback must close.
    return found + [("10.0.2.2", port) for _, port in found]


def broker_files() -> list[str]:
    """The embedded broker's folder and the channel layer's SQLite file (absent with Redis)."""
    paths = []
    if settings.CELERY_BROKER_URL.startswith("filesystem://"):
        paths.append(str(Path(settings.CELERY_BROKER_TRANSPORT_OPTIONS["data_folder_in"]).parent))
    if "channels" in settings.DATABASES:
        channels = settings.DATABASES["channels"]
        paths += [channels["NAME"], channels.get("TEST", {}).get("NAME") or ""]
    return [path for path in dict.fromkeys(paths) if path and os.path.exists(path)]


def secret_files(demo_password: Path) -> dict[str, str]:
    files = {"secret_key": settings.PORTAL_DATA_ROOT / "secret_key", "demo_password": demo_password}
    db = connections["default"].settings_dict
    if db["ENGINE"].endswith("sqlite3"):
        files["database"] = Path(db["NAME"])
    shadow = Path("/etc/shadow")
    if os.access(shadow, os.R_OK) and shadow.stat().st_size:
        files["shadow"] = shadow
    return {name: str(path) for name, path in files.items() if path.exists()}


# ------------------------------------------------------------------------------------------ the scenario


@pytest.fixture(scope="module", params=["sandbox", "none"], ids=["sandboxed", "protection-off"])
def attack(request, portal, django_db_blocker, tmp_path_factory) -> Outcome:
    isolation = request.param
    marker = f"hostile-{uuid.uuid4().hex}"
    folder = tmp_path_factory.mktemp(f"hostile-{isolation}")
    demo_password = settings.PORTAL_DATA_ROOT / "demo-password"
    made_password = not demo_password.exists()
    if made_password:  # what `make run` leaves in the data root
        demo_password.write_text("demo-password-of-the-portal\n")
        demo_password.chmod(0o600)
    hasher = ["django.contrib.auth.hashers.MD5PasswordHasher"]
    with django_db_blocker.unblock(), override_settings(PASSWORD_HASHERS=hasher):
        world = None
        try:
            world = World(folder / "world")
            return play(
                world, isolation=isolation, marker=marker, folder=folder, portal=portal, demo_password=demo_password
            )
        except BaseException:
            print(portal.processes.logs())
            raise
        finally:
            clean_up(world, marker)
            if made_password:
                demo_password.unlink(missing_ok=True)


def play(world: World, *, isolation: str, marker: str, folder: Path, portal: Portal, demo_password: Path) -> Outcome:
    if isolation == "none":
        set_cluster(isolation="none")
    storage = folder / "world" / "storage"
    corpus, scratch, datasets = storage / "nlp-corpora", storage / "nlp-scratch", storage / "vision-datasets"
    scratch.mkdir()
    (corpus / "hello.txt").write_text(CORPUS)
    for path in (corpus, scratch):
        path.chmod(0o777)  # so that only a read-only mount can refuse a write there
    storage_create(
        actor=world.admin,
        department=Department.objects.get(slug="nlp"),
        name="nlp-scratch",
        kind="local",
        local_path=str(scratch),
    )

    # alice's vision job runs, and her TensorBoard serves.
    vision_repo = make_repo(folder / "vision-repo", {"vision.py": VISION_PY})
    vision_fields = {
        "department": "vision",
        "code_url": vision_repo,
        "command": "python vision.py",
        "tensorboard": True,
        "mounts": [{"storage": "vision-datasets", "path": "/data/vision", "read_only": True}],
    }
    vision = submit(world, world.alice, name="vision", **vision_fields)
    alice = world.api(world.alice)
    assert alice.post(f"/api/v1/jobs/{vision['id']}/tensorboard/").status_code == 200
    hostile.wait_for(lambda: "vision running" in log_of(world, world.alice, vision["id"]), what="the vision job to run")
    assert job_of(world, world.alice, vision["id"])["status"] == "running"
    hostile.wait_for(
        lambda: alice.get(f"/api/v1/jobs/{vision['id']}/tensorboard/").json()["status"] == "running",
        what="alice's TensorBoard to run",
    )
    board = TensorBoard.objects.get(key=f"job:{vision['id']}")
    vision_dir = hostile.job_folder(vision["id"])
    vision_events = hostile.executor_root() / "tensorboard" / Job.objects.get(pk=vision["id"]).storage_key / "run-0"
    write_scalar(vision_events, "vision_secret_loss")
    vision_site = hostile.env_site_packages(vision["id"], log_of(world, world.alice, vision["id"]), isolation=isolation)

    # What an attacker would find by scanning /proc, knowing the data root's layout or the usual ports.
    hints = {
        "marker": marker,
        "planted": hostile.PLANTED,
        "pids": {"test": os.getpid(), "worker": portal.worker_pid},
        "secret_files": secret_files(demo_password),
        "vision": {
            "files": {
                "code": str(vision_dir / "code" / "vision.py"),
                "launch": str(vision_dir / "launch.json"),
                "log": str(vision_dir / "logs" / "worker-0.log"),
                "output": str(vision_dir / "output" / "model.txt"),
            },
            "output": str(vision_dir / "output"),
            "site_packages": str(vision_site),
            "tensorboard": str(vision_events),
        },
        "tcp": datastore_targets(),
        "broker_files": broker_files(),
        "board": {"pid": board.pid, "port": board.port},
        "mounts": {
            "read_only": {"env": "PORTAL_DATA_NLP_CORPORA", "path": "/data/corpus"},
            "writable": {"env": "PORTAL_DATA_NLP_SCRATCH", "path": "/data/scratch"},
        },
    }
    attack_repo = make_repo(
        folder / "attack-repo", {"probe.py": hostile.PROBE.read_text(), "hints.json": json.dumps(hints, indent=1)}
    )

    # bob's job.
    attack = submit(
        world,
        world.bob,
        department="nlp",
        code_url=attack_repo,
        command="python probe.py",
        tensorboard=True,
        mounts=[
            {"storage": "nlp-corpora", "path": "/data/corpus", "read_only": True},
            {"storage": "nlp-scratch", "path": "/data/scratch", "read_only": False},
        ],
    )
    attack = ended(world, world.bob, attack["id"])
    nlp_in_use = in_use(world, world.bob, "nlp")
    left_behind = hostile.host_processes(marker)
    attack_log = log_of(world, world.bob, attack["id"])
    verdict_file = hostile.job_folder(attack["id"]) / "output" / "verdict.json"
    assert verdict_file.exists() and "verdict: {" in attack_log, f"no verdict; job {attack}\n{attack_log}"
    verdict = json.loads(verdict_file.read_text())
    beat = scratch / f"{marker}-chain"
    went_on = bool(left_behind) and wait_growing(beat)

    # alice's board afterwards.
    board_alive = local_procs.alive(board.pid, int(board.handle) if board.handle else None)
    proxy_status = (
        fetch(f"/tensorboard/{vision['id']}/data/plugin/scalars/tags", user=world.alice)[0].status_code
        if board_alive
        else 0
    )

    # bob's own board, with a run of his own to show (so that it is known to have looked at his folder).
    write_scalar(
        hostile.executor_root() / "tensorboard" / Job.objects.get(pk=attack["id"]).storage_key / "run-0", "nlp_loss"
    )
    bob = world.api(world.bob)
    assert bob.post(f"/api/v1/jobs/{attack['id']}/tensorboard/").status_code == 200
    hostile.wait_for(
        lambda: bob.get(f"/api/v1/jobs/{attack['id']}/tensorboard/").json()["status"] == "running",
        what="bob's TensorBoard to run",
    )
    bob_tags = hostile.wait_for(
        lambda: (t := board_tags(attack["id"], world.bob)) and any("nlp_loss" in v for v in t.values()) and t,
        what="bob's board to show his run",
        timeout=30,
    )

    # bob names the vision job's code folder as his code_url.
    cloned = submit(world, world.bob, name="clone-vision", department="nlp", code_url=f"file://{vision_dir / 'code'}")
    cloned = ended(world, world.bob, cloned["id"])
    cloned["reason"] = Job.objects.get(pk=cloned["id"]).events.last().reason

    # The vision job finishes; the next vision job uses the same requirements, so the same environment.
    (datasets / "release").write_text("go\n")
    vision = ended(world, world.alice, vision["id"])
    output = {p.name: p.read_text() for p in sorted((vision_dir / "output").iterdir())}
    following = ended(world, world.alice, submit(world, world.alice, name="vision-next", **vision_fields)["id"])
    assert following["status"] == "succeeded", following
    next_env = (hostile.job_folder(following["id"]) / "output" / "env.txt").read_text().strip()

    return Outcome(
        isolation=isolation,
        hints=hints,
        verdict=verdict,
        attack=attack,
        attack_log=attack_log,
        attack_site=str(hostile.env_site_packages(attack["id"], attack_log, isolation=isolation)),
        nlp_in_use_after_attack=nlp_in_use,
        left_behind=left_behind,
        heartbeat_went_on=went_on,
        board_alive_after=board_alive,
        board_proxy_status=proxy_status,
        bob_board_tags=bob_tags,
        refused=cloned,
        vision=vision,
        vision_output=output,
        next_vision_env=next_env,
        corpus_files=sorted(p.name for p in corpus.iterdir()),
        scratch_files=sorted(p.name for p in scratch.iterdir()),
        allocated_at_end=allocated(world),
    )


def write_scalar(folder: Path, tag: str) -> None:
    """Event files as a job's training writes them into its TENSORBOARD_LOG_DIR (here from the host)."""
    writer = SummaryWriter(logdir=str(folder))
    for step, value in enumerate([1.0, 0.5]):
        writer.add_scalar(tag, value, step)
    writer.close()


def board_tags(job_id: int, user) -> dict:
    response, body = fetch(f"/tensorboard/{job_id}/data/plugin/scalars/tags", user=user)
    return json.loads(body) if response.status_code == 200 else {}


def wait_growing(path: Path, timeout: float = 5) -> bool:
    """Does the heartbeat in ``path`` go on (its counter grows within ``timeout``)?"""
    first = hostile.heartbeat(path)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if hostile.heartbeat(path) > first:
            return True
        time.sleep(0.05)
    return False


def clean_up(world: World | None, marker: str) -> None:
    """Whatever happened: nothing of the scenario may reach the next one or another suite."""
    hostile.kill_marked(marker)
    hostile.remove_planted()
    for job in Job.objects.exclude(status__in=FINAL).exclude(run_id="").select_related("cluster"):
        running.executor_for(job.cluster).cancel(job.run_id, 0)
    for job in Job.objects.all():
        for kept in ("tensorboard", "checkpoints"):  # kept per job across its runs
            shutil.rmtree(hostile.executor_root() / kept / job.storage_key, ignore_errors=True)
    for board in TensorBoard.objects.exclude(pid=None):
        boards.board_stop(board=board)
        started = int(board.handle) if board.handle else None
        hostile.wait_for(
            lambda board=board, started=started: not local_procs.alive(board.pid, started),
            what=f"TensorBoard {board.pk} to end",
            timeout=15,
        )
    call_command("flush", interactive=False, verbosity=0, database="default")


# ------------------------------------------------------------------------------------------ the attacks


def test_1_it_cannot_read_the_portals_secrets_nor_see_its_processes(attack):
    v = attack.verdict
    assert attack.attack["status"] == "succeeded", attack.attack_log
    assert "demo_password" in attack.hints["secret_files"]
    if attack.sandboxed:
        assert all(refused(r, "ENOENT") for r in v["environ"].values()), v["environ"]
        assert not any(stolen(r) for r in v["secret_files"].values()), v["secret_files"]
        assert v["processes"] and all("/portal/init.py" in p or "probe.py" in p for p in v["processes"]), v["processes"]
        if os.geteuid() == 0:  # (an ordinary portal user gets a user namespace and keeps its uid)
            uids = json.loads((hostile.executor_root() / "uids.json").read_text())
            assert v["whoami"]["uid"] == uids["nlp"] != os.geteuid(), "the job runs as its department's uid"
    else:
        assert all(r["ok"] for r in v["environ"].values()), v["environ"]
        assert "DATABASE_URL" in v["environ"]["worker"]["value"]
        assert all(stolen(r) for r in v["secret_files"].values()), v["secret_files"]
        assert any("celery" in p for p in v["processes"]), v["processes"]


def test_2_it_cannot_read_nor_clone_the_running_vision_jobs_files(attack):
    v = attack.verdict
    if attack.sandboxed:
        assert all(refused(r, "ENOENT") for r in v["vision_files"].values()), v["vision_files"]
        assert refused(v["vision_output_write"]), v["vision_output_write"]
    else:
        files = v["vision_files"]
        assert all(stolen(r) for r in files.values()), files
        assert "vision weights" in files["code"]["value"] and "vision running" in files["log"]["value"]
        assert files["output"]["value"] == "vision weights v1\n"
        assert v["vision_output_write"]["ok"]
    # Cloning through the portal is refused in both modes: the same check of the code_url guards both.
    # (That it can fail: the attack job itself came from a file:// URL, outside the portal's folders.)
    assert (attack.refused["status"], attack.refused["reason"]) == ("failed", "launch_failed"), attack.refused
    assert "inside the portal's own folders" in attack.refused["status_message"]
    assert attack.attack["commit"]


def test_3_its_environment_is_read_only_and_its_departments_own(attack):
    env = attack.verdict["env"]
    assert "/nlp/" in attack.attack_site and "/vision/" in attack.hints["vision"]["site_packages"]
    if attack.sandboxed:
        assert env["virtual_env"] == "/portal/env"
        assert refused(env["own_pth"], "EROFS") and refused(env["own_file"], "EROFS"), env
        assert refused(env["vision_pth"], "ENOENT"), env
        assert attack.next_vision_env == "clean"
    else:
        assert env["own_pth"]["ok"] and env["own_file"]["ok"] and env["vision_pth"]["ok"], env
        assert attack.next_vision_env == "by nlp", "the next vision job ran the code nlp planted"


def test_4_it_cannot_reach_the_broker_nor_the_datastores(attack):
    network, files = attack.verdict["network"], attack.verdict["broker_files"]
    assert network or files, "nothing to attack: neither a datastore on loopback nor the embedded broker"
    if attack.sandboxed:
        assert all(refused(r) for r in network.values()), network
        assert all(refused(r, "ENOENT") for r in files.values()), files
    else:
        assert all(r["ok"] for target, r in network.items() if target.startswith("127.0.0.1:")), network
        assert all(stolen(r) for r in files.values()), files


def test_5_it_cannot_reach_nor_kill_another_departments_tensorboard(attack):
    board = attack.verdict["board"]
    if attack.sandboxed:
        assert refused(board["connect"], "ECONNREFUSED"), board
        assert refused(board["kill"], "ESRCH"), board
        assert attack.board_alive_after, "alice's TensorBoard was killed"
        assert attack.board_proxy_status == 200
    else:
        assert board["connect"]["ok"] and board["kill"]["ok"], board
        assert not attack.board_alive_after


def test_5b_its_own_tensorboard_shows_nothing_of_another_departments(attack):
    assert attack.verdict["tensorboard_link"]["ok"], "a job may make links in its own folders"
    leaked = {
        run: tags
        for run, tags in attack.bob_board_tags.items()
        if attack.hints["marker"] in run and "vision_secret_loss" in tags
    }
    if attack.sandboxed:
        assert leaked == {}, leaked  # the board's own sandbox has no such folder for the link to lead to
    else:
        assert leaked, attack.bob_board_tags


def test_6_nothing_it_starts_outlives_it_and_its_gpus_come_back(attack):
    assert attack.verdict["daemons_started"] == {"setsid": True, "chain": True}
    assert attack.nlp_in_use_after_attack == 0
    assert attack.allocated_at_end == 0
    # Sandboxed, the PID namespace ends with the launcher; unisolated, the launcher is the subreaper of whatever
    # the workers leave and the runner lets it sweep them, generation by generation, before it goes. (Checked to
    # fail: with that sweep off, the chain's end and the setsid daemon outlive the job, writing on.)
    assert attack.left_behind == [], attack.left_behind
    assert not attack.heartbeat_went_on


def test_7_a_read_only_mount_refuses_writes_at_the_path_asked_for(attack):
    mounts = attack.verdict["mounts"]
    assert mounts["write_writable"]["ok"] and "written.txt" in attack.scratch_files, mounts
    if attack.sandboxed:
        assert (mounts["read_only_env"], mounts["writable_env"]) == ("/data/corpus", "/data/scratch")
        assert mounts["read_at_path"] == {"ok": True, "value": CORPUS}
        assert refused(mounts["write_read_only"], "EROFS"), mounts
        assert refused(mounts["write_read_only_at_path"], "EROFS"), mounts
        assert attack.corpus_files == ["hello.txt"]
    else:
        assert refused(mounts["read_at_path"], "ENOENT"), "the path asked for is ignored"
        assert mounts["write_read_only"]["ok"] and "planted.txt" in attack.corpus_files, mounts


def test_9_the_vision_job_is_untouched(attack):
    assert attack.vision["status"] == "succeeded", attack.vision
    if attack.sandboxed:
        assert attack.vision_output == {
            "done.txt": "finished\n",
            "env.txt": "clean\n",
            "model.txt": "vision weights v1\n",
        }
    else:
        assert "pwned.txt" in attack.vision_output


# ------------------------------------------------------------------------------------------ setup limits


@pytest.mark.django_db(transaction=True)
def test_8_a_hanging_setup_ends_at_the_setup_timeout_and_gives_its_gpus_back(world, portal, tmp_path):
    requirement = slow_package(tmp_path / "slowpkg")
    repo = make_repo(tmp_path / "repo", {"train.py": "print('never')\n"})
    fields = {"code_url": repo, "requirements": [requirement], "gpus_per_worker": 2, "max_runtime_seconds": 5}

    # Without the limit (the most the settings allow), launched first.
    set_cluster(setup_timeout_seconds=86400)
    unlimited = submit(world, world.alice, name="unlimited", department="vision", **fields)
    hostile.wait_for(lambda: "resolving" in log_of(world, world.alice, unlimited["id"]), what="its setup to hang")
    # With it: 5 s rather than the 30 s minimum the validator allows, to keep the suite fast; same mechanism.
    set_cluster(setup_timeout_seconds=5)
    limited = submit(world, world.bob, name="limited", department="nlp", **fields)
    limited = ended(world, world.bob, limited["id"], timeout=40)

    assert (limited["status"], limited["started_at"]) == ("failed", None), limited
    assert Job.objects.get(pk=limited["id"]).events.last().reason == "setup_timeout"
    assert "setup_timeout_seconds (5 s)" in limited["status_message"]
    assert in_use(world, world.bob, "nlp") == 0

    # The job without the limit has been setting up for longer, and is still at it.
    still = job_of(world, world.alice, unlimited["id"])
    setting_up = (timezone.now() - Job.objects.get(pk=unlimited["id"]).launched_at).total_seconds()
    assert (still["status"], still["started_at"]) == ("starting", None) and setting_up > 5, (still, setting_up)
    assert world.api(world.alice).post(f"/api/v1/jobs/{unlimited['id']}/cancel/").status_code == 200
    assert ended(world, world.alice, unlimited["id"], timeout=30)["status"] == "cancelled"
    assert allocated(world) == 0
