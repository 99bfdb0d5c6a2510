"""portalctl as a user runs it, for the tests of tests/portalctl: a real `python -m portalctl` process (its own
config file and HOME), and the worker's steps that these tests play themselves (no Celery worker runs: where a
job has to run, the test launches it and reconciles in its own process, as the worker and beat would).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from jobs import running
from jobs.models import Job
from models_registry import services as registry_services
from models_registry.models import ModelVersion
from tests.processes import wait_for

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
