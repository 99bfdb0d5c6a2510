"""Registering a model version from a job: the job's side of the registry.

Owns what is checked when a version names its ``source_job`` (the caller may see the job, it belongs to the
model's department, it succeeded, its output folder is readable and the artifact lies inside it), the
lineage recorded from the job, and ``version_artifact_copy``, the body of the task that copies the artifact
out of the job's output folder into the store (``registering`` -> ``ready``, or ``failed`` with why) and
reads the job's TensorBoard scalars as metrics. models_registry/services.py (the registry's writes) calls
``job_source`` and ``lineage_of`` and re-exports ``version_artifact_copy`` for the task.
"""

from __future__ import annotations

import os
import stat
import tempfile
from dataclasses import dataclass
from pathlib import Path

from django.db import transaction

from clusters.errors import ExecutorError
from jobs import lifecycle
from jobs import selectors as job_selectors
from jobs.models import Job
from jobs.running import executor_for
from models_registry import artifacts, selectors
from models_registry.models import ModelVersion
from webhooks import events as webhook_events


def job_source(errors: dict, *, user, model, source_job: int, artifact_path: str) -> tuple[Path | None, Job | None]:
    """The file or folder to copy out of ``source_job``'s output and the job; problems go into ``errors``."""
    job = job_selectors.job_get(user=user, job_id=source_job)
    if job is None:
        errors["source_job"] = [f"No job {source_job} in your departments."]
        return None, None
    if job.department_id != model.department_id:
        errors["source_job"] = [
            f"Job {job.pk} belongs to department {job.department.slug} and model {model.name} to "
            f"{model.department.slug}: register it in a model of {job.department.slug}."
        ]
        return None, job
    if job.status != lifecycle.SUCCEEDED:
        errors["source_job"] = [f"Job {job.pk} is {job.status}: only the output of a succeeded job can be registered."]
        return None, job
    output = _output_dir(errors, job)
    if output is None:
        return None, job
    try:
        return artifacts.resolve_inside(output, artifact_path, what=f"the output folder of job {job.pk}"), job
    except artifacts.ArtifactError as exc:
        errors["artifact_path"] = [str(exc)]
        return None, job


def _output_dir(errors: dict, job: Job) -> Path | None:
    try:
        executor = executor_for(job.cluster)
    except ExecutorError as exc:
        errors["source_job"] = [
            f"The portal cannot read the output of job {job.pk}: {exc.message} "
            "Copy the artifact somewhere it can and register it by artifact_uri."
        ]
        return None
    root = getattr(executor, "root", None)  # only executors that keep run folders on this host have one
    if root is None:
        errors["source_job"] = [
            f"The portal cannot read the output of job {job.pk}: its cluster {job.cluster.name} keeps job folders "
            "on its own volumes. Copy the artifact somewhere the portal can read and register it by artifact_uri."
        ]
        return None
    runs = selectors.job_run_dirs(job=job, executor_root=root)
    output = runs[-1].output if runs else None
    if output is None or not output.is_dir():
        errors["source_job"] = [
            f"Job {job.pk} has no output folder any more (PORTAL_OUTPUT_DIR was deleted or never "
            "written): nothing to register."
        ]
        return None
    return output


OUTPUT_ENTRIES_SHOWN = 300  # entries listed; more are counted, not listed
OUTPUT_SCAN_LIMIT = 20_000  # entries looked at: the folder is the job's, and it may have written millions


@dataclass(frozen=True)
class OutputEntry:
    """A file or folder of a job's output folder that can be registered: its path inside the folder, and size."""

    path: str  # relative, "/"-separated, as artifact_path takes it
    size: int  # bytes; of a folder, of the regular files in it
    is_dir: bool = False


@dataclass(frozen=True)
class JobOutput:
    entries: tuple[OutputEntry, ...] = ()
    more: int = 0  # entries found but not listed (past OUTPUT_ENTRIES_SHOWN)
    incomplete: bool = False  # the folder holds more than OUTPUT_SCAN_LIMIT entries: the rest were not looked at
    problem: str = ""  # why there is nothing to list (no output folder, a cluster whose folders the portal cannot read)


def job_output(*, job: Job) -> JobOutput:
    """What a succeeded job left in its output folder (the one ``job_source`` registers from), to pick from.

    The job's own files, read as hostile: no link is followed or listed (registering one is refused anyway),
    only regular files and folders, sizes from lstat, at most OUTPUT_SCAN_LIMIT entries looked at.
    """
    errors: dict[str, list[str]] = {}
    output = _output_dir(errors, job)
    if output is None:
        return JobOutput(problem=" ".join(errors.get("source_job", [])))
    files: dict[str, int] = {}
    folders: set[str] = set()
    seen = 0
    for directory, subdirs, names in os.walk(output):  # does not follow links to folders
        subdirs.sort()
        relative = Path(directory).relative_to(output).as_posix()
        if relative != ".":
            folders.add(relative)
        for name in names:
            seen += 1
            try:
                info = os.lstat(os.path.join(directory, name))
            except OSError:
                continue
            if stat.S_ISREG(info.st_mode):
                files[name if relative == "." else f"{relative}/{name}"] = info.st_size
        seen += len(subdirs)
        if seen > OUTPUT_SCAN_LIMIT:
            break
    folder_sizes = dict.fromkeys(folders, 0)
    for path, size in files.items():
        parts = path.split("/")[:-1]
        for depth in range(1, len(parts) + 1):
            folder_sizes["/".join(parts[:depth])] = folder_sizes.get("/".join(parts[:depth]), 0) + size
    entries = [OutputEntry(path=path, size=size) for path, size in files.items()]
    entries += [OutputEntry(path=folder, size=size, is_dir=True) for folder, size in folder_sizes.items()]
    entries.sort(key=lambda entry: entry.path)
    return JobOutput(
        entries=tuple(entries[:OUTPUT_ENTRIES_SHOWN]),
        more=max(0, len(entries) - OUTPUT_ENTRIES_SHOWN),
        incomplete=seen > OUTPUT_SCAN_LIMIT,
    )


def lineage_of(job: Job) -> dict:
    return {
        "job": job.pk,
        "job_name": job.name,
        "department": job.department.slug,
        "code_url": job.code_url,
        "code_ref": job.code_ref,
        "commit": job.commit,
        "image": job.image.name,
        "image_ref": job.image.image,
        "command": job.command,
        "requirements": list(job.requirements),
        "submitted_by": job.submitted_by.username,
        "finished_at": job.finished_at.isoformat() if job.finished_at else None,
    }


def _job_metrics(job: Job) -> dict[str, float]:
    try:
        root = getattr(executor_for(job.cluster), "root", None)  # as in _output_dir
    except ExecutorError:
        return {}
    if root is None:
        return {}
    runs = selectors.job_run_dirs(job=job, executor_root=root)
    folders = [run.tensorboard for run in runs] + selectors.job_tensorboard_runs(job=job, executor_root=root)
    # Read from copies: the event files are the job's, and a FIFO or a link there must not hang or leak.
    with tempfile.TemporaryDirectory() as scratch:
        return selectors.tensorboard_scalars(artifacts.readable_copies(folders, Path(scratch)))


def version_artifact_copy(*, version_id: int) -> None:
    """Copy a ``registering`` version's artifact out of its job's output folder: ``ready``, or ``failed`` with why.

    Nothing checked at registration is trusted here: the folder is the job's, and jobs of its department
    may still change it. The copy takes regular files only (models_registry/artifact_copy.py).
    """
    version = (
        ModelVersion.objects.select_related("model", "source_job__cluster")
        .filter(pk=version_id, status=ModelVersion.Status.REGISTERING)
        .first()
    )
    if version is None:
        return  # done by an earlier delivery of this task, or deleted
    job = version.source_job
    errors: dict[str, list[str]] = {}
    output = _output_dir(errors, job) if job is not None else None
    if output is None:
        _version_fail(version, " ".join(errors.get("source_job", [])) or "Its source job was deleted before the copy.")
        return
    try:
        staged = artifacts.stage(output, version.source_path)
    except artifacts.ArtifactError as exc:
        _version_fail(version, str(exc))
        return
    try:
        captured = _job_metrics(job)  # type: ignore[arg-type]  # not None: output is None without a job
        with transaction.atomic():
            locked = (
                ModelVersion.objects.select_for_update()
                .filter(pk=version.pk, status=ModelVersion.Status.REGISTERING)
                .first()
            )
            if locked is None:
                return
            artifacts.place(staged, model_name=version.model.name, version=version.version)
            locked.status, locked.status_message, locked.artifact_sha256 = ModelVersion.Status.READY, "", staged.sha256
            locked.metrics = {**captured, **locked.metrics}  # metrics given at registration win
            locked.save(update_fields=["status", "status_message", "artifact_sha256", "metrics"])
            webhook_events.version_registered(version=locked)
    finally:
        artifacts.discard(staged)


def _version_fail(version: ModelVersion, message: str) -> None:
    ModelVersion.objects.filter(pk=version.pk, status=ModelVersion.Status.REGISTERING).update(
        status=ModelVersion.Status.FAILED, status_message=message
    )
