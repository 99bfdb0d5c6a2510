"""Helpers of the hostile-job suite (test_hostile_*.py): the probe's source, where a local job's files are on
the host, processes on the host that carry a marker, the portal's API as the tests call it, and polling that
reconciles like the periodic task (tests.processes.wait_for)."""

from __future__ import annotations

import os
import re
import signal
import time
from pathlib import Path

from django.conf import settings

from clusters.models import Cluster
from jobs.models import Job
from quotas.scheduler import compiled
from tests.conftest import World
from tests.processes import wait_for

PROBE = Path(__file__).with_name("hostile_probe.py")
PLANTED = "zz_nlp_planted.pth"  # the .pth file the probe tries to plant (removed after the suite whatever happens)
PLANTED_CODE = "zz_nlp_planted.txt"  # what it tries to write beside the portal's own code (removed the same way)
FINAL = {"succeeded", "failed", "cancelled"}


def stolen(result: dict) -> bool:
    return result["ok"] and bool(result["value"])


def refused(result: dict, *errors: str) -> bool:
    return not result["ok"] and (not errors or result["error"] in errors)


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
    return wait_for(
        lambda: (j := job_of(world, user, job_id))["status"] in FINAL and j,
        timeout=timeout,
        what=f"job {job_id} to end",
    )


def in_use(world: World, user, department: str) -> float:
    return world.api(user).get(f"/api/v1/departments/{department}/").json()["usage"][0]["in_use"]


def allocated(world: World) -> float:
    return world.api(world.admin).get("/api/v1/clusters/").json()["results"][0]["pools"][0]["allocated"]


def set_cluster(**changes) -> None:
    # Straight into the row: the settings validator refuses what these tests need (isolation "none" on a
    # cluster two departments share, a setup timeout under the minimum; see tests/security/conftest.py).
    cluster = Cluster.objects.get(name="local")
    Cluster.objects.filter(pk=cluster.pk).update(settings={**cluster.settings, **changes})


def executor_root(cluster: str = "local") -> Path:
    return Path(settings.PORTAL_DATA_ROOT) / "executors" / cluster


def job_folder(job_id: int) -> Path:
    """The host folder of a local job's current run (what models_registry reads outputs from)."""
    job = Job.objects.select_related("cluster").get(pk=job_id)
    assert job.run_id, f"job {job_id} has no run"
    return executor_root(job.cluster.name) / "jobs" / job.run_id


def env_site_packages(job_id: int, log: str, *, isolation: str) -> Path:
    """The host folder of the site-packages of the environment a job runs in (its log names the env)."""
    key = re.search(r"environment ([0-9a-f]{12})", log)
    assert key, f"the job's log names no environment:\n{log}"
    job = Job.objects.select_related("department").get(pk=job_id)
    tree = executor_root() / "envs" / ("sandbox" if isolation == "sandbox" else "host") / job.department.slug
    found = sorted(tree.glob(f"{key.group(1)}*/lib/python*/site-packages"))
    assert len(found) == 1, found
    return found[0]


def host_processes(marker: str) -> list[str]:
    """Command lines of the host's live processes that carry ``marker``."""
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            cmdline = Path(f"/proc/{name}/cmdline").read_bytes()
            state = Path(f"/proc/{name}/stat").read_bytes().rsplit(b")", 1)[1].split()[0]
        except OSError:
            continue
        if marker.encode() in cmdline and state not in (b"Z", b"X"):
            words = cmdline.replace(b"\0", b" ").decode(errors="replace").strip()
            found.append(f"{name}: {words}")
    return found


def kill_marked(marker: str, *, timeout: float = 10) -> None:
    """SIGKILL every host process carrying ``marker`` until none is left (they only sleep or write a file)."""
    deadline = time.monotonic() + timeout
    while (left := host_processes(marker)) and time.monotonic() < deadline:
        for entry in left:
            try:
                os.kill(int(entry.split(":", 1)[0]), signal.SIGKILL)
            except ProcessLookupError:
                pass
        time.sleep(0.02)
    assert not host_processes(marker), "processes of the hostile job could not be killed"


def remove_planted() -> None:
    """What the probe may have planted in environments (it must not reach other suites' jobs) and beside the
    portal's code."""
    for path in (executor_root() / "envs").glob(f"*/*/*/lib/python*/site-packages/{PLANTED}"):
        path.unlink()
    for path in (executor_root() / "envs").glob("*/*/*/planted.txt"):
        path.unlink()
    for folder in portal_code_folders().values():
        (Path(folder) / PLANTED_CODE).unlink(missing_ok=True)


def portal_code_folders() -> dict[str, str]:
    """Folders of code the portal's processes import: the scheduler core's sources and, where it was built, its
    compiled build (quotas.scheduler.compiled), which every process that schedules loads."""
    folders = {"core": compiled.PACKAGE, "build": compiled.BUILD / "quotas" / "scheduler"}
    return {name: str(path) for name, path in folders.items() if path.is_dir()}


def heartbeat(path: Path) -> int:
    try:
        return int(path.read_text() or 0)
    except (OSError, ValueError):
        return 0
