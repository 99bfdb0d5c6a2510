"""Registering a version from a job's output, when the job is hostile.

The output folder belongs to the job's uid, and other jobs of its department keep running while the portal
copies: the artifact may be or hold a symbolic link, a hard link to a file outside, a FIFO, something huge,
or a file swapped for a link between the registration's checks and the copy. The copy runs in a task
(models_registry.tasks.copy_version_artifact): here the test plays the worker, as test_registry.py does.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest

from core.celery import app as celery_app
from models_registry import artifacts
from models_registry import tasks as registry_tasks
from models_registry.models import ModelVersion
from tests.models_registry.test_registry import (
    copy_pending_artifacts,
    create_model,
    register,
    registered,
    run_dir,
    succeeded_job,
)

SECRET = b"the department next door's weights"


@pytest.fixture
def registry(world, settings, tmp_path):
    settings.PORTAL_DATA_ROOT = tmp_path / "portal"
    settings.PORTAL_ARTIFACT_ROOT = tmp_path / "artifacts"
    settings.PORTAL_ARTIFACT_IMPORT_DIRS = []
    return world


@pytest.fixture
def secret(tmp_path) -> Path:
    """A file outside the output folder that the job's uid must not get into the store (same filesystem)."""
    path = tmp_path / "elsewhere" / "secret.bin"
    path.parent.mkdir()
    path.write_bytes(SECRET)
    return path


def output_of(registry, settings, files=None):
    job = succeeded_job(registry, settings, files=files)
    create_model(registry)
    return job, run_dir(settings, job) / "output"


def registering(registry, job, artifact_path: str) -> dict:
    response = register(registry, {"source_job": job.pk, "artifact_path": artifact_path})
    assert response.status_code == 201, response.json()
    assert response.json()["status"] == "registering"
    return response.json()


def after_copy(registry, number: int) -> dict:
    copy_pending_artifacts()
    return registry.api(registry.alice).get(f"/api/v1/models/digits/versions/{number}/").json()


def stored_files(settings) -> dict[str, bytes]:
    root = Path(settings.PORTAL_ARTIFACT_ROOT)
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in root.rglob("*") if p.is_file()}


def assert_failed(version: dict, message: str, settings) -> None:
    assert version["status"] == "failed"
    assert message in version["status_message"], version["status_message"]
    assert version["artifact_sha256"] == ""
    assert SECRET not in stored_files(settings).values()
    assert not any((Path(settings.PORTAL_ARTIFACT_ROOT) / ".staging").iterdir())  # nothing half-copied left


# --- The happy path -----------------------------------------------------------------------------


def test_a_nested_folder_of_regular_files_is_copied_whole_and_the_version_becomes_ready(registry, settings):
    files = {
        "model/weights.bin": os.urandom(3000),
        "model/config.json": b"{}",
        "model/tokenizer/vocab/en.txt": b"a\nb\n",
        "model/tokenizer/merges.txt": b"",
    }
    job, _output = output_of(registry, settings, files)

    answer = registering(registry, job, "model")
    assert (answer["version"], answer["artifact_uri"], answer["artifact_sha256"]) == (1, "store://digits/1/model", "")
    version = after_copy(registry, 1)

    assert (version["status"], version["status_message"]) == ("ready", "")
    assert version["metrics"] == {"loss/train": 0.25, "accuracy/test": 0.9}  # read from its TensorBoard by the task
    assert stored_files(settings) == {f"digits/1/{name}": content for name, content in files.items()}
    stored = artifacts.artifact_path(ModelVersion.objects.get(version=1))
    assert version["artifact_sha256"] == artifacts.sha256_of(stored)


def test_registration_sends_the_copy_task_once_committed_and_the_task_makes_the_version_ready(
    registry, settings, monkeypatch, django_capture_on_commit_callbacks
):
    job, _output = output_of(registry, settings)
    sent = []
    # The broker is what leaves the process: record what would be sent to the worker.
    monkeypatch.setattr(
        celery_app, "send_task", lambda name, args=None, kwargs=None, **options: sent.append((name, list(args or ())))
    )

    with django_capture_on_commit_callbacks(execute=True):
        registering(registry, job, "model.joblib")
    assert sent == [(registry_tasks.copy_version_artifact.name, [ModelVersion.objects.get().pk])]
    name, args = sent[0]
    celery_app.tasks[name].run(*args)  # as the worker runs what it receives

    assert ModelVersion.objects.get().status == "ready"
    assert stored_files(settings) == {"digits/1/model.joblib": b"a model"}


# --- What the copy refuses ----------------------------------------------------------------------


def test_a_symlink_to_a_file_outside_never_reaches_the_store(registry, settings, secret):
    job, output = output_of(registry, settings, {"model/weights.bin": b"w", "model.joblib": b"m"})
    (output / "model" / "passwd").symlink_to("/etc/passwd")

    response = register(registry, {"source_job": job.pk, "artifact_path": "model"})

    assert response.status_code == 400
    assert response.json()["artifact_path"][0].startswith("'model' holds a link (passwd) that points outside")
    # Replaced by a link after the registration was accepted: the copy looks at what it opens, not at the check.
    registering(registry, job, "model.joblib")
    (output / "model.joblib").unlink()
    (output / "model.joblib").symlink_to(secret)
    assert_failed(after_copy(registry, 1), "'model.joblib' is a symbolic link", settings)


def test_a_symlink_anywhere_in_the_tree_is_refused_even_when_it_points_inside(registry, settings):
    job, output = output_of(registry, settings, {"model/weights.bin": b"w", "real/model.joblib": b"m"})
    (output / "model" / "again.bin").symlink_to("weights.bin")

    registering(registry, job, "model")

    assert_failed(after_copy(registry, 1), "'model/again.bin' is a symbolic link", settings)


def test_a_symlinked_folder_is_refused_inside_the_artifact_and_on_the_way_to_it(registry, settings, tmp_path):
    job, output = output_of(registry, settings, {"model/weights.bin": b"w", "real/model.joblib": b"m"})
    (output / "model" / "shared").symlink_to(output / "real", target_is_directory=True)
    (output / "linked").symlink_to(output / "real", target_is_directory=True)

    registering(registry, job, "model")
    registering(registry, job, "linked/model.joblib")

    assert_failed(after_copy(registry, 1), "'model/shared' is a symbolic link", settings)
    assert_failed(after_copy(registry, 2), "'linked' is a symbolic link", settings)


def test_a_hard_link_to_a_file_outside_is_refused(registry, settings, secret):
    job, output = output_of(registry, settings, files={})
    os.link(secret, output / "model.joblib")

    registering(registry, job, "model.joblib")

    assert_failed(after_copy(registry, 1), "'model.joblib' is a hard link (2 names for one file)", settings)


def test_a_fifo_is_refused_without_waiting_for_a_writer_and_one_among_the_event_files_is_skipped(registry, settings):
    job, output = output_of(registry, settings, {"real.bin": b"weights"})
    os.mkfifo(output / "model.joblib")
    os.mkfifo(run_dir(settings, job) / "tensorboard" / "worker-0" / "events.out.tfevents.0.fifo")

    registering(registry, job, "model.joblib")
    registering(registry, job, "real.bin")

    assert_failed(after_copy(registry, 1), "'model.joblib' is a named pipe (FIFO), not a regular file", settings)
    version = after_copy(registry, 2)
    assert (version["status"], version["metrics"]) == ("ready", {})  # the event files were not read through the FIFO


def test_the_copier_does_not_hang_on_a_fifo(settings, tmp_path):
    settings.PORTAL_ARTIFACT_ROOT = tmp_path / "artifacts"
    os.mkfifo(tmp_path / "pipe")
    outcome = []
    copier = threading.Thread(target=lambda: outcome.append(_refusal(tmp_path, "pipe")), daemon=True)

    copier.start()
    copier.join(timeout=10)

    assert not copier.is_alive(), "the copy waits for a writer on the FIFO"
    assert outcome and "is a named pipe (FIFO)" in outcome[0]


def _refusal(base: Path, relative: str, **seam) -> str:
    try:
        artifacts.stage(base, relative, **seam)
    except artifacts.ArtifactError as exc:
        return str(exc)
    return "copied"


@pytest.mark.parametrize(
    "swap, message",
    [
        ("symlink", "'model/b.bin' is a symbolic link"),
        ("hardlink", "'model/b.bin' is a hard link (2 names for one file)"),
        ("fifo", "'model/b.bin' is a named pipe (FIFO)"),
    ],
)
def test_a_file_swapped_between_the_walk_and_the_open_is_refused(settings, tmp_path, secret, swap, message):
    settings.PORTAL_ARTIFACT_ROOT = tmp_path / "artifacts"
    output = tmp_path / "output"
    (output / "model").mkdir(parents=True)
    for name in ("a.bin", "b.bin", "c.bin"):
        (output / "model" / name).write_bytes(b"weights")

    def replace(shown: str) -> None:
        # The job's moment: model/b.bin was seen as a plain file, and is replaced just before it is opened.
        if shown != "model/b.bin":
            return
        target = output / "model" / "b.bin"
        target.unlink()
        {
            "symlink": lambda: target.symlink_to(secret),
            "hardlink": lambda: os.link(secret, target),
            "fifo": lambda: os.mkfifo(target),
        }[swap]()

    assert message in _refusal(output, "model", before_open=replace)
    assert not any((tmp_path / "artifacts" / ".staging").iterdir())


def test_an_artifact_over_the_size_limit_fails_with_its_size_and_the_limit(registry, settings):
    settings.PORTAL_ARTIFACT_MAX_BYTES = 1000
    job, _output = output_of(
        registry, settings, {"model/a.bin": b"x" * 600, "model/b.bin": b"y" * 600, "small.bin": b"z" * 1000}
    )

    registering(registry, job, "model")
    registering(registry, job, "small.bin")

    assert_failed(
        after_copy(registry, 1),
        "the artifact is larger than the limit: at least 1200 bytes (0.00 GiB), and the limit is 1000 bytes",
        settings,
    )
    assert after_copy(registry, 2)["status"] == "ready"  # exactly at the limit is allowed


# --- Nothing uses a version before it is ready -------------------------------------------------


def test_a_version_that_is_not_ready_gets_no_alias_deployment_or_copy(registry, settings, client):
    job, output = output_of(registry, settings)
    os.mkfifo(output / "pipe")
    registering(registry, job, "model.joblib")
    api = registry.api(registry.alice)

    refused = {
        "alias": api.patch("/api/v1/models/digits/versions/1/", {"aliases": ["champion"]}, format="json"),
        "deployment": api.post(
            "/api/v1/deployments/",
            {
                "name": "digits-live",
                "department": "vision",
                "model": "digits",
                "strategy": "ab",
                "variants": [{"name": "a", "version": 1, "weight": 100}],
            },
            format="json",
        ),
        "copy": api.post(
            "/api/v1/models/digits/versions/", {"artifact_uri": "store://digits/1/model.joblib"}, format="json"
        ),
    }
    for what, response in refused.items():
        assert response.status_code == 409, what
        assert "Version 1 of digits is still registering" in response.json()["detail"], what
    client.force_login(registry.alice)
    page = client.get("/models/digits/").content.decode()
    assert "Registering" in page and "Make champion" not in page

    registering(registry, job, "pipe")
    copy_pending_artifacts()
    response = api.patch("/api/v1/models/digits/versions/2/", {"aliases": ["champion"]}, format="json")
    assert response.status_code == 409
    assert response.json()["detail"].startswith("Version 2 of digits failed to register and cannot be used: 'pipe' is")
    page = client.get("/models/digits/").content.decode()
    assert "Ready" in page and "Failed" in page and "&#x27;pipe&#x27; is a named pipe (FIFO)" in page
    assert registered(registry, {"artifact_uri": "store://digits/1/model.joblib"})["version"] == 3


def test_the_job_pages_file_list_shows_none_of_the_links_a_job_planted(registry, settings, secret, tmp_path):
    # The list on "Register as model version" reads a folder the job wrote: a link to a portal file or to a
    # folder outside must not appear (nor its size), or the page would tell a stranger's job what is there.
    from models_registry.from_job import job_output

    job, output = output_of(registry, settings, {"model.joblib": b"m", "model/weights.bin": b"ww"})
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "db.sqlite3").write_bytes(b"x" * 1000)
    (output / "secret").symlink_to(secret)
    (output / "portal").symlink_to(outside, target_is_directory=True)
    (output / "model" / "passwd").symlink_to("/etc/passwd")

    listed = {(entry.path, entry.size) for entry in job_output(job=job).entries}

    assert listed == {("model.joblib", 1), ("model", 2), ("model/weights.bin", 2)}
