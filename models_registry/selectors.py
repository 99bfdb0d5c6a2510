"""Reads of the model registry: the models and versions a user may see, and what a job left behind.

Tenancy is accounts.permissions': members of a model's department and platform admins see it; to everyone
else it does not exist (None here, 404 at the interfaces).
"""

from __future__ import annotations

import math
import os
import struct
from collections import Counter
from pathlib import Path

from django.db.models import Count, Max, Prefetch, QuerySet

from accounts import permissions
from jobs.executors.local_jobdir import JobDir
from jobs.models import Job
from models_registry.models import ModelAlias, ModelVersion, RegisteredModel


def models_for(*, user, department: str = "", search: str = "") -> QuerySet[RegisteredModel]:
    models = permissions.scope(
        user, RegisteredModel.objects.select_related("department", "created_by")
    ).prefetch_related(Prefetch("aliases", queryset=ModelAlias.objects.select_related("version").order_by("name")))
    if department:
        models = models.filter(department__slug=department)
    if search:
        models = models.filter(name__icontains=search)
    return models.annotate(version_count=Count("versions"), latest_version=Max("versions__version")).order_by("name")


def model_get(*, user, name: str) -> RegisteredModel | None:
    """The model if the user may see it; None otherwise (the interfaces answer 404 alike)."""
    return permissions.scope(user, RegisteredModel.objects.select_related("department")).filter(name=name).first()


def versions_of(*, model: RegisteredModel) -> QuerySet[ModelVersion]:
    return (
        ModelVersion.objects.filter(model=model)
        .select_related("model", "source_job", "created_by")
        .prefetch_related(Prefetch("aliases", queryset=ModelAlias.objects.order_by("name")))
        .order_by("version")
    )


def version_get(*, model: RegisteredModel, number: int) -> ModelVersion | None:
    return versions_of(model=model).filter(version=number).first()


def aliases_of(*, model: RegisteredModel) -> dict[str, int]:
    """alias name -> version number (from the prefetched aliases when models_for fetched them)."""
    return {alias.name: alias.version.version for alias in sorted(model.aliases.all(), key=lambda a: a.name)}


def metric_names(versions) -> list[str]:
    """Every metric any of the versions has, sorted: the rows of a side-by-side comparison."""
    return sorted({name for version in versions for name in version.metrics})


def metric_series(version: ModelVersion, versions) -> list[dict]:
    """Each metric of ``version`` with the value every one of ``versions`` has for it (oldest first), so a
    page can say whether this version's value is the best of the model's."""
    return [
        {
            "name": name,
            "value": version.metrics[name],
            "series": [{"version": other.version, "value": other.metrics.get(name)} for other in versions],
            "values": [other.metrics.get(name) for other in versions],
        }
        for name in sorted(version.metrics)
    ]


def version_deployments(version: ModelVersion) -> list[dict]:
    """The deployments with a variant on this version, by name: each with the variant's name, weight and
    whether it is a shadow. serving's Variant rows point at the version; they are read through that reverse
    relation (``variants``), as this app may not import serving. A deployment serves only versions of its own
    model, so they are all in the model's department."""
    return [
        {
            "name": v.deployment.name,
            "status": v.deployment.status,
            "variant": v.name,
            "weight": v.weight,
            "shadow": v.shadow,
        }
        for v in version.variants.select_related("deployment").order_by("deployment__name", "name")
    ]


# --- What a finished job left behind (local executor) ---------------------------------------------


def job_run_dirs(*, job: Job, executor_root: Path) -> list[JobDir]:
    """The job's run folders, its final run last (a re-queued job has one run per admission).

    Same layout as tensorboards.services: <executor root>/jobs/<job id>-<hex>/ (jobs/executors/local_jobdir.py).
    """
    jobs_root = Path(executor_root) / "jobs"
    earlier = sorted(
        p.name
        for p in jobs_root.glob(f"{job.pk}-*")
        if p.is_dir() and p.name != job.run_id and JobDir(p).belongs_to(job.storage_key)
    )
    names = [*earlier, job.run_id] if job.run_id else earlier
    return [JobDir(jobs_root / name) for name in names]


def job_tensorboard_runs(*, job: Job, executor_root: Path) -> list[Path]:
    """The job's TensorBoard folders of today's layout, <executor root>/tensorboard/<job id>/run-<n>/, in run order."""
    folder = Path(executor_root) / "tensorboard" / job.storage_key
    runs = [p for p in folder.glob("run-*") if p.name[4:].isdigit() and not p.is_symlink()]
    return sorted(runs, key=lambda p: int(p.name[4:]))


def tensorboard_scalars(folders: list[Path]) -> dict[str, float]:
    """The last value of every scalar tag in the event files under the folders (one per run of a job).

    "Last" is the latest written (wall time), so a run resumed after preemption wins over the run it
    continued. A tag is named as logged when only one sub-folder has it (e.g. a job writing to
    ``worker-0/``); when several have it (one per worker, or tensorboardX's add_scalars series), each
    is prefixed with its sub-folder.
    """
    # Imported here: tensorboard takes a noticeable time to import, and only registration needs it.
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    latest: dict[tuple[str, str], tuple[float, float]] = {}
    for folder in folders:
        if not folder.is_dir():
            continue
        for directory, _subdirs, files in os.walk(folder):
            if not any("tfevents" in name for name in files):
                continue
            accumulator = EventAccumulator(directory, size_guidance={"scalars": 1})
            accumulator.Reload()
            where = Path(directory).relative_to(folder).as_posix()
            for tag in accumulator.Tags().get("scalars", []):
                event = accumulator.Scalars(tag)[-1]
                if not math.isfinite(event.value):
                    continue  # JSON has no NaN or infinity; a diverged metric is better missing than invented
                key = (where, tag)
                if key not in latest or event.wall_time >= latest[key][0]:
                    latest[key] = (event.wall_time, _plain(event.value))
    places = Counter(tag for _where, tag in latest)
    named = {
        (tag if places[tag] == 1 or where == "." else f"{where}/{tag}"): value
        for (where, tag), (_wall, value) in latest.items()
    }
    return dict(sorted(named.items()))


def _plain(value: float) -> float:
    """The shortest decimal that is the same float32: event files store float32, so a logged 0.2 comes
    back as 0.20000000298...; show the digits the job logged."""
    stored = struct.pack("<f", value)
    for digits in range(1, 10):
        candidate = float(f"{value:.{digits}g}")
        try:
            if struct.pack("<f", candidate) == stored:
                return candidate
        except OverflowError:  # rounded past the largest float32
            continue
    return value
