"""The hostile-job scenario (issue 14), played once per isolation by the ``attack`` fixture (conftest.py).

bob (nlp) submits, through the REST API, one job from a repository this module writes while alice's vision job
runs and alice's TensorBoard serves. Its probe (hostile_probe.py) tries every attack of the issue and writes
what each attempt got to its output folder; a Celery worker launches the jobs, the local executor runs them
(bwrap, slirp4netns, the runner), and ``play`` gathers the verdicts and what is left on the host into an
``Outcome`` that the test_hostile_*.py modules judge, one kind of attack each.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import shutil
import socket
import time
from collections.abc import Iterator
from pathlib import Path

from django.conf import settings
from django.core.management import call_command
from django.db import connections
from tensorboardX import SummaryWriter

from accounts.models import Department
from clusters import local_procs
from clusters.storage import storage_create
from jobs import running
from jobs.models import Job
from tensorboards import services as boards
from tensorboards.models import TensorBoard
from tests.conftest import World
from tests.jobs.test_job_flow import make_repo
from tests.jobs.test_tensorboard import fetch
from tests.processes import Processes
from tests.security import hostile
from tests.security.hostile import FINAL, allocated, ended, in_use, job_of, log_of, set_cluster, submit

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


@dataclasses.dataclass
class Portal:
    processes: Processes
    worker_pid: int


@contextlib.contextmanager
def celery_worker(folder: Path) -> Iterator[Portal]:
    """A real Celery worker on the test database: it launches the jobs (and its environ is a target)."""
    processes = Processes(folder)
    processes.purge_broker()
    try:
        yield Portal(processes, processes.worker().pid)
    finally:
        processes.stop()


# ------------------------------------------------------------------------------------------ what a probe may find


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
        paths.append(str(Path(str(settings.CELERY_BROKER_TRANSPORT_OPTIONS["data_folder_in"])).parent))
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
        "portal_code": hostile.portal_code_folders(),
        "planted_code": hostile.PLANTED_CODE,
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
    assert board.pid is not None, "alice's TensorBoard runs, so it has a pid"
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
    last_event = Job.objects.get(pk=cloned["id"]).events.last()
    assert last_event is not None, cloned
    cloned["reason"] = last_event.reason

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
