"""A database built before issue 15 moved models between apps migrates to the new layout with every row kept.

The fixtures in data/ were made by the code of commit 4b8987a (the last one before the move): `manage.py migrate`,
`manage.py demo`, then one row in every table that moves (tests/migrations_layout/seed_before_the_move.py, run
with that commit's `manage.py shell`), dumped with `pg_dump --inserts` and sqlite3's iterdump. The test loads the
dump for the database the suite runs on (SQLite, or PostgreSQL when DATABASE_URL says so) into a database of its
own, runs today's `manage.py migrate` on it in a separate process, as an upgrade would, and reads the rows back
through the models in their new apps.
"""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
import uuid
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import pytest

ROOT = Path(__file__).resolve().parents[2]
DATA = Path(__file__).resolve().parent / "data"

CHECK = r"""
import json
from django.contrib.contenttypes.models import ContentType
from django.db import connection
from django.db.migrations.executor import MigrationExecutor

from accounts.models import ApiToken, AuditEvent, Department, Membership
from clusters.models import Cluster, GpuPool, Storage
from images.models import FrameworkImage, ImageBuild
from jobs.models import Job
from models_registry.models import ModelVersion
from quotas.models import Quota
from serving.models import Deployment, ModelServer, Variant, VariantStats
from tensorboards.models import TensorBoard
from webhooks.models import Webhook

job = Job.objects.select_related("department", "cluster", "pool", "image", "priority").get(name="premove-job")
variant = Variant.objects.select_related("deployment__model", "version__source_job").get(deployment__name="premove-deploy")
board = TensorBoard.objects.get(key=f"job:{job.pk}")
fresh = Department.objects.create(slug="after-move", name="After the move")  # the tables still take new rows
Membership.objects.create(department=fresh, user=job.submitted_by, role="member")
executor = MigrationExecutor(connection)
print(json.dumps({
    "counts": {m.__name__: m.objects.count() for m in [Department, Membership, ApiToken, AuditEvent, Cluster, GpuPool,
               Storage, FrameworkImage, ImageBuild, Quota, Job, TensorBoard, ModelVersion, Deployment, Variant,
               ModelServer, VariantStats, Webhook]},
    "job": [job.department.slug, job.cluster.name, job.pool.gpu_type, job.image.official, job.submitted_by.username],
    "placement": sorted(set(GpuPool.objects.values_list("placement", flat=True))),
    "board_jobs": list(board.jobs.values_list("name", flat=True)),
    "variant": [variant.deployment.model.name, variant.version.version, variant.version.source_job.name,
                variant.server.status != "", variant.stats.requests],
    "build": [ImageBuild.objects.get().department.slug, ImageBuild.objects.get().cluster.name],
    "audit": list(AuditEvent.objects.filter(action="premove.seed").values_list("department__slug", flat=True)),
    "token_users": sorted(ApiToken.objects.values_list("user__username", flat=True)),
    "webhook": Webhook.objects.get(name="premove").deliveries.count(),
    "content_types": sorted({ct.app_label for ct in ContentType.objects.filter(
        model__in=["department", "cluster", "frameworkimage", "imagebuild", "tensorboard", "deployment"])}),
    "unapplied": [str(m) for m, _ in executor.migration_plan(executor.loader.graph.leaf_nodes())],
}))
"""


def _manage(env: dict, *args: str, stdin: str | None = None) -> str:
    result = subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=ROOT,
        env=env,
        input=stdin,
        text=True,
        capture_output=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    return result.stdout


@pytest.fixture
def database_before_the_move(tmp_path):
    """DATABASE_URL of a new database holding the dump of the pre-move layout (dropped afterwards)."""
    url = os.environ.get("DATABASE_URL", "")
    if not url.startswith(("postgres://", "postgresql://")):
        path = tmp_path / "before.sqlite3"
        with sqlite3.connect(path) as db:
            db.executescript((DATA / "before-issue-15.sqlite.sql").read_text())
        yield f"sqlite:///{path}"
        return
    import psycopg

    name = f"premove_{uuid.uuid4().hex[:10]}"
    server = urlsplit(url)
    with psycopg.connect(urlunsplit(server._replace(path="/postgres")), autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    target = urlunsplit(server._replace(path=f"/{name}"))
    try:
        with psycopg.connect(target, autocommit=True) as db:
            db.execute((DATA / "before-issue-15.postgres.sql").read_text())
        yield target
    finally:
        with psycopg.connect(urlunsplit(server._replace(path="/postgres")), autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def test_a_database_from_before_the_move_migrates_with_every_row_kept(database_before_the_move, tmp_path):
    env = {**os.environ, "DATABASE_URL": database_before_the_move, "PORTAL_DATA_ROOT": str(tmp_path / "data")}
    env.pop("REDIS_URL", None)
    plan = _manage(env, "migrate", "--plan")
    assert "accounts.0001_initial" in plan and "quotas.0004_moved_models" in plan  # it really was the old layout
    _manage(env, "migrate", "--noinput")
    found = json.loads(_manage(env, "shell", "--no-imports", "-c", CHECK).strip().splitlines()[-1])

    assert found["counts"] == {
        "Department": 3,
        "Membership": 4,
        "ApiToken": 2,
        "AuditEvent": 1,
        "Cluster": 2,
        "GpuPool": 3,
        "Storage": 3,
        "FrameworkImage": 3,
        "ImageBuild": 1,
        "Quota": 6,
        "Job": 1,
        "TensorBoard": 1,
        "ModelVersion": 1,
        "Deployment": 1,
        "Variant": 1,
        "ModelServer": 1,
        "VariantStats": 1,
        "Webhook": 1,
    }  # the seed's rows (plus the department and membership the check itself adds)
    assert found["job"] == ["vision", "local", "sim", True, "alice"]  # the dumps' local pool is the simulated one
    assert found["placement"] == ["binpack"]  # what every pool did before the field existed
    assert found["board_jobs"] == ["premove-job"]
    assert found["variant"] == ["premove-model", 1, "premove-job", True, 0]
    assert found["build"] == ["vision", "k8s-demo"]
    assert found["audit"] == ["vision"]
    assert found["token_users"] == ["alice", "alice"]
    assert found["webhook"] == 1
    assert found["content_types"] == ["accounts", "clusters", "images", "serving", "tensorboards"]
    assert found["unapplied"] == []
    # Nothing left for makemigrations: the moved state matches the models.
    _manage(env, "makemigrations", "--check", "--dry-run")
