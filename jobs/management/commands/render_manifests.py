"""`python manage.py render_manifests --spec SPEC.json`: the Kubernetes manifests of a job, without a cluster.

SPEC.json is the body of POST /api/v1/jobs/ plus ``id`` (the run id the manifests are named after),
optionally ``placement`` (the scheduler's list of {worker, node, gpus, gpu_fraction}; one slot per
worker by default) and ``commit``. It is checked with the API's own submission rules, turned into the
executor's JobSpec like a launched job, and rendered with the named cluster's settings (defaults for
whatever a cluster leaves unset); every manifest is validated before it is printed.
"""

from __future__ import annotations

import json
import sys

import yaml
from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError
from rest_framework.exceptions import ValidationError

from clusters.k8s import ClusterSettings, ManifestError, department_manifests, priority_class_manifests
from clusters.manifest_validation import ManifestInvalid, check_manifests
from clusters.models import Cluster
from core.errors import InvalidInput
from jobs.api import PlacementSerializer, parse_job_input
from jobs.executor_specs import department_limit, job_spec, placement_of
from jobs.executors.manifests import job_manifests
from jobs.models import Job
from jobs.services import submitted_fields
from jobs.submission import check_submission
from quotas.models import PriorityClass


class _Dumper(yaml.SafeDumper):
    def ignore_aliases(self, data):
        return True


def _text(dumper, value: str):
    # Scripts stay readable as literal blocks.
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style="|" if "\n" in value else None)


_Dumper.add_representer(str, _text)


def dump_all(manifests: list[dict]) -> str:
    return yaml.dump_all(manifests, Dumper=_Dumper, sort_keys=False, default_flow_style=False, allow_unicode=True)


class Command(BaseCommand):
    help = "Print the Kubernetes manifests (YAML) of a job given as the POST /api/v1/jobs/ body plus id and placement."

    def add_arguments(self, parser):
        parser.add_argument("--spec", required=True, help="JSON file with the job ('-' reads standard input)")
        parser.add_argument("--user", help="check the submission as this user (default: as a platform admin)")
        parser.add_argument(
            "--with-department",
            action="store_true",
            help="also print the department's Namespace, ResourceQuota and job volume, and the PriorityClasses",
        )

    def handle(self, *args, spec, user, with_department, **options):
        body = self.read(spec)
        run_id = body.pop("id", None)
        placement = body.pop("placement", None)
        commit = body.pop("commit", None)
        if run_id in (None, "") or not isinstance(run_id, str | int):
            raise CommandError('The spec needs "id": the job\'s run id, e.g. "42-0f3a9c1e".')
        values, type_errors = parse_job_input(body)
        try:
            # A preview: the cluster need not take jobs now (the demo's k8s-demo is rendering-only).
            clean = check_submission(user=self.user(user), data=values, type_errors=type_errors, cluster_health=False)
        except InvalidInput as exc:
            raise CommandError("The job spec is not valid:\n" + _field_errors(exc.errors)) from None
        job = Job(
            **submitted_fields(clean),
            run_id=str(run_id),
            placement=self.placement(placement, clean.workers, clean.gpus_per_worker),
        )
        cluster = job.cluster
        if cluster.backend != Cluster.Backend.KUBERNETES:
            self.stderr.write(
                f"Note: cluster {cluster.name} uses the {cluster.backend} backend; rendering with "
                "the Kubernetes defaults for whatever its settings leave unset."
            )
        try:
            settings = ClusterSettings.from_cluster(
                cluster.name,
                cluster.settings,
                [(pool.gpu_type, pool.gpu_memory_gb) for pool in cluster.pools.all()],
            )
            manifests = job_manifests(
                job_spec(job),
                placement_of(job),
                settings,
                gpu_type=job.pool.gpu_type,
                priority=job.priority.name,
                tensorboard=job.tensorboard,
                commit=commit or None,
            )
            if with_department:
                priorities = PriorityClass.objects.values_list("name", "value", "preemptible")
                manifests = [
                    *department_manifests(job.department.slug, department_limit(job.department, cluster), settings),
                    *priority_class_manifests(priorities, settings),
                    *manifests,
                ]
            check_manifests(manifests)
        except ManifestError as exc:
            raise CommandError(f"The job cannot run on cluster {cluster.name}: {exc}") from None
        except ManifestInvalid as exc:
            raise CommandError("The rendered manifests are not valid (a bug in the portal):\n" + str(exc)) from None
        self.stdout.write(dump_all(manifests), ending="")

    def read(self, path: str) -> dict:
        try:
            if path == "-":
                text = sys.stdin.read()
            else:
                with open(path, encoding="utf-8") as file:
                    text = file.read()
        except OSError as exc:
            raise CommandError(f"Cannot read {path}: {exc.strerror}.") from None
        try:
            body = json.loads(text)
        except json.JSONDecodeError as exc:
            raise CommandError(f"{path} is not JSON: {exc}.") from None
        if not isinstance(body, dict):
            raise CommandError(f"{path} must hold a JSON object (the POST /api/v1/jobs/ body plus id and placement).")
        return body

    def user(self, username: str | None):
        model = get_user_model()
        if username is None:
            return model(username="render-manifests", is_staff=True, is_active=True)  # never saved
        user = model.objects.filter(username=username).first()
        if user is None:
            raise CommandError(f"No user called {username!r}.")
        return user

    def placement(self, slots, workers: int, gpus: float) -> list[dict]:
        if slots is None:
            whole = int(gpus) if gpus >= 1 else (1 if gpus else 0)
            return [
                {
                    "worker": index,
                    "node": f"node-{index}",
                    "gpus": list(range(whole)),
                    "gpu_fraction": gpus if 0 < gpus < 1 else None,
                }
                for index in range(workers)
            ]
        serializer = PlacementSerializer(data=slots, many=True)
        try:
            serializer.is_valid(raise_exception=True)
        except ValidationError as exc:
            raise CommandError(
                f'"placement" is not a list of {{worker, node, gpus, gpu_fraction}}: {exc.detail}'
            ) from None
        if sorted(slot["worker"] for slot in serializer.validated_data) != list(range(workers)):
            raise CommandError(
                f'"placement" must have one slot for each of the {workers} workers (worker 0 to {workers - 1}).'
            )
        return [dict(slot) for slot in serializer.validated_data]


def _field_errors(errors: dict) -> str:
    return "\n".join(
        f"  {field}: {' '.join(str(message) for message in messages)}" for field, messages in errors.items()
    )
