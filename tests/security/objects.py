"""What the security suite calls the API about: one object of every kind owned by vision, a few of nlp's.

``world_with_objects`` builds the test world (tests/conftest.py) plus these objects once per module inside
an outer transaction that is rolled back at the end; each test then runs in a savepoint of it (pytest-django's
``db``), so a test that cancels a job or revokes a token leaves the next one the same fixtures.

PATH_FIXTURES says, for each path parameter, which object fills it, keyed by the path segment before the
parameter and its name ("jobs", "job_id"). A new endpoint whose parameter is not in the table fails with
"no fixture for path parameter X of /path/": add a line here, and a way to make the object below.
"""

from __future__ import annotations

import re
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

from django.apps import apps
from django.db import transaction
from django.test import override_settings
from django.utils import timezone

from accounts.models import Department, Membership
from accounts.tokens import token_create
from clusters.models import Cluster, Storage
from images.models import ImageBuild
from jobs import services as job_services
from jobs.api import parse_job_input
from jobs.models import Job
from models_registry.models import ModelAlias, ModelVersion, RegisteredModel
from serving import services
from tensorboards.models import TensorBoard
from tests.conftest import World

CODE_URL = "https://git.example.com/team/repo.git"
REGISTRY = "registry.example.com/portal"


@dataclass
class Objects:
    job: Job
    second_job: Job
    model: RegisteredModel
    version: ModelVersion
    deployment_name: str
    board: TensorBoard
    build: ImageBuild
    token_id: int
    nlp_job: Job
    nlp_model: RegisteredModel
    membership_id: int = 0
    storage_id: int = 0
    loan_id: int = 0
    webhook_id: int | None = None
    delivery_id: int | None = None

    # Strings that only vision's objects and people put in a response body; none may reach an outsider.
    VISION_MARKERS = (
        "vision",
        "alice",
        "carol",
        "vis-secret-job",
        "vis-second-job",
        "vis-secret-model",
        "vis-secret-deploy",
        "vis-secret-image",
        "vis-token",
        "vis-secret-hook",
        "whsec_vision",
    )
    # The same for nlp: none may reach vision's people.
    NLP_MARKERS = ("nlp", "bob", "nlp-secret-job", "nlp-secret-model")


# (segment before the parameter, parameter) -> the value for the vision-owned object.
PATH_FIXTURES = {
    ("jobs", "job_id"): lambda o: o.job.pk,
    ("models", "name"): lambda o: o.model.name,
    ("versions", "number"): lambda o: o.version.version,
    ("deployments", "name"): lambda o: o.deployment_name,
    ("tensorboards", "board_id"): lambda o: o.board.pk,
    ("image-builds", "build_id"): lambda o: o.build.pk,
    ("tokens", "token_id"): lambda o: o.token_id,
    ("departments", "slug"): lambda o: "vision",
    ("builds", "build_id"): lambda o: o.build.pk,
    ("members", "membership_id"): lambda o: o.membership_id,
    ("storage", "storage_id"): lambda o: o.storage_id,
    ("quota-loans", "loan_id"): lambda o: o.loan_id,
    ("loans", "loan_id"): lambda o: o.loan_id,  # the console's page that ends it
    ("webhooks", "webhook_id"): lambda o: o.webhook_id,
    ("deliveries", "delivery_id"): lambda o: o.delivery_id,
}


class MissingFixture(LookupError):
    pass


def fill_path(path: str, objects: Objects) -> str:
    """``/api/v1/jobs/{job_id}/`` -> ``/api/v1/jobs/12/`` with the vision-owned objects."""

    def value(match: re.Match) -> str:
        name = match.group(1)
        segment = path[: match.start()].rstrip("/").rsplit("/", 1)[-1]
        fixture = PATH_FIXTURES.get((segment, name))
        if fixture is None:
            raise MissingFixture(
                f"no fixture for path parameter {name} of {path} "
                f"(add ({segment!r}, {name!r}) to PATH_FIXTURES in tests/security/objects.py)"
            )
        return str(fixture(objects))

    return re.sub(r"\{([^}]+)\}", value, path)


def marker_found(markers, text: str) -> str | None:
    """The first marker that appears in ``text`` as a whole word (so "nlp" does not match inside another word)."""
    for marker in markers:
        if re.search(rf"(?<![A-Za-z0-9]){re.escape(marker)}(?![A-Za-z0-9])", text):
            return marker
    return None


def _submit(user, name: str, department: str) -> Job:
    values, type_errors = parse_job_input(
        {
            "name": name,
            "department": department,
            "code_url": CODE_URL,
            "command": "python train.py",
            "gpus_per_worker": 0,
        }
    )
    return job_services.job_submit(user=user, data=values, type_errors=type_errors)[0]


def _model(name: str, department: str, user, artifact_root: Path) -> tuple[RegisteredModel, ModelVersion]:
    model = RegisteredModel.objects.create(
        name=name, department=Department.objects.get(slug=department), created_by=user
    )
    versions = []
    for number in (1, 2):
        folder = artifact_root / name / str(number)
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "model.joblib").write_bytes(b"not loaded by these tests")
        versions.append(
            ModelVersion.objects.create(
                model=model, version=number, created_by=user, artifact_uri=f"store://{name}/{number}/model.joblib"
            )
        )
    ModelAlias.objects.create(model=model, name="champion", version=versions[0])
    return model, versions[0]


def build_objects(world: World, artifact_root: Path) -> Objects:
    vision = Department.objects.get(slug="vision")
    job, second = _submit(world.alice, "vis-secret-job", "vision"), _submit(world.alice, "vis-second-job", "vision")
    model, version = _model("vis-secret-model", "vision", world.alice, artifact_root)
    deployment = services.deployment_create(
        user=world.alice,
        name="vis-secret-deploy",
        department="vision",
        model=model.name,
        strategy="ab",
        variants=[{"name": "a", "version": 1, "weight": 50}, {"name": "b", "version": 2, "weight": 50}],
    )
    # Promoted once, so that a rollback has a revision to go back to.
    services.deployment_promote(user=world.alice, deployment=deployment, variant="b")
    ids = sorted([job.pk, second.pk])
    board = TensorBoard.objects.create(
        key="compare:" + ",".join(map(str, ids)), department=vision, started_by=world.alice
    )
    board.jobs.set([job, second])
    # Nobody answers at this address: builds are launched after commit, which these tests never reach.
    build_cluster = Cluster.objects.create(
        name="k8s-build",
        backend=Cluster.Backend.KUBERNETES,
        settings={"kube_url": "http://127.0.0.1:9", "build_registry": REGISTRY, "build_push_secret": "registry-push"},
        # Checked a moment ago and found reachable (clusters.services keeps that for CHECK_EVERY_SECONDS): the
        # rules are decided before the cluster is asked again.
        health=Cluster.Health.REACHABLE,
        health_checked_at=timezone.now(),
        health_since=timezone.now(),
    )
    # Asked for by carol: alice is a member and may not cancel it; carol and platform admins may.
    build = ImageBuild.objects.create(
        department=vision,
        cluster=build_cluster,
        requested_by=world.carol,
        name="vis-secret-image",
        dockerfile="FROM python:3.11\n",
    )
    token, _ = token_create(user=world.alice, name="vis-token")
    nlp_job = _submit(world.bob, "nlp-secret-job", "nlp")
    nlp_model, _ = _model("nlp-secret-model", "nlp", world.bob, artifact_root)
    objects = Objects(
        job=job,
        second_job=second,
        model=model,
        version=version,
        deployment_name=deployment.name,
        board=board,
        build=build,
        token_id=token.pk,
        nlp_job=nlp_job,
        nlp_model=nlp_model,
    )
    objects.membership_id = Membership.objects.get(user=world.alice, department=vision).pk
    objects.storage_id = Storage.objects.filter(department=vision).values_list("pk", flat=True).first()
    objects.loan_id = _loan(vision, world.carol)
    if apps.is_installed("webhooks"):
        objects.webhook_id, objects.delivery_id = _webhook(vision, world.carol, job)
    return objects


def _loan(department: Department, user) -> int:
    """A loan of 1 GPU from vision to a department nobody of the suite is in (so that nlp's people see nothing
    of it); that department has a quota of 0 on the pool, which a borrower needs."""
    from quotas.models import Quota, QuotaLoan

    lab = Department.objects.create(slug="sec-lab", name="Security lab")
    pool = Quota.objects.filter(department=department).select_related("pool").first().pool
    Quota.objects.create(department=lab, pool=pool, nominal=0)
    return QuotaLoan.objects.create(
        from_department=department,
        to_department=lab,
        pool=pool,
        gpus=1,
        until=timezone.now() + timedelta(days=1),
        created_by=user,
    ).pk


def _webhook(department: Department, user, job: Job) -> tuple[int, int]:
    """A webhook of the department with one delivery; deliveries are sent after commit, which never comes here."""
    from webhooks import services as webhook_services
    from webhooks.models import Webhook

    webhook = Webhook.objects.create(
        department=department,
        name="vis-secret-hook",
        url="https://hooks.example.com/in",
        events=["job.failed"],
        secret="whsec_vision-secret",
        created_by=user,
    )
    [delivery] = webhook_services.event_emit(
        department=department, event="job.failed", data={"id": job.pk, "name": job.name}
    )
    # As its last attempt left it: a failed delivery is what people redeliver.
    type(delivery).objects.filter(pk=delivery.pk).update(
        status="failed", attempts=8, next_attempt_at=None, error="connection refused"
    )
    return webhook.pk, delivery.pk


@contextmanager
def world_with_objects(django_db_blocker, root: Path):
    """The world and its objects for a whole module, rolled back afterwards."""
    with (
        django_db_blocker.unblock(),
        override_settings(
            PASSWORD_HASHERS=["django.contrib.auth.hashers.MD5PasswordHasher"],
            PORTAL_DATA_ROOT=root / "portal",
            PORTAL_ARTIFACT_ROOT=root / "artifacts",
            PORTAL_ARTIFACT_IMPORT_DIRS=[],
            # Webhook URLs are then checked for their form only: resolving a name would need a network.
            PORTAL_WEBHOOK_ALLOW_PRIVATE=True,
        ),
    ):
        with transaction.atomic():
            world = World(root / "world")
            yield world, build_objects(world, root / "artifacts")
            transaction.set_rollback(True)
