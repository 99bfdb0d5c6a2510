"""Run with the code of commit 4b8987a (before issue 15), after `manage.py migrate` and `manage.py demo`:
`manage.py shell < tests/migrations_layout/seed_before_the_move.py` puts a row in every table that moves.
Not collected by pytest (no test_ prefix); kept to remake data/ if the fixture must change."""

from datetime import timedelta

from builds.models import ImageBuild
from django.contrib.auth import get_user_model
from django.utils import timezone

from jobs.models import Job, JobEvent, TensorBoard
from models_registry.models import Deployment, ModelServer, ModelVersion, RegisteredModel, Variant, VariantStats
from quotas.models import (
    ApiToken,
    AuditEvent,
    Cluster,
    Department,
    FrameworkImage,
    GpuPool,
    Membership,
    PriorityClass,
    Quota,
    Storage,
)
from quotas.tokens import token_create
from webhooks.models import Delivery, Webhook

users = get_user_model().objects
alice, admin = users.get(username="alice"), users.get(username="admin")
vision = Department.objects.get(slug="vision")
local = Cluster.objects.get(name="local")
pool = GpuPool.objects.filter(cluster=local).first()
image = FrameworkImage.objects.filter(official=True).first()
priority = PriorityClass.objects.order_by("value").first()
Storage.objects.get_or_create(
    department=vision, name="premove-data", defaults={"kind": "local", "local_path": "/tmp/premove-data"}
)
token_create(user=alice, name="premove")
AuditEvent.objects.create(actor=admin, action="premove.seed", target="vision", department=vision, data={"n": 1})
now = timezone.now()
job = Job.objects.create(
    name="premove-job",
    department=vision,
    cluster=local,
    pool=pool,
    submitted_by=alice,
    code_url="https://example.com/team/repo.git",
    command="python train.py",
    image=image,
    priority=priority,
    gpus_per_worker=1,
    workers=1,
    status="succeeded",
    admitted_at=now - timedelta(hours=1),
    started_at=now - timedelta(hours=1),
    finished_at=now,
)
JobEvent.objects.create(job=job, time=now, from_status="running", to_status="succeeded", message="premove")
board = TensorBoard.objects.create(key=f"job:{job.pk}", department=vision, started_by=alice, status="stopped")
board.jobs.add(job)
model = RegisteredModel.objects.create(name="premove-model", department=vision, created_by=alice)
version = ModelVersion.objects.create(
    model=model, version=1, artifact_uri="store://premove-model/1/model.joblib", source_job=job, created_by=alice
)
deployment = Deployment.objects.create(
    name="premove-deploy", department=vision, model=model, cluster=local, created_by=alice
)
variant = Variant.objects.create(deployment=deployment, name="a", version=version, weight=100)
ModelServer.objects.create(variant=variant)
VariantStats.objects.create(variant=variant)
k8s = Cluster.objects.get_or_create(name="k8s-demo", defaults={"backend": "kubernetes"})[0]
ImageBuild.objects.create(
    name="premove-image", department=vision, cluster=k8s, requested_by=alice, dockerfile="FROM python:3.11-slim\n"
)
hook = Webhook.objects.create(
    department=vision,
    name="premove",
    url="https://example.com/hook",
    secret="whsec_premove",
    events=["job.succeeded"],
    created_by=alice,
)
Delivery.objects.create(
    webhook=hook, event="job.succeeded", event_id="6f1c8e0e-4b8a-4a57-9d3e-3c1e3c0d9a01", payload={"job": job.pk}
)
print(
    "seeded",
    {
        m.__name__: m.objects.count()
        for m in [
            Department,
            Membership,
            ApiToken,
            AuditEvent,
            Cluster,
            GpuPool,
            Storage,
            FrameworkImage,
            ImageBuild,
            Quota,
            PriorityClass,
            Job,
            TensorBoard,
            RegisteredModel,
            ModelVersion,
            Deployment,
            Variant,
            ModelServer,
            VariantStats,
            Webhook,
            Delivery,
        ]
    },
)
