"""Image builds: submit, cancel, launch Kaniko Jobs on Kubernetes, follow them, and add what they built to the
department's catalogue.

Every cluster call goes through ``clusters.kube.Kube``. Creating a build's objects is
idempotent (fixed names; 409 answers the existing object), so a launch retried after a transient error
never makes a second Job. The catalogue image is created in the same transaction that marks the build
succeeded, under the build's row lock, so retries and concurrent reconciles add it exactly once.
"""

from __future__ import annotations

import json
import logging

from django.core.exceptions import PermissionDenied
from django.db import IntegrityError, transaction
from django.utils import timezone

from accounts import permissions
from accounts.services import audit_record
from clusters import health
from clusters.errors import ExecutorError
from clusters.k8s import ManifestError, namespace_manifest
from clusters.manifest_validation import ManifestInvalid, check_manifests
from clusters.models import Cluster
from clusters.services import cluster_health, executor_call
from core.celery import TransientError
from core.errors import Conflict, InvalidInput
from images import manifests, tasks
from images.manifests import BuildSetupError, BuildSpec
from images.models import FrameworkImage, ImageBuild
from images.observe import BUILDING, FAILED, QUEUED, SUCCEEDED, failure_message, observe
from images.submission import build_settings, check_build

log = logging.getLogger(__name__)


# --- Submitting and cancelling -------------------------------------------------------


def build_submit(*, user, data: dict, type_errors: dict | None = None) -> ImageBuild:
    """Queue a build; it is launched after commit (and by the periodic reconcile if that task is lost)."""
    clean = check_build(user=user, data=data, type_errors=type_errors)
    try:
        with transaction.atomic():
            build = ImageBuild.objects.create(
                department=clean.department,
                cluster=clean.cluster,
                requested_by=user,
                name=clean.name,
                framework=clean.framework,
                base_packages=clean.base_packages,
                dockerfile=clean.dockerfile,
                code_url=clean.code_url,
                code_ref=clean.code_ref,
                dockerfile_path=clean.dockerfile_path,
                context_path=clean.context_path,
                message="Waiting to be launched on the cluster.",
            )
            audit_record(
                actor=user,
                action="build.submit",
                target=f"image build {build.pk} ({build.name})",
                department=build.department,
                data={"cluster": build.cluster.name, "source": build.source},
            )
    except IntegrityError as exc:
        # A concurrent request took the name between the check and the insert.
        raise InvalidInput(
            {"name": [f"Another build is already making an image called {clean.name!r}; choose another name."]}
        ) from exc
    build_id = build.pk
    transaction.on_commit(lambda: tasks.launch_build.delay(build_id))
    return build


def build_cancel(*, user, build: ImageBuild) -> ImageBuild:
    """Cancel a queued or running build; its Job (and pod) and ConfigMap are deleted from the cluster."""
    if build.requested_by_id != user.pk and not permissions.can_manage(user, build):
        raise PermissionDenied(
            f"Only {build.requested_by.username} (who asked for this build) or an admin of "
            f"{build.department.slug} can cancel it."
        )
    launched = build.launched_at is not None
    updated = ImageBuild.objects.filter(pk=build.pk, status__in=ImageBuild.ACTIVE).update(
        status=ImageBuild.Status.CANCELLED,
        finished_at=timezone.now(),
        cleanup_pending=launched,
        message=f"Cancelled by {user.username}.",
    )
    build.refresh_from_db()
    if not updated:
        raise Conflict(f"Build {build.pk} has already {build.status}; there is nothing to cancel.")
    audit_record(
        actor=user, action="build.cancel", target=f"image build {build.pk} ({build.name})", department=build.department
    )
    if launched:
        try:
            _clean_up(build)
        except (ExecutorError, ManifestError, BuildSetupError) as exc:  # the reconcile tries again
            log.warning("build %s: could not delete its objects yet: %s", build.pk, exc)
    return build


# --- On the cluster ------------------------------------------------------------------

# Options of the Kube client (retries, backoff_seconds, timeout_seconds); tests shorten them.
KUBE_OPTIONS: dict = {}
# One API client (a connection pool) per cluster and process; rebuilt when the cluster's settings change.
_clients: dict[int, tuple[str, object]] = {}


def kube_for(cluster: Cluster):
    from clusters.kube import Kube  # the one module that talks to the cluster

    key = json.dumps([cluster.settings, KUBE_OPTIONS], sort_keys=True)
    cached = _clients.get(cluster.pk)
    if cached is None or cached[0] != key:
        if cached is not None:
            cached[1].close()
        cached = _clients[cluster.pk] = (key, Kube.from_settings(cluster.settings, **KUBE_OPTIONS))
    return cached[1]


def build_spec(build: ImageBuild) -> BuildSpec:
    return BuildSpec(
        build_id=build.pk,
        name=build.name,
        department=build.department.slug,
        tag=f"build-{build.pk}",
        dockerfile=build.dockerfile,
        code_url=build.code_url,
        code_ref=build.code_ref,
        dockerfile_path=build.dockerfile_path,
        context_path=build.context_path,
    )


def build_launch(*, build_id: int) -> None:
    """Create the build's objects on its cluster (idempotent). A transient cluster error raises TransientError."""
    build = ImageBuild.objects.select_related("cluster", "department").get(pk=build_id)
    if build.status != ImageBuild.Status.QUEUED or build.launched_at is not None:
        return
    spec = build_spec(build)
    try:
        cluster, settings = build_settings(build.cluster)
        job_manifest = manifests.job_manifest(spec, settings, cluster)
        check_manifests([job_manifest])
    except (ManifestError, BuildSetupError, ManifestInvalid) as exc:
        _finish(build, ImageBuild.Status.FAILED, f"Cannot build on cluster {build.cluster.name}: {exc}")
        return
    kube = kube_for(build.cluster)
    executor_call(lambda: kube.create(namespace_manifest(spec.department, cluster)))
    job, _created = executor_call(lambda: kube.create(job_manifest))
    if spec.pasted:
        # Owned by the Job: deleting the Job deletes it. Its pod waits for the volume until it exists.
        config_map = manifests.context_config_map(spec, cluster, job_uid=job["metadata"]["uid"])
        executor_call(lambda: kube.create(config_map))
    updated = ImageBuild.objects.filter(pk=build.pk, status=ImageBuild.Status.QUEUED, launched_at__isnull=True).update(
        launched_at=timezone.now(),
        destination=manifests.destination(spec, settings),
        message="Waiting for the build pod to start.",
    )
    if not updated:  # cancelled while we were creating: take the objects back down
        build.refresh_from_db()
        if build.status == ImageBuild.Status.CANCELLED:
            ImageBuild.objects.filter(pk=build.pk).update(cleanup_pending=True)
            executor_call(lambda: _clean_up(build))


def _observe(build: ImageBuild):
    """(kube, namespace, Observed) of a launched build."""
    cluster, _settings = build_settings(build.cluster)
    kube = kube_for(build.cluster)
    namespace = cluster.namespace(build.department.slug)
    job = executor_call(lambda: kube.get("batch/v1", "Job", namespace, manifests.job_name(build_spec(build))))
    pods, _version = executor_call(
        lambda: kube.list("v1", "Pod", namespace=namespace, labels=f"{manifests.BUILD_ID_LABEL}={build.pk}")
    )
    return kube, namespace, observe(job, pods)


def build_follow(*, build: ImageBuild) -> str:
    """Read the build's Job and pods and move it on; returns its status afterwards."""
    kube, namespace, observed = _observe(build)
    if observed.phase == SUCCEEDED:
        return build_succeed(build=build, digest=observed.digest)
    if observed.phase == FAILED:
        text = _log(kube, namespace, observed.pod)
        _finish(build, ImageBuild.Status.FAILED, failure_message(observed, text))
        return ImageBuild.Status.FAILED
    active = ImageBuild.objects.filter(pk=build.pk, status__in=ImageBuild.ACTIVE)
    if observed.phase == BUILDING and build.status == ImageBuild.Status.QUEUED:
        active.update(
            status=ImageBuild.Status.BUILDING, started_at=timezone.now(), message="Kaniko is building the image."
        )
        return ImageBuild.Status.BUILDING
    if observed.phase == QUEUED and observed.message != build.message:
        active.update(message=observed.message)
    return build.status


def build_succeed(*, build: ImageBuild, digest: str = "") -> str:
    """Mark the build succeeded and add its image to the department's catalogue, exactly once."""
    with transaction.atomic():
        build = ImageBuild.objects.select_for_update().select_related("department").get(pk=build.pk)
        if build.status not in ImageBuild.ACTIVE:
            return build.status
        reference = f"{build.destination}@{digest}" if digest else build.destination
        if FrameworkImage.objects.filter(name=build.name).exists():
            # Only a platform admin can have added this name since the build was accepted.
            build.status, build.message = (
                ImageBuild.Status.FAILED,
                (
                    f"Built and pushed {reference}, but the catalogue meanwhile got another image called {build.name!r}; "
                    "submit again under another name."
                ),
            )
        else:
            build.image = FrameworkImage.objects.create(
                name=build.name,
                framework=build.framework,
                image=reference,
                official=False,
                department=build.department,
                base_packages=build.base_packages,
            )
            build.status, build.message = ImageBuild.Status.SUCCEEDED, f"Added to the catalogue as {build.name}."
        build.finished_at = timezone.now()
        build.save(update_fields=["status", "message", "finished_at", "image"])
    return build.status


def builds_reconcile() -> dict[str, int]:
    """Launch queued builds, follow launched ones, delete what cancelled ones left. Runs periodically.

    A cluster that does not answer holds up only its own builds: each build is tried on its own.
    """
    counts = {"launched": 0, "followed": 0, "cleaned": 0, "errors": 0, "held": 0}
    for build in ImageBuild.objects.filter(status__in=ImageBuild.ACTIVE).select_related("cluster", "department"):
        found = cluster_health(build.cluster)  # as stored: the cluster's state changes are logged once, there
        if not found.takes_builds:
            counts["held"] += 1
            _hold(build, found)
            continue
        try:
            if build.launched_at is None:
                build_launch(build_id=build.pk)
                counts["launched"] += 1
            else:
                build_follow(build=build)
                counts["followed"] += 1
        except TransientError as exc:
            counts["errors"] += 1
            log.warning("build %s: the cluster did not answer, trying again later: %s", build.pk, exc)
        except (ExecutorError, ManifestError, BuildSetupError) as exc:
            counts["errors"] += 1
            _finish(build, ImageBuild.Status.FAILED, f"Cluster {build.cluster.name}: {exc}")
    for build in ImageBuild.objects.filter(cleanup_pending=True).select_related("cluster", "department"):
        try:
            _clean_up(build)
            counts["cleaned"] += 1
        except (ExecutorError, ManifestError, BuildSetupError) as exc:
            counts["errors"] += 1
            log.warning("build %s: could not delete its objects yet: %s", build.pk, exc)
    return counts


def _hold(build: ImageBuild, found) -> None:
    """A build whose cluster cannot be reached waits for it, saying so (once), instead of failing every tick."""
    message = (
        f"Waiting for cluster {build.cluster.name}, which is unreachable ({health.short_reason(found)}); "
        "the build goes on when it is back."
    )
    if build.message != message:
        build.message = message
        build.save(update_fields=["message"])


def build_logs(*, build: ImageBuild) -> str:
    """Kaniko's output so far ('' before a pod exists). Raises ExecutorError when the cluster cannot be read."""
    if build.launched_at is None:
        return ""
    kube, namespace, observed = _observe(build)
    return _log(kube, namespace, observed.pod)


def _log(kube, namespace: str, pod: str) -> str:
    if not pod:
        return ""
    try:
        return kube.pod_log(namespace, pod, container=manifests.CONTAINER)
    except ExecutorError as exc:
        if getattr(exc, "status", None) == 400:  # the container has not started: no log yet
            return ""
        raise


def _clean_up(build: ImageBuild) -> None:
    """Delete the build's Job; its pod and ConfigMap are owned by it and go with it."""
    cluster, _settings = build_settings(build.cluster)
    kube = kube_for(build.cluster)
    kube.delete(
        "batch/v1",
        "Job",
        cluster.namespace(build.department.slug),
        manifests.job_name(build_spec(build)),
        propagation="Foreground",
    )
    ImageBuild.objects.filter(pk=build.pk).update(cleanup_pending=False)


def _finish(build: ImageBuild, status: str, message: str) -> None:
    ImageBuild.objects.filter(pk=build.pk, status__in=ImageBuild.ACTIVE).update(
        status=status, message=message, finished_at=timezone.now()
    )
