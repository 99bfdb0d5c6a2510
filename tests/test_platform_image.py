"""platform/Dockerfile, the image's entrypoint and platform/Procfile: one unprivileged image for every
process; the entrypoint starts the Procfile's command lines (and any other command as given);
.dockerignore keeps local state out of the build context but not the code.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from fnmatch import fnmatch
from pathlib import Path

import pytest

from tests.platform_support import (
    PLATFORM,
    PORTAL_UID,
    ROOT,
    dockerfile_user,
    instruction,
    procfile,
)


def test_it_builds_one_unprivileged_image_for_every_process():
    assert instruction("FROM") == ["python:3.11-slim"]
    assert dockerfile_user() == PORTAL_UID
    assert instruction("WORKDIR") == ["/app"]
    runs = " ".join(instruction("RUN"))
    assert "apt-get install -y --no-install-recommends git" in runs
    assert "pip install --no-cache-dir --require-hashes --no-deps -r requirements.lock" in runs
    assert "manage.py collectstatic --noinput" in runs
    assert "python -m quotas.scheduler.build" in runs  # the compiled scheduler core
    (env,) = instruction("ENV")
    assert "PORTAL_DATA_ROOT=/app/var" in env and "PORTAL_BIND=0.0.0.0" in env and "PATH=/app/.venv/bin:$PATH" in env
    # The venv is where the Procfile's command lines find it, relative to WORKDIR.
    assert all(line.startswith(".venv/bin/") for line in procfile().values())
    assert "python -m venv .venv" in runs
    assert [json.loads(e) for e in instruction("ENTRYPOINT")] == [["sh", "/app/platform/docker-entrypoint.sh"]]
    assert [json.loads(c) for c in instruction("CMD")] == [["web"]]
    # The requirements the image installs are all pinned, each with its hashes.
    for line in (ROOT / "requirements.lock").read_text().splitlines():
        if line and not line.startswith((" ", "#")):
            assert re.fullmatch(r"[A-Za-z0-9_.\-\[\]]+==[0-9][^ ]* \\", line), line


@pytest.fixture
def image_tree(tmp_path):
    """The image's /app as far as the entrypoint sees it, with programs that print their arguments."""
    (tmp_path / "platform").mkdir()
    shutil.copy(PLATFORM / "docker-entrypoint.sh", tmp_path / "platform")
    shutil.copy(PLATFORM / "Procfile", tmp_path / "platform")
    bin_dir = tmp_path / ".venv" / "bin"
    bin_dir.mkdir(parents=True)
    for program in ("uvicorn", "celery"):
        (bin_dir / program).write_text(f'#!/bin/sh\nprintf "%s\\n" "{program}" "$@"\n')
        (bin_dir / program).chmod(0o755)
    return tmp_path


def run_entrypoint(tree: Path, *args: str, **env: str) -> subprocess.CompletedProcess:
    environ = {"PATH": os.environ["PATH"], **env}
    # From another folder: the image's WORKDIR is /app, but the script must not depend on it.
    return subprocess.run(
        ["sh", str(tree / "platform" / "docker-entrypoint.sh"), *args],
        cwd="/",
        env=environ,
        capture_output=True,
        text=True,
        timeout=30,
    )


def test_it_starts_the_procfiles_command_lines_in_the_image(image_tree):
    web = run_entrypoint(image_tree, "web", PORT="8123", PORTAL_BIND="0.0.0.0")
    assert web.returncode == 0, web.stderr
    assert web.stdout.split("\n")[:-1] == [
        "uvicorn",
        "config.asgi:application",
        "--host",
        "0.0.0.0",
        "--port",
        "8123",
        "--http",
        "httptools",
        "--loop",
        "uvloop",
        "--ws",
        "websockets-sansio",
        "--lifespan",
        "off",
        "--no-server-header",
        "--no-proxy-headers",
        "--no-access-log",
    ]
    worker = run_entrypoint(image_tree, "worker", PORTAL_LOG_LEVEL="WARNING", HOSTNAME="pod-1")
    assert worker.stdout.split("\n")[:-1] == [
        "celery",
        "--app",
        "config",
        "worker",
        "--loglevel",
        "WARNING",
        "--concurrency",
        "2",
        "--hostname",
        "worker@%h",
    ]
    beat = run_entrypoint(image_tree, "beat")
    assert beat.stdout.split("\n")[:-1] == ["celery", "--app", "config", "beat", "--loglevel", "INFO"]
    default = run_entrypoint(image_tree)
    assert default.stdout.split("\n")[0] == "uvicorn"


def test_it_runs_any_other_command_as_given_in_the_image(image_tree):
    done = run_entrypoint(image_tree, "sh", "-c", 'echo "$0 $1"', "migrate", "--noinput")
    assert (done.returncode, done.stdout) == (0, "migrate --noinput\n")
    refused = run_entrypoint(image_tree, "web", "--port", "1")
    assert refused.returncode == 64 and "takes no arguments" in refused.stderr


def test_it_keeps_local_state_out_of_the_build_context_but_not_the_code():
    patterns = [
        line.strip()
        for line in (ROOT / ".dockerignore").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    ]

    def ignored(path: str) -> bool:
        parts = path.split("/")
        prefixes = ["/".join(parts[: i + 1]) for i in range(len(parts))]
        return any(
            fnmatch(prefix, pattern.removeprefix("**/")) or fnmatch(prefix, pattern)
            for prefix in prefixes
            for pattern in patterns
        )

    for path in (
        ".venv/bin/python",
        "var/portal.sqlite3",
        ".git/HEAD",
        "var/secret_key",
        "platform/kustomize/overlays/example/secret.example.env",
        "jobs/__pycache__/x.pyc",
    ):
        assert ignored(path), path
    for path in (
        "requirements.txt",
        "requirements.lock",
        "manage.py",
        "platform/Procfile",
        "platform/docker-entrypoint.sh",
        "config/settings.py",
        "locale/zh_Hans/LC_MESSAGES/django.mo",
        "examples/digits/train.py",
        "frontend/static/frontend/portal.css",
    ):
        assert not ignored(path), path


def test_make_run_supervises_the_procfiles_processes_without_honcho_or_daphne():
    import configparser

    conf = configparser.RawConfigParser()
    conf.read(PLATFORM / "supervisord.conf")
    programs = {
        section.split(":", 1)[1]: conf[section] for section in conf.sections() if section.startswith("program:")
    }
    assert set(programs) == set(procfile()) == {"web", "worker", "beat", "watcher", "scheduler"}
    for name, program in programs.items():
        # The image's entrypoint runs the Procfile's line: `make run` and the image start the same commands.
        assert program["command"] == f"sh platform/docker-entrypoint.sh {name}"
        assert program["autorestart"] == "true" and program["stdout_events_enabled"] == "true"
        assert program["stdout_logfile"] == f"%(ENV_PORTAL_LOG_DIR)s/{name}.log"
    for section in ("unix_http_server", "supervisord"):
        for key in ("file", "logfile", "pidfile"):
            if key in conf[section]:
                assert conf[section][key].startswith("%(ENV_PORTAL_SUPERVISOR_DIR)s/"), (section, key)
    run = (ROOT / "Makefile").read_text().split("\nrun:", 1)[1].split("\n\n", 1)[0]
    assert "sh platform/supervise.sh" in run
    for path in [ROOT / "Makefile", *PLATFORM.rglob("*")]:
        if path.is_file():
            assert not re.search(r"\b(honcho|daphne)\b", path.read_text()), path
