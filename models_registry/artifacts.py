"""The portal's artifact store: where registered model versions keep their own copy of an artifact.

A version's ``artifact_uri`` is always ``store://<model>/<version>/<name>``: ``<name>`` is the file (e.g.
``model.joblib``) or folder that was registered, kept under ``settings.PORTAL_ARTIFACT_ROOT`` (default
``$PORTAL_DATA_ROOT/artifacts``). The URI, not an absolute path, is stored so that the store can move (a
new data root, another mount point) without rewriting rows. Model servers load only what
``artifact_path(version)`` returns, never a path a user typed, and only once the version is ready.
Copies take regular files only, never following a link (models_registry/artifact_copy.py).

No database access here: these helpers copy, hash and resolve paths.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from django.conf import settings

from models_registry.artifact_copy import CopyRefused, copy_artifact

SCHEME = "store://"


class ArtifactError(ValueError):
    """An artifact URI or path the store refuses; the message says why and what to do."""


def store_root() -> Path:
    return Path(settings.PORTAL_ARTIFACT_ROOT)


def store_uri(model_name: str, version: int, name: str) -> str:
    return f"{SCHEME}{model_name}/{version}/{name}"


def path_of_uri(uri: str) -> Path:
    """The local path behind a ``store://`` URI; refuses URIs that would leave the store."""
    if not uri.startswith(SCHEME):
        raise ArtifactError(f"{uri!r} is not in the portal's artifact store (it must start with {SCHEME}).")
    relative = PurePosixPath(uri[len(SCHEME) :])
    if not relative.parts or relative.is_absolute() or ".." in relative.parts:
        raise ArtifactError(f"{uri!r} is not a valid store URI: write it as {SCHEME}<model>/<version>/<file>.")
    root = store_root().resolve()
    path = root.joinpath(*relative.parts)
    if not path.resolve().is_relative_to(root):
        raise ArtifactError(f"{uri!r} points outside the portal's artifact store.")
    return path


def artifact_path(version) -> Path:
    """The local file (or folder) of a ModelVersion's artifact in the store, for model servers to load.

    Refused while the version is still being copied, or when its copy failed: there is nothing to load.
    """
    if version.status != "ready":
        raise ArtifactError(
            f"Version {version.version} of {version.model.name} is {version.status}, not ready: "
            "its artifact cannot be used" + (f" ({version.status_message})" if version.status_message else "") + "."
        )
    return path_of_uri(version.artifact_uri)


def sha256_of(path: Path) -> str:
    """sha256 of a file; of a folder, over its files' relative paths and contents in sorted order."""
    digest = hashlib.sha256()
    if path.is_file():
        _feed(digest, path)
        return digest.hexdigest()
    for file in sorted(p for p in path.rglob("*") if p.is_file()):
        digest.update(file.relative_to(path).as_posix().encode() + b"\0")
        _feed(digest, file)
    return digest.hexdigest()


def _feed(digest, file: Path) -> None:
    with file.open("rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)


def resolve_inside(base: Path, relative: str, *, what: str = "the job's output folder") -> Path:
    """``base / relative`` when it stays inside ``base`` (links resolved) and exists; else ArtifactError."""
    if not relative or not relative.strip():
        raise ArtifactError(f"Give the path of the artifact relative to {what}, e.g. model.joblib.")
    pure = PurePosixPath(relative)
    if pure.is_absolute():
        raise ArtifactError(f"{relative!r} is an absolute path: give a path relative to {what}, e.g. model.joblib.")
    if ".." in pure.parts:
        raise ArtifactError(f"{relative!r} contains '..': give a path inside {what}.")
    root = base.resolve()
    candidate = root.joinpath(*pure.parts)
    if not candidate.resolve().is_relative_to(root):
        raise ArtifactError(f"{relative!r} is a link that points outside {what}; copy the file itself there.")
    if not candidate.exists():
        raise ArtifactError(f"{relative!r} does not exist in {what}.")
    if candidate.is_dir():
        _refuse_escaping_links(candidate, root, relative, what)
    return candidate


def _refuse_escaping_links(folder: Path, root: Path, shown: str, what: str) -> None:
    for inner in folder.rglob("*"):
        if inner.is_symlink() and not inner.resolve().is_relative_to(root):
            raise ArtifactError(
                f"{shown!r} holds a link ({inner.relative_to(folder).as_posix()}) that points outside {what}."
            )


@dataclass(frozen=True)
class Staged:
    """A copy waiting in the store's staging area for its version number."""

    path: Path
    sha256: str

    @property
    def name(self) -> str:
        return self.path.name


def stage(base: Path, relative: str, *, before_open=None) -> Staged:
    """Copy ``base/relative`` (a file or folder) into the store's staging area and hash the copy.

    Regular files and folders only, no link followed, within ``settings.PORTAL_ARTIFACT_MAX_BYTES``
    (models_registry/artifact_copy.py). Done before the copy gets its final place, outside any lock.
    ``before_open``: the copier's test seam.
    """
    staging = store_root() / ".staging"
    staging.mkdir(parents=True, exist_ok=True)
    holder = Path(tempfile.mkdtemp(dir=staging))
    staged = holder / PurePosixPath(relative).name
    try:
        copy_artifact(base, relative, staged, max_bytes=settings.PORTAL_ARTIFACT_MAX_BYTES, before_open=before_open)
    except CopyRefused as exc:
        shutil.rmtree(holder, ignore_errors=True)
        raise ArtifactError(str(exc)) from exc
    except OSError as exc:
        shutil.rmtree(holder, ignore_errors=True)
        raise ArtifactError(
            f"{relative!r} could not be copied into the artifact store: {exc.strerror or exc}."
        ) from exc
    return Staged(path=staged, sha256=sha256_of(staged))


def readable_copies(folders: list[Path], scratch: Path) -> list[Path]:
    """Safe copies of folders a job wrote (e.g. its TensorBoard event files) under ``scratch``, to be read
    there: a folder holding a link, a FIFO or a hard link is left out rather than read through."""
    copies = []
    for index, folder in enumerate(folders):
        copy = scratch / str(index)
        try:
            copy_artifact(folder.parent, folder.name, copy, max_bytes=settings.PORTAL_ARTIFACT_MAX_BYTES)
        except (CopyRefused, OSError):
            shutil.rmtree(copy, ignore_errors=True)
            continue
        copies.append(copy)
    return copies


def place(staged: Staged, *, model_name: str, version: int) -> str:
    """Move a staged copy to its final place (a rename: all or nothing); returns its store URI."""
    folder = store_root() / model_name / str(version)
    folder.mkdir(parents=True, exist_ok=True)
    target = folder / staged.name
    if target.exists():
        # Left by an attempt whose transaction did not commit: the number is ours now.
        shutil.rmtree(target) if target.is_dir() else target.unlink()
    staged.path.rename(target)
    shutil.rmtree(staged.path.parent, ignore_errors=True)
    return store_uri(model_name, version, staged.name)


def discard(staged: Staged) -> None:
    shutil.rmtree(staged.path.parent, ignore_errors=True)


def remove_from_store(model_name: str, version: int) -> None:
    shutil.rmtree(store_root() / model_name / str(version), ignore_errors=True)


ARTIFACT_FILES_SHOWN = 500  # a folder artifact with more files is listed in part (with the count of the rest)


def files_of(version) -> tuple[list[dict], int]:
    """The files of a ready version's artifact in the store (path inside the artifact, size in bytes), and
    how many files there are in all. Nothing while it is registering or when its copy failed."""
    if version.status != "ready":
        return [], 0
    try:
        path = path_of_uri(version.artifact_uri)
    except ArtifactError:
        return [], 0
    if path.is_file() and not path.is_symlink():
        return [{"path": path.name, "size": path.stat().st_size}], 1
    if not path.is_dir():
        return [], 0
    files: list[dict] = []
    count = 0
    for directory, subdirs, names in os.walk(path):  # links are not followed (the store holds none anyway)
        subdirs.sort()
        for name in sorted(names):
            file = Path(directory) / name
            if file.is_symlink() or not file.is_file():
                continue
            count += 1
            if len(files) < ARTIFACT_FILES_SHOWN:
                files.append({"path": file.relative_to(path).as_posix(), "size": file.stat().st_size})
    return files, count
