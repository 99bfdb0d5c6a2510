"""Writes of the model registry: creating models, registering versions, tags and aliases. What a version
taken from a job needs (the job's checks, its lineage, the copy out of its output folder) is
models_registry/from_job.py's; ``version_artifact_copy`` is re-exported here.

- A model belongs to one department; its members (and platform admins) register versions and move aliases.
- A version is registered from a succeeded job's output folder (``source_job`` + ``artifact_path``) or from
  an ``artifact_uri`` (``store://`` of a model the caller may see, or ``file://`` inside
  ``settings.PORTAL_ARTIFACT_IMPORT_DIRS``). Either way the artifact is COPIED into the portal's store
  (models_registry/artifacts.py), so deleting the source loses nothing. From a job the copy runs in a task:
  the version is ``registering`` until it is ``ready`` (or ``failed``, with why), and nothing uses it before.
- Versions are numbered 1, 2, ... per model under a lock on the model row (and a retry on the unique
  constraint, for databases whose row locks are no-ops).
- From a job, lineage (job, code, commit, image, command, requirements) and metrics (the last value of each
  TensorBoard scalar) are recorded without asking; metrics given in the request win.
- An alias names one version per model; setting it on another version moves it, atomically, and the move
  is audited.
"""

from __future__ import annotations

import math
import re
from pathlib import Path, PurePosixPath
from urllib.parse import unquote, urlsplit

from django.conf import settings
from django.db import IntegrityError, transaction
from django.db.models import Max

from accounts import selectors as account_selectors
from accounts.services import audit_record
from core.errors import Conflict, InvalidInput
from jobs.models import Job
from models_registry import artifacts, from_job, selectors, tasks
from models_registry.from_job import version_artifact_copy as version_artifact_copy  # re-exported: the task
from models_registry.models import ModelAlias, ModelVersion, RegisteredModel
from webhooks import events as webhook_events

NAME = re.compile(r"[a-z0-9](?:[a-z0-9_-]{0,61}[a-z0-9])?")
ALIAS = re.compile(r"[a-z](?:[a-z0-9_-]{0,38}[a-z0-9])?")
FRAMEWORKS = ("sklearn", "xgboost", "lightgbm", "pytorch", "tensorflow", "onnx", "other")
MAX_TAGS = 50
MAX_METRICS = 500
NUMBERING_ATTEMPTS = 5


# --- Models ------------------------------------------------------------------------------------


def model_create(*, user, name: str, department: str, description: str = "") -> RegisteredModel:
    errors: dict[str, list[str]] = {}
    if not NAME.fullmatch(name or ""):
        errors["name"] = [
            f"{name!r} is not a valid model name: use 1-63 lowercase letters, digits, '-' or '_', "
            "starting and ending with a letter or digit (e.g. digits-classifier)."
        ]
    elif RegisteredModel.objects.filter(name=name).exists():
        errors["name"] = [
            f"A model named {name!r} already exists; model names are unique across the portal, pick another."
        ]
    owner = account_selectors.department_for_input(user=user, slug=department, errors=errors)
    if errors:
        raise InvalidInput(errors)
    try:
        with transaction.atomic():
            model = RegisteredModel.objects.create(
                name=name, department=owner, description=description, created_by=user
            )
            audit_record(actor=user, action="model.create", target=name, department=owner)
    except IntegrityError:
        raise InvalidInput(
            {
                "name": [
                    f"A model named {name!r} already exists; model names are unique across the portal, pick another."
                ]
            }
        ) from None
    return model


# --- Versions ----------------------------------------------------------------------------------


def version_register(
    *,
    user,
    model: RegisteredModel,
    source_job: int | None = None,
    artifact_path: str = "",
    artifact_uri: str = "",
    framework: str = "sklearn",
    metrics: dict | None = None,
    tags: dict | None = None,
) -> ModelVersion:
    """Create the model's next version.

    From a job: the version is ``registering`` and the copy out of the job's output folder runs in a task
    (``version_artifact_copy``), because that folder is the job's and may be large or hostile. From an
    ``artifact_uri`` (the portal's store, or an import folder the platform admins chose): copied here, ready.
    """
    errors: dict[str, list[str]] = {}
    _check_common(errors, framework=framework, metrics=metrics or {}, tags=tags or {})
    source, job = _source(
        errors, user=user, model=model, source_job=source_job, artifact_path=artifact_path, artifact_uri=artifact_uri
    )
    if errors:
        raise InvalidInput(errors)
    if job is not None:
        version = _create_numbered(
            user=user,
            model=model,
            name=PurePosixPath(artifact_path).name,
            staged=None,
            status=ModelVersion.Status.REGISTERING,
            source_path=artifact_path,
            framework=framework,
            source_job=job,
            lineage=from_job.lineage_of(job),
            metrics=dict(metrics or {}),
            tags=dict(tags or {}),
        )
        transaction.on_commit(lambda: tasks.copy_version_artifact.delay(version.pk))
        return version
    try:
        staged = artifacts.stage(source.parent, source.name)
    except artifacts.ArtifactError as exc:
        raise InvalidInput({"artifact_uri": [str(exc)]}) from exc
    try:
        return _create_numbered(
            user=user,
            model=model,
            name=staged.name,
            staged=staged,
            status=ModelVersion.Status.READY,
            framework=framework,
            source_job=None,
            lineage={"source_uri": artifact_uri},
            metrics=dict(metrics or {}),
            tags=dict(tags or {}),
        )
    finally:
        artifacts.discard(staged)


def _create_numbered(
    *, user, model: RegisteredModel, name: str, staged: artifacts.Staged | None, **fields
) -> ModelVersion:
    for _attempt in range(NUMBERING_ATTEMPTS):
        try:
            with transaction.atomic():
                # The row lock orders concurrent registrations; the unique constraint backs it up.
                RegisteredModel.objects.select_for_update().filter(pk=model.pk).first()
                number = (ModelVersion.objects.filter(model=model).aggregate(top=Max("version"))["top"] or 0) + 1
                version = ModelVersion.objects.create(
                    model=model,
                    version=number,
                    artifact_uri=artifacts.store_uri(model.name, number, name),
                    artifact_sha256=staged.sha256 if staged else "",
                    created_by=user,
                    **fields,
                )
                audit_record(
                    actor=user,
                    action="model.version.register",
                    target=str(version),
                    department=model.department,
                    data={"artifact_uri": version.artifact_uri},
                )
                if staged is not None:
                    artifacts.place(staged, model_name=model.name, version=number)
                    webhook_events.version_registered(version=version)
            return version
        except IntegrityError:
            continue
    raise InvalidInput(f"Too many registrations of {model.name} at once; try again.")


def version_require_ready(version: ModelVersion) -> None:
    """Conflict (409) unless the version's artifact is in the store: aliases, deployments and servers need it."""
    if version.status == ModelVersion.Status.REGISTERING:
        raise Conflict(
            f"Version {version.version} of {version.model.name} is still registering (its artifact is "
            "being copied into the store); try again when it is ready."
        )
    if version.status != ModelVersion.Status.READY:
        raise Conflict(
            f"Version {version.version} of {version.model.name} failed to register and cannot be used: "
            f"{version.status_message or 'no artifact in the store.'}"
        )


def _check_common(errors: dict, *, framework: str, metrics: dict, tags: dict) -> None:
    if framework not in FRAMEWORKS:
        errors["framework"] = [f"{framework!r} is not a known framework; use one of: {', '.join(FRAMEWORKS)}."]
    if not isinstance(metrics, dict):
        errors["metrics"] = ['Give metrics as an object of name -> number, e.g. {"accuracy/test": 0.97}.']
    else:
        bad = [name for name, value in metrics.items() if not _is_number(value) or not name or len(name) > 200]
        if bad:
            errors["metrics"] = [
                f"Metric {name!r} must have a name of 1-200 characters and a finite number as value." for name in bad
            ]
        elif len(metrics) > MAX_METRICS:
            errors["metrics"] = [f"At most {MAX_METRICS} metrics per version."]
    tag_errors = _tag_problems(tags, allow_null=False)
    if tag_errors:
        errors["tags"] = tag_errors


def _is_number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _tag_problems(tags, *, allow_null: bool) -> list[str]:
    if not isinstance(tags, dict):
        return ['Give tags as an object of name -> text, e.g. {"dataset": "digits-v2"}.']
    problems = []
    for key, value in tags.items():
        if not isinstance(key, str) or not 1 <= len(key) <= 100:
            problems.append(f"Tag name {key!r} must be 1-100 characters.")
        elif value is None and allow_null:
            continue
        elif not isinstance(value, str) or len(value) > 500:
            problems.append(
                f"Tag {key!r} must have a text value of at most 500 characters"
                + (" (null removes it)." if allow_null else ".")
            )
    if len(tags) > MAX_TAGS:
        problems.append(f"At most {MAX_TAGS} tags per version.")
    return problems


def _source(errors: dict, *, user, model, source_job, artifact_path, artifact_uri) -> tuple[Path | None, Job | None]:
    """The file or folder to copy and the job it came from; problems go into ``errors``."""
    if artifact_uri and (source_job is not None or artifact_path):
        errors["artifact_uri"] = ["Give either artifact_uri, or source_job with artifact_path, not both."]
        return None, None
    if artifact_uri:
        try:
            return _from_uri(user=user, uri=artifact_uri), None
        except artifacts.ArtifactError as exc:
            errors["artifact_uri"] = [str(exc)]
            return None, None
    if source_job is None:
        if artifact_path:
            errors["source_job"] = [
                "artifact_path is relative to a job's output folder: give the source_job that wrote it."
            ]
        else:
            errors["source_job"] = [
                "Give the source_job (id of a succeeded job) and the artifact_path it wrote, or an artifact_uri."
            ]
        return None, None
    return from_job.job_source(errors, user=user, model=model, source_job=source_job, artifact_path=artifact_path)


def _from_uri(*, user, uri: str) -> Path:
    if uri.startswith(artifacts.SCHEME):
        path = artifacts.path_of_uri(uri)
        owner, _, rest = uri[len(artifacts.SCHEME) :].partition("/")
        model = selectors.model_get(user=user, name=owner)
        number = rest.split("/", 1)[0]
        used = selectors.version_get(model=model, number=int(number)) if model and number.isdigit() else None
        if used is not None:
            version_require_ready(used)
        if model is None or not path.exists():
            raise artifacts.ArtifactError(f"Nothing at {uri} among the artifacts of your departments' models.")
        return path
    parts = urlsplit(uri)
    if parts.scheme != "file":
        raise artifacts.ArtifactError(
            f"{uri!r} cannot be registered: use a {artifacts.SCHEME}<model>/<version>/<file> URI of the portal's "
            "artifact store, or a file:// path inside a folder the platform admins allow (PORTAL_ARTIFACT_IMPORT_DIRS)."
        )
    if parts.netloc not in ("", "localhost"):
        raise artifacts.ArtifactError(
            f"{uri!r} names host {parts.netloc!r}: only files on the portal's machine (file:///path) can be registered."
        )
    allowed = [Path(folder) for folder in settings.PORTAL_ARTIFACT_IMPORT_DIRS]
    if not allowed:
        raise artifacts.ArtifactError(
            "Registering from file:// is off: ask a platform admin to set "
            "PORTAL_ARTIFACT_IMPORT_DIRS, or register from a job."
        )
    path = Path(unquote(parts.path))
    for folder in allowed:
        root = folder.resolve()
        if path.is_absolute() and path.resolve().is_relative_to(root):
            return artifacts.resolve_inside(root, path.resolve().relative_to(root).as_posix(), what=f"{root}")
    raise artifacts.ArtifactError(
        f"{uri!r} is outside the folders artifacts may be registered from: "
        + ", ".join(str(folder) for folder in allowed)
        + "."
    )


def version_update(
    *, user, version: ModelVersion, aliases: list[str] | None = None, tags: dict | None = None
) -> ModelVersion:
    """PATCH a version: ``aliases`` is the full list it should carry (others' are moved here, its own
    unlisted ones removed); ``tags`` is merged (a null value removes that tag)."""
    errors: dict[str, list[str]] = {}
    if aliases is not None:
        bad = [name for name in aliases if not isinstance(name, str) or not ALIAS.fullmatch(name)]
        if bad:
            errors["aliases"] = [
                f"{name!r} is not a valid alias: use 1-40 lowercase letters, digits, '-' or '_', "
                "starting with a letter (e.g. champion)."
                for name in bad
            ]
    if tags is not None:
        problems = _tag_problems(tags, allow_null=True)
        if problems:
            errors["tags"] = problems
        elif len({**version.tags, **tags}) > MAX_TAGS:
            errors["tags"] = [f"At most {MAX_TAGS} tags per version."]
    if errors:
        raise InvalidInput(errors)
    with transaction.atomic():
        if aliases is not None:
            wanted = set(aliases)
            for alias in ModelAlias.objects.filter(version=version).exclude(name__in=wanted):
                alias_remove(user=user, model=version.model, name=alias.name)
            for name in sorted(wanted):
                alias_set(user=user, version=version, name=name)
        if tags is not None:
            locked = ModelVersion.objects.select_for_update().get(pk=version.pk)
            merged = {**locked.tags, **tags}
            locked.tags = {key: value for key, value in merged.items() if value is not None}
            locked.save(update_fields=["tags"])
            version.tags = locked.tags
    return version


def alias_set(*, user, version: ModelVersion, name: str) -> ModelAlias:
    """Point the model's alias ``name`` at this version, moving it from wherever it was (audited)."""
    if not ALIAS.fullmatch(name or ""):
        raise InvalidInput(
            {
                "aliases": [
                    f"{name!r} is not a valid alias: use 1-40 lowercase letters, digits, '-' or '_', "
                    "starting with a letter (e.g. champion)."
                ]
            }
        )
    version_require_ready(version)
    model = version.model
    with transaction.atomic():
        RegisteredModel.objects.select_for_update().filter(pk=model.pk).first()
        alias = ModelAlias.objects.select_related("version").filter(model=model, name=name).first()
        if alias is not None and alias.version_id == version.pk:
            return alias
        before = alias.version.version if alias else None
        if alias is None:
            alias = ModelAlias.objects.create(model=model, name=name, version=version)
        else:
            alias.version = version
            alias.save(update_fields=["version"])
        audit_record(
            actor=user,
            action="model.alias.set",
            target=f"{model.name}@{name}",
            department=model.department,
            data={"from_version": before, "to_version": version.version},
        )
        webhook_events.alias_moved(model=model, alias=name, from_version=before, to_version=version.version)
    return alias


def alias_remove(*, user, model: RegisteredModel, name: str) -> None:
    with transaction.atomic():
        RegisteredModel.objects.select_for_update().filter(pk=model.pk).first()
        alias = ModelAlias.objects.select_related("version").filter(model=model, name=name).first()
        if alias is None:
            return
        before = alias.version.version
        alias.delete()
        audit_record(
            actor=user,
            action="model.alias.remove",
            target=f"{model.name}@{name}",
            department=model.department,
            data={"from_version": before, "to_version": None},
        )
        webhook_events.alias_moved(model=model, alias=name, from_version=before, to_version=None)
