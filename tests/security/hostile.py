"""Helpers of the hostile-job suite (test_hostile_job.py): the probe's source, where a local job's files are on
the host, processes on the host that carry a marker, and polling that reconciles like the periodic task."""

from __future__ import annotations

import os
import re
import signal
import time
from pathlib import Path

from django.conf import settings

from jobs import running
from jobs.models import Job

PROBE = Path(__file__).with_name("hostile_probe.py")
PLANTED = "zz_nlp_planted.pth"  # the .pth file the probe tries to plant (removed after the suite whatever happens)


def wait_for(predicate, *, timeout: float = 60.0, what: str = "condition"):
    """Poll until ``predicate()`` is truthy, reconciling jobs meanwhile as the periodic task does."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        running.jobs_reconcile()
        value = predicate()
        if value:
            return value
        time.sleep(0.1)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}")


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
    """What the probe may have planted in environments (it must not reach other suites' jobs)."""
    for path in (executor_root() / "envs").glob(f"*/*/*/lib/python*/site-packages/{PLANTED}"):
        path.unlink()
    for path in (executor_root() / "envs").glob("*/*/*/planted.txt"):
        path.unlink()


def heartbeat(path: Path) -> int:
    try:
        return int(path.read_text() or 0)
    except (OSError, ValueError):
        return 0
