"""The model registry: versions registered from jobs (lineage, metrics, numbering) and what registration refuses;
the helpers the other registry tests import. From URIs, models, aliases and tags: test_registry_models.py;
tenancy and the pages: test_registry_tenancy.py.

A "succeeded job" here is a job submitted through the API (admitted, so it has a run folder), whose run
folder is then filled as the local executor leaves it: PORTAL_OUTPUT_DIR = <run>/output, TensorBoard event
files under <run>/tensorboard. One test fills it by running the real examples/digits/train.py; the others
write a small artifact and real event files with tensorboardX, which is faster.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import threading
from pathlib import Path

import joblib
import pytest
from django.db import connection
from django.utils import timezone
from tensorboardX import SummaryWriter

from jobs.models import Job
from models_registry import services
from models_registry.artifacts import artifact_path
from models_registry.models import ModelVersion, RegisteredModel

ROOT = Path(__file__).resolve().parents[2]
TRAIN = ROOT / "examples" / "digits" / "train.py"
CODE_URL = "https://git.example.com/team/digits.git"
COMMIT = "3f2c1e9a4b5d6e7f8091a2b3c4d5e6f708192a3b"
JOB = {
    "code_url": CODE_URL,
    "code_ref": "main",
    "command": "python train.py --epochs 2",
    "gpus_per_worker": 0.25,
    "requirements": ["scikit-learn", "tensorboardX"],
}
SCALARS = {"loss/train": [0.9, 0.5, 0.25], "accuracy/test": [0.5, 0.8, 0.9]}


@pytest.fixture
def registry(world, settings, tmp_path):
    """The test world with its own data root and artifact store; file:// registration off."""
    settings.PORTAL_DATA_ROOT = tmp_path / "portal"
    settings.PORTAL_ARTIFACT_ROOT = tmp_path / "artifacts"
    settings.PORTAL_ARTIFACT_IMPORT_DIRS = []
    return world


def run_dir(settings, job: Job) -> Path:
    return settings.PORTAL_DATA_ROOT / "executors" / job.cluster.name / "jobs" / job.run_id


def submit(world, user, department: str = "vision", name: str = "digits") -> Job:
    response = world.api(user).post("/api/v1/jobs/", {**JOB, "name": name, "department": department}, format="json")
    assert response.status_code == 201, response.json()
    job = Job.objects.get(pk=response.json()["id"])
    assert job.run_id, "the job was admitted and so has a run folder"
    return job


def finish(job: Job) -> Job:
    """What the reconciler records when the executor reports the job's success."""
    Job.objects.filter(pk=job.pk).update(status="succeeded", commit=COMMIT, exit_code=0, finished_at=timezone.now())
    job.refresh_from_db()
    return job


def succeeded_job(world, settings, user=None, department="vision", files=None, scalars=SCALARS) -> Job:
    """A succeeded job whose output folder holds ``files`` and whose rank 0 logged ``scalars`` per step."""
    job = submit(world, user or world.alice, department)
    run = run_dir(settings, job)
    for name, content in (files if files is not None else {"model.joblib": b"a model"}).items():
        path = run / "output" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(content)
    (run / "output").mkdir(parents=True, exist_ok=True)
    writer = SummaryWriter(logdir=str(run / "tensorboard" / "worker-0"))
    for tag, values in scalars.items():
        for step, value in enumerate(values):
            writer.add_scalar(tag, value, step)
    writer.close()
    return finish(job)


def create_model(world, user=None, name="digits", department="vision") -> dict:
    response = world.api(user or world.alice).post(
        "/api/v1/models/", {"name": name, "department": department}, format="json"
    )
    assert response.status_code == 201, response.json()
    return response.json()


def register(world, body: dict, user=None, model="digits"):
    return world.api(user or world.alice).post(f"/api/v1/models/{model}/versions/", body, format="json")


def registered(world, body: dict, user=None, model="digits") -> dict:
    """Register, play the worker (the copy of a job's artifact runs in a task), and the version once ready."""
    response = register(world, body, user, model)
    assert response.status_code == 201, response.json()
    copy_pending_artifacts()
    version = world.api(user or world.alice).get(f"/api/v1/models/{model}/versions/{response.json()['version']}/")
    assert version.json()["status"] == "ready", version.json()
    return version.json()


def copy_pending_artifacts() -> None:
    """What the worker does with each models_registry.tasks.copy_version_artifact it receives."""
    for pk in ModelVersion.objects.filter(status="registering").values_list("pk", flat=True):
        services.version_artifact_copy(version_id=pk)


# --- Registering from a job ---------------------------------------------------------------------


def test_it_registers_a_real_digits_run_with_its_lineage_metrics_and_a_copy_of_the_model(registry, settings):
    job = submit(registry, registry.alice)
    run = run_dir(settings, job)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PORTAL_", "TENSORBOARD_LOG_DIR"))}
    env.update(
        PORTAL_OUTPUT_DIR=str(run / "output"),
        TENSORBOARD_LOG_DIR=str(run / "tensorboard"),
        RANK="0",
        WORLD_SIZE="1",
        CUDA_VISIBLE_DEVICES="",
    )
    run.mkdir(parents=True)
    subprocess.run(
        [sys.executable, str(TRAIN), "--epochs", "2"], env=env, cwd=run, check=True, capture_output=True, timeout=120
    )
    job = finish(job)
    create_model(registry)

    body = registered(registry, {"source_job": job.pk, "artifact_path": "model.joblib"})

    assert body["version"] == 1
    assert body["model"] == "digits"
    assert body["source_job"] == job.pk
    lineage = body["lineage"]
    assert {k: lineage[k] for k in ("job", "code_url", "code_ref", "commit", "image", "command", "requirements")} == {
        "job": job.pk,
        "code_url": CODE_URL,
        "code_ref": "main",
        "commit": COMMIT,
        "image": job.image.name,
        "command": "python train.py --epochs 2",
        "requirements": ["scikit-learn", "tensorboardX"],
    }
    written = (run / "output" / "metrics.json").read_text()
    test_accuracy = json.loads(written)["test_accuracy"]
    assert set(body["metrics"]) >= {"loss/train", "accuracy/train", "accuracy/test", "time/epoch_seconds"}
    assert body["metrics"]["accuracy/test"] == pytest.approx(test_accuracy, rel=1e-6)
    original = (run / "output" / "model.joblib").read_bytes()
    assert body["artifact_uri"] == "store://digits/1/model.joblib"
    assert body["artifact_sha256"] == hashlib.sha256(original).hexdigest()

    # The job's files can go: the store keeps its own copy, and it still predicts.
    shutil.rmtree(run)
    version = ModelVersion.objects.get(model__name="digits", version=1)
    stored = artifact_path(version)
    assert stored == settings.PORTAL_ARTIFACT_ROOT / "digits" / "1" / "model.joblib"
    assert stored.read_bytes() == original
    from sklearn.datasets import load_digits

    images, labels = load_digits(return_X_y=True)
    assert (joblib.load(stored).predict(images[:200]) == labels[:200]).mean() > 0.8
    again = registry.api(registry.alice).get("/api/v1/models/digits/versions/1/")
    assert again.status_code == 200 and again.json()["metrics"] == body["metrics"]


def test_metrics_are_the_last_value_of_each_scalar_and_given_ones_win(registry, settings):
    job = succeeded_job(registry, settings)
    create_model(registry)

    body = registered(
        registry,
        {
            "source_job": job.pk,
            "artifact_path": "model.joblib",
            "metrics": {"accuracy/test": 0.95, "latency_ms": 3},
            "tags": {"dataset": "digits"},
        },
    )

    assert body["metrics"] == {"loss/train": 0.25, "accuracy/test": 0.95, "latency_ms": 3.0}
    assert body["tags"] == {"dataset": "digits"}
    assert body["framework"] == "sklearn"


def test_a_requeued_jobs_metrics_come_from_its_latest_run_and_workers_are_told_apart(registry, settings):
    job = succeeded_job(registry, settings, scalars={})
    earlier = run_dir(settings, job).parent / f"{job.pk}-0badc0de"  # the run it had before a preemption
    for folder, loss, wall in ((earlier, 0.5, 1_000.0), (run_dir(settings, job), 0.25, 2_000.0)):
        for rank in (0, 1):
            writer = SummaryWriter(logdir=str(folder / "tensorboard" / f"worker-{rank}"))
            writer.add_scalar("loss", loss + rank, 10, walltime=wall)
            if rank == 0:
                writer.add_scalar("accuracy/test_averaged", 1 - loss, 10, walltime=wall)
            writer.close()
    create_model(registry)

    body = registered(registry, {"source_job": job.pk, "artifact_path": "model.joblib"})

    assert body["metrics"] == {"accuracy/test_averaged": 0.75, "worker-0/loss": 0.25, "worker-1/loss": 1.25}


def test_metrics_also_come_from_the_per_job_tensorboard_folder_of_resumed_runs(registry, settings):
    # Today's layout (local_jobdir.JobDir.tensorboard_run): <executor root>/tensorboard/<job id>/run-<n>/.
    job = succeeded_job(registry, settings, scalars={})
    per_job = run_dir(settings, job).parent.parent / "tensorboard" / job.storage_key
    for index, loss, wall in ((0, 0.5, 1_000.0), (1, 0.25, 2_000.0)):
        writer = SummaryWriter(logdir=str(per_job / f"run-{index}"))
        writer.add_scalar("loss", loss, 10, walltime=wall)
        writer.close()
    create_model(registry)

    body = registered(registry, {"source_job": job.pk, "artifact_path": "model.joblib"})

    assert body["metrics"] == {"loss": 0.25}  # the resumed run's, not prefixed by its run folder


def test_a_namesakes_runs_left_by_an_earlier_database_are_not_the_jobs(registry, settings):
    # Ids start again when a database is recreated; the run folders of the old job 1 stay on disk.
    job = succeeded_job(registry, settings, scalars={})
    stale = run_dir(settings, job).parent / f"{job.pk}-0ldd0b00"
    (stale / "tensorboard").mkdir(parents=True)
    (stale / "launch.json").write_text(json.dumps({"job": {"job_key": f"{job.pk}-5eedf00d"}}))
    writer = SummaryWriter(logdir=str(stale / "tensorboard"))
    writer.add_scalar("someone_elses_loss", 0.5, 1)
    writer.close()
    create_model(registry)

    body = registered(registry, {"source_job": job.pk, "artifact_path": "model.joblib"})

    assert "someone_elses_loss" not in body["metrics"]


def test_a_folder_is_copied_whole(registry, settings):
    job = succeeded_job(registry, settings, files={"model/weights.bin": b"w" * 10, "model/config.json": b"{}"})
    create_model(registry)

    body = registered(registry, {"source_job": job.pk, "artifact_path": "model", "framework": "other"})

    stored = artifact_path(ModelVersion.objects.get(version=body["version"]))
    assert body["artifact_uri"] == "store://digits/1/model"
    assert sorted(p.name for p in stored.iterdir()) == ["config.json", "weights.bin"]


def test_versions_are_numbered_1_2_3_each_with_its_own_copy(registry, settings):
    job = succeeded_job(registry, settings)
    create_model(registry)

    numbers = [
        registered(registry, {"source_job": job.pk, "artifact_path": "model.joblib"})["version"] for _ in range(3)
    ]

    assert numbers == [1, 2, 3]
    listing = registry.api(registry.alice).get("/api/v1/models/digits/versions/").json()
    assert listing["count"] == 3
    assert [v["artifact_uri"] for v in listing["results"]] == [f"store://digits/{n}/model.joblib" for n in (1, 2, 3)]
    model = registry.api(registry.alice).get("/api/v1/models/digits/").json()
    assert (model["version_count"], model["latest_version"]) == (3, 3)


@pytest.mark.django_db(transaction=True)
def test_concurrent_registrations_never_share_a_number(registry, settings):
    job = succeeded_job(registry, settings)
    create_model(registry)
    model = RegisteredModel.objects.get(name="digits")
    threads, start, failures = 6, threading.Barrier(6), []

    def one():
        try:
            start.wait(timeout=10)
            services.version_register(user=registry.alice, model=model, source_job=job.pk, artifact_path="model.joblib")
        except Exception as exc:  # noqa: BLE001 - reported below
            failures.append(exc)
        finally:
            connection.close()

    workers = [threading.Thread(target=one) for _ in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(timeout=60)

    assert failures == []
    assert sorted(ModelVersion.objects.filter(model=model).values_list("version", flat=True)) == [1, 2, 3, 4, 5, 6]
    copy_pending_artifacts()
    assert sorted(
        p.name for p in (settings.PORTAL_ARTIFACT_ROOT / "digits").iterdir() if not p.name.startswith(".")
    ) == ["1", "2", "3", "4", "5", "6"]


# --- What registration refuses -----------------------------------------------------------------


def test_it_refuses_paths_that_leave_the_output_folder_or_do_not_exist(registry, settings, tmp_path):
    job = succeeded_job(registry, settings)
    outside = tmp_path / "secret.txt"
    outside.write_text("secret")
    output = run_dir(settings, job) / "output"
    (output / "escape").symlink_to(outside)
    (output / "linked").mkdir()
    (output / "linked" / "inner").symlink_to(outside)
    create_model(registry)

    cases = {
        "/etc/passwd": "'/etc/passwd' is an absolute path: give a path relative to the output folder of job",
        "../../launch.json": "'../../launch.json' contains '..': give a path inside the output folder of job",
        "escape": "'escape' is a link that points outside the output folder of job",
        "linked": "'linked' holds a link (inner) that points outside the output folder of job",
        "model.pkl": "'model.pkl' does not exist in the output folder of job",
        "": "Give the path of the artifact relative to the output folder of job",
    }
    for path, message in cases.items():
        response = register(registry, {"source_job": job.pk, "artifact_path": path})
        assert response.status_code == 400, path
        assert list(response.json()) == ["artifact_path"]
        assert response.json()["artifact_path"][0].startswith(message), response.json()
    assert not ModelVersion.objects.exists()


def test_it_refuses_jobs_that_did_not_succeed_or_belong_elsewhere(registry, settings):
    running = submit(registry, registry.alice, name="running")
    theirs = succeeded_job(registry, settings, user=registry.bob, department="nlp")
    create_model(registry)

    response = register(registry, {"source_job": running.pk, "artifact_path": "model.joblib"})
    assert response.status_code == 400
    assert response.json() == {
        "source_job": [f"Job {running.pk} is {running.status}: only the output of a succeeded job can be registered."]
    }

    # Bob's job is not alice's to see: it does not exist for her.
    response = register(registry, {"source_job": theirs.pk, "artifact_path": "model.joblib"})
    assert response.json() == {"source_job": [f"No job {theirs.pk} in your departments."]}

    # A platform admin sees it, but it belongs to another department than the model.
    response = register(registry, {"source_job": theirs.pk, "artifact_path": "model.joblib"}, user=registry.admin)
    assert response.status_code == 400
    assert response.json()["source_job"][0].startswith(
        f"Job {theirs.pk} belongs to department nlp and model digits to vision"
    )

    response = register(registry, {"source_job": 999999, "artifact_path": "model.joblib"})
    assert response.json() == {"source_job": ["No job 999999 in your departments."]}


def test_it_names_every_problem_of_a_registration(registry, settings):
    job = succeeded_job(registry, settings)
    create_model(registry)

    response = register(
        registry, {"artifact_path": "model.joblib", "framework": "caffe", "tag": {"a": "b"}, "metrics": {"acc": "high"}}
    )
    assert response.status_code == 400
    errors = response.json()
    assert errors["tag"] == ["Unknown field; did you mean 'tags'?"]
    assert errors["metrics"] == {"acc": ["A valid number is required."]}

    response = register(registry, {"artifact_path": "model.joblib", "framework": "caffe"})
    assert response.json() == {
        "framework": [
            "'caffe' is not a known framework; use one of: sklearn, xgboost, lightgbm, pytorch, tensorflow, onnx, other."
        ],
        "source_job": ["artifact_path is relative to a job's output folder: give the source_job that wrote it."],
    }
    response = register(
        registry, {"source_job": job.pk, "artifact_path": "model.joblib", "artifact_uri": "store://x/1/y"}
    )
    assert response.json() == {
        "artifact_uri": ["Give either artifact_uri, or source_job with artifact_path, not both."]
    }
    response = register(registry, {})
    assert response.json() == {
        "source_job": [
            "Give the source_job (id of a succeeded job) and the artifact_path it wrote, or an artifact_uri."
        ]
    }


def test_the_job_output_folder_must_still_exist(registry, settings):
    job = succeeded_job(registry, settings)
    shutil.rmtree(run_dir(settings, job) / "output")
    create_model(registry)

    response = register(registry, {"source_job": job.pk, "artifact_path": "model.joblib"})

    assert response.status_code == 400
    assert "has no output folder any more" in response.json()["source_job"][0]
