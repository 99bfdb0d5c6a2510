"""The example training project, examples/digits/train.py, run as the portal runs it.

Most tests start train.py as a real process with the job environment contract
(TENSORBOARD_LOG_DIR, PORTAL_OUTPUT_DIR, PORTAL_CHECKPOINT_DIR, WORLD_SIZE, RANK ...) and
check what a user sees: the exit code, the log lines, the model file, the TensorBoard
curves. The last one runs it through the portal (API, Celery worker, local executor):
preempted by a reclaim, it resumes from its checkpoint folder and finishes.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import joblib
import numpy as np
import pytest
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from demo.data import publish_example_repo
from jobs import running
from jobs.models import Job as PortalJob
from models_registry.selectors import job_run_dirs
from tests.processes import Processes

ROOT = Path(__file__).resolve().parents[2]
TRAIN = ROOT / "examples" / "digits" / "train.py"
TAGS = {"loss/train", "accuracy/train", "accuracy/test", "time/epoch_seconds"}
EPOCH_LINE = re.compile(r"^(?:\[rank \d+\] )?epoch (\d+)/\d+ ", re.MULTILINE)
RESERVED = ("PORTAL_", "TENSORBOARD_LOG_DIR", "WORLD_SIZE", "RANK", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")


def load_train_module():
    spec = importlib.util.spec_from_file_location("digits_train", TRAIN)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


train = load_train_module()


class Job:
    """One job's directories and its worker processes, each logging to files as the executor's do."""

    def __init__(self, root: Path, world_size: int = 1):
        self.root = root
        self.output_dir = root / "output"
        self.log_dir = root / "tensorboard"
        self.world_size = world_size
        self.runs = 0
        self.processes: list[subprocess.Popen] = []

    def env(self, rank: int) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith(RESERVED)}
        env.update(
            PORTAL_JOB_ID="42",
            PORTAL_JOB_NAME="digits-test",
            WORLD_SIZE=str(self.world_size),
            RANK=str(rank),
            LOCAL_RANK=str(rank),
            MASTER_ADDR="127.0.0.1",
            MASTER_PORT="29500",
            CUDA_VISIBLE_DEVICES="",
            TENSORBOARD_LOG_DIR=str(self.log_dir),
            PORTAL_OUTPUT_DIR=str(self.output_dir),
        )
        return env

    def start(self, *args: str, rank: int = 0, extra_env: dict[str, str] | None = None) -> Worker:
        self.runs += 1
        stdout = self.root / f"run{self.runs}-rank{rank}.out"
        stderr = self.root / f"run{self.runs}-rank{rank}.err"
        with stdout.open("wb") as out, stderr.open("wb") as err:
            process = subprocess.Popen(
                [sys.executable, str(TRAIN), *args],
                env=self.env(rank) | (extra_env or {}),
                cwd=self.root,
                stdout=out,
                stderr=err,
                start_new_session=True,  # a process group, as the executor starts each worker
            )
        self.processes.append(process)
        return Worker(process, stdout, stderr)

    def run(self, *args: str, rank: int = 0, extra_env: dict[str, str] | None = None) -> Worker:
        worker = self.start(*args, rank=rank, extra_env=extra_env)
        worker.wait()
        return worker

    def stop_all(self) -> None:
        for process in self.processes:
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGKILL)
            process.wait()


class Worker:
    def __init__(self, process: subprocess.Popen, stdout: Path, stderr: Path):
        self.process, self.stdout_path, self.stderr_path = process, stdout, stderr

    @property
    def stdout(self) -> str:
        return self.stdout_path.read_text()

    @property
    def stderr(self) -> str:
        return self.stderr_path.read_text()

    def wait(self, timeout: float = 120) -> int:
        try:
            return self.process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            pytest.fail(f"train.py still running after {timeout} s; output so far:\n{self.stdout}\n{self.stderr}")

    def wait_for_line(self, text: str, timeout: float = 60) -> None:
        """Poll the worker's log until a line contains ``text``."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if any(text in line for line in self.stdout.splitlines()):
                return
            if self.process.poll() is not None:
                pytest.fail(f"train.py exited with {self.process.returncode} before printing {text!r}:\n{self.stdout}")
            time.sleep(0.05)
        pytest.fail(f"train.py printed no {text!r} within {timeout} s:\n{self.stdout}")

    def epoch_lines(self) -> list[int]:
        """The epochs this run reported, from lines like 'epoch 3/5  train loss ...'."""
        return [int(epoch) for epoch in EPOCH_LINE.findall(self.stdout)]


@pytest.fixture
def make_job(tmp_path):
    """Jobs, each in its own directory; their processes are reaped at the end of the test."""
    jobs: list[Job] = []

    def make(world_size: int = 1) -> Job:
        root = tmp_path / f"job{len(jobs) + 1}"
        root.mkdir()
        jobs.append(Job(root, world_size))
        return jobs[-1]

    yield make
    for job in jobs:
        job.stop_all()


@pytest.fixture
def job(make_job) -> Job:
    return make_job()


@pytest.fixture
def two_workers(make_job) -> Job:
    return make_job(world_size=2)


def scalars(log_dir: Path) -> dict[str, list[tuple[int, float]]]:
    """Every scalar series in one TensorBoard run directory, as TensorBoard reads it."""
    accumulator = EventAccumulator(str(log_dir), size_guidance={"scalars": 0})
    accumulator.Reload()
    return {
        tag: [(event.step, event.value) for event in accumulator.Scalars(tag)] for tag in accumulator.Tags()["scalars"]
    }


def assert_curves(log_dir: Path, epochs: int) -> dict[str, list[tuple[int, float]]]:
    series = scalars(log_dir)
    assert TAGS <= set(series), f"TensorBoard tags in {log_dir}: {sorted(series)}"
    for tag in TAGS:
        assert [step for step, _ in series[tag]] == list(range(1, epochs + 1)), tag
    assert all(0 <= value <= 1 for _, value in series["accuracy/test"])
    assert all(value > 0 for _, value in series["time/epoch_seconds"])
    return series


def assert_good_model(output_dir: Path, world_size: int = 1) -> float:
    """model.joblib predicts held-out digits from raw pixels, as well as metrics.json says."""
    model = joblib.load(output_dir / "model.joblib")
    _, X_test, _, y_test = train.load_data(seed=0)
    predictions = model.predict(X_test)
    accuracy = float(np.mean(predictions == y_test))
    assert accuracy > 0.85
    assert set(predictions) == set(range(10))
    metrics = json.loads((output_dir / "metrics.json").read_text())
    assert metrics["test_accuracy"] == pytest.approx(accuracy)
    assert metrics["world_size"] == world_size
    return accuracy


def test_trains_logs_curves_and_saves_a_good_model(job):
    worker = job.run("--epochs", "5")

    assert worker.process.returncode == 0, worker.stdout + worker.stderr
    assert worker.stderr == ""
    assert worker.epoch_lines() == [1, 2, 3, 4, 5]
    assert "digits-test" in worker.stdout
    assert_good_model(job.output_dir)
    series = assert_curves(job.log_dir / "worker-0", epochs=5)
    losses = [value for _, value in series["loss/train"]]
    assert losses[-1] < losses[0]
    assert not (job.output_dir / "checkpoint.joblib").exists()


def test_sigterm_writes_a_checkpoint_and_the_next_run_resumes(job, make_job):
    uninterrupted = make_job()
    reference = uninterrupted.start("--epochs", "6")
    slow = job.start("--epochs", "6", "--sleep-per-epoch", "1")
    slow.wait_for_line("epoch 2/6")
    signalled = time.monotonic()
    os.killpg(slow.process.pid, signal.SIGTERM)  # what the portal's cancel does

    assert slow.wait(timeout=30) == 0, slow.stdout + slow.stderr
    assert time.monotonic() - signalled < 10  # well within the 30 s grace period
    assert "received SIGTERM" in slow.stdout
    assert "checkpoint written" in slow.stdout
    checkpoint = joblib.load(job.output_dir / "checkpoint.joblib")
    reached = checkpoint["epoch"]
    assert 2 <= reached < 6
    assert slow.epoch_lines() == list(range(1, reached + 1))
    assert not (job.output_dir / "model.joblib").exists()

    resumed = job.run("--epochs", "6")

    assert resumed.process.returncode == 0, resumed.stdout + resumed.stderr
    assert f"resumed from checkpoint {job.output_dir / 'checkpoint.joblib'} at epoch {reached}/6" in resumed.stdout
    assert resumed.epoch_lines() == list(range(reached + 1, 7))
    assert_good_model(job.output_dir)
    assert_curves(job.log_dir / "worker-0", epochs=6)  # one point per epoch across both runs
    assert not (job.output_dir / "checkpoint.joblib").exists()
    # Resuming continued with exactly the steps that were left: the same model as a run never stopped.
    assert reference.wait() == 0
    resumed_model = joblib.load(job.output_dir / "model.joblib").named_steps["classifier"]
    reference_model = joblib.load(uninterrupted.output_dir / "model.joblib").named_steps["classifier"]
    np.testing.assert_array_equal(resumed_model.coef_, reference_model.coef_)
    np.testing.assert_array_equal(resumed_model.intercept_, reference_model.intercept_)


def test_a_checkpoint_of_other_settings_is_not_resumed(job):
    slow = job.start("--epochs", "6", "--sleep-per-epoch", "1")
    slow.wait_for_line("epoch 1/6")
    os.killpg(slow.process.pid, signal.SIGTERM)
    assert slow.wait() == 0

    other = job.run("--epochs", "3", "--lr", "0.02")

    assert other.process.returncode == 0, other.stdout + other.stderr
    assert "ignoring checkpoint" in other.stdout
    assert other.epoch_lines() == [1, 2, 3]


def test_two_ranks_train_their_shards_and_rank_0_saves_the_averaged_model(two_workers):
    job = two_workers
    rank1 = job.start("--epochs", "5", rank=1)
    rank0 = job.start("--epochs", "5", rank=0)

    assert rank0.wait() == 0, rank0.stdout + rank0.stderr
    assert rank1.wait() == 0, rank1.stdout + rank1.stderr
    assert "674 training samples (shard 0 of 2)" in rank0.stdout
    assert "673 training samples (shard 1 of 2)" in rank1.stdout
    assert "averaged the parameters of 2 ranks" in rank0.stdout
    assert "model.joblib" not in rank1.stdout
    assert_good_model(job.output_dir, world_size=2)
    assert_curves(job.log_dir / "worker-0", epochs=5)
    assert_curves(job.log_dir / "worker-1", epochs=5)
    assert sorted(path.name for path in job.log_dir.iterdir()) == ["worker-0", "worker-1"]


def test_rank_0_stopped_while_waiting_for_shards_resumes_the_wait(two_workers):
    job = two_workers
    rank0 = job.start("--epochs", "3", rank=0)
    rank0.wait_for_line("waiting up to")
    os.killpg(rank0.process.pid, signal.SIGTERM)
    assert rank0.wait() == 0, rank0.stdout + rank0.stderr
    assert joblib.load(job.output_dir / "checkpoint.joblib")["epoch"] == 3
    assert not (job.output_dir / "model.joblib").exists()

    rank1 = job.start("--epochs", "3", rank=1)
    rank0 = job.start("--epochs", "3", rank=0)

    assert rank1.wait() == 0, rank1.stdout + rank1.stderr
    assert rank0.wait() == 0, rank0.stdout + rank0.stderr
    assert "resumed from checkpoint" in rank0.stdout
    assert rank0.epoch_lines() == []
    assert "averaged the parameters of 2 ranks" in rank0.stdout
    assert_good_model(job.output_dir, world_size=2)


def test_rank_0_fails_with_a_clear_message_when_a_shard_never_comes(two_workers):
    rank0 = two_workers.run("--epochs", "2", "--shard-timeout", "1", rank=0)

    assert rank0.process.returncode == 1
    assert "no shard from rank(s) [1]" in rank0.stderr
    assert not (two_workers.output_dir / "model.joblib").exists()


def test_it_checkpoints_into_portal_checkpoint_dir_and_a_rerun_with_a_new_output_dir_resumes(job, tmp_path):
    checkpoints = tmp_path / "checkpoints"
    first_env = {"PORTAL_CHECKPOINT_DIR": str(checkpoints), "PORTAL_RUN_INDEX": "0"}
    slow = job.start("--epochs", "6", "--sleep-per-epoch", "1", extra_env=first_env)
    slow.wait_for_line("epoch 2/6")
    marker = checkpoints / train.MARKER
    assert marker.exists(), "a checkpoint after every epoch, each followed by the marker"
    os.killpg(slow.process.pid, signal.SIGTERM)
    assert slow.wait(timeout=30) == 0, slow.stdout + slow.stderr
    reached = joblib.load(checkpoints / "checkpoint.joblib")["epoch"]
    assert marker.stat().st_mtime >= (checkpoints / "checkpoint.joblib").stat().st_mtime
    assert not (job.output_dir / "checkpoint.joblib").exists()
    first = json.loads((job.output_dir / "train-summary.json").read_text())
    assert (first["run_index"], first["resumed"], first["epochs_this_run"]) == (0, False, reached)

    # The next run gets a new output folder (one per admission) but the same checkpoint folder.
    job.output_dir = job.root / "output-run-1"
    resumed = job.run("--epochs", "6", extra_env={**first_env, "PORTAL_RUN_INDEX": "1", "PORTAL_RESUMED": "1"})

    assert resumed.process.returncode == 0, resumed.stdout + resumed.stderr
    assert "run 1 (resumed after a preemption)" in resumed.stdout
    assert f"resumed from checkpoint {checkpoints / 'checkpoint.joblib'} at epoch {reached}/6" in resumed.stdout
    assert f"trained {6 - reached} epochs in this run, 6/6 in total" in resumed.stdout
    summary = json.loads((job.output_dir / "train-summary.json").read_text())
    assert summary == {
        "rank": 0,
        "run_index": 1,
        "resumed": True,
        "epochs_this_run": 6 - reached,
        "epochs_total": 6,
        "epochs": 6,
        "finished": True,
    }
    assert_good_model(job.output_dir)
    assert not (checkpoints / "checkpoint.joblib").exists()


# --- Through the portal: preempted by a reclaim, resumed from PORTAL_CHECKPOINT_DIR -------------------


def wait_until(predicate, *, timeout: float, what: str, processes):
    """Poll, playing the periodic reconcile meanwhile (no beat runs here); on time-out show what the portal saw."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        running.jobs_reconcile()
        value = predicate()
        if value:
            return value
        time.sleep(0.5)
    for job in PortalJob.objects.order_by("pk"):
        print(
            job.pk,
            job.name,
            job.status,
            job.status_message,
            list(job.events.values_list("to_status", "reason", "message")),
        )
    print(processes.logs())
    pytest.fail(f"timed out after {timeout} s waiting for {what}")


@pytest.mark.django_db(transaction=True)
def test_through_the_portal_a_job_preempted_by_a_reclaim_resumes_from_its_checkpoint(world, tmp_path):
    processes = Processes(tmp_path)
    processes.purge_broker()
    processes.worker()
    try:
        repo = publish_example_repo(source=ROOT / "examples" / "digits", target=tmp_path / "digits-repo")
        bob, alice = world.api(world.bob), world.api(world.alice)

        def submit(client, **fields):
            response = client.post("/api/v1/jobs/", {"code_url": repo, **fields}, format="json")
            assert response.status_code == 201, response.json()
            return response.json()["id"]

        def log(job_id) -> str:
            return bob.get(f"/api/v1/jobs/{job_id}/logs/").content.decode()

        def status(job_id) -> str:
            return PortalJob.objects.get(pk=job_id).status

        # nlp borrows all 8 GPUs with preemptible work; vision then takes 2 of its nominal back.
        borrower = submit(
            bob,
            name="digits-resume",
            department="nlp",
            gpus_per_worker=8,
            priority="low",
            command="python train.py --epochs 6 --sleep-per-epoch 2",
        )
        wait_until(
            lambda: "epoch 2/6" in log(borrower), timeout=600, what="two epochs of the borrower", processes=processes
        )
        claimant = submit(
            alice,
            name="claimant",
            department="vision",
            gpus_per_worker=2,
            command="python -c \"print('vision has its GPUs back')\"",
        )
        assert PortalJob.objects.get(pk=claimant).pending_reason == "preemption_in_progress"
        wait_until(
            lambda: status(claimant) == "succeeded", timeout=180, what="the claimant to run", processes=processes
        )
        wait_until(
            lambda: status(borrower) in ("succeeded", "failed", "cancelled"),
            timeout=300,
            what="the borrower to run again and end",
            processes=processes,
        )
    finally:
        processes.stop()

    job = PortalJob.objects.get(pk=borrower)
    assert job.status == "succeeded", job.status_message
    assert job.preemptions == 1
    last_log = log(borrower)  # the last run's
    assert "run 1 (resumed after a preemption)" in last_log  # PORTAL_RUN_INDEX=1, PORTAL_RESUMED=1
    assert "resumed from checkpoint" in last_log
    runs = job_run_dirs(job=job, executor_root=running.executor_for(job.cluster).root)
    first = json.loads((runs[0].output / "train-summary.json").read_text())
    last = json.loads((runs[-1].output / "train-summary.json").read_text())
    assert (first["run_index"], first["resumed"]) == (0, False) and first["epochs_this_run"] >= 2
    assert (last["run_index"], last["resumed"], last["epochs_total"]) == (1, True, 6)
    assert 0 < last["epochs_this_run"] < last["epochs_total"]
    assert f"trained {last['epochs_this_run']} epochs in this run, 6/6 in total" in last_log
    assert_good_model(runs[-1].output)
    # Lost: the GPU-time from the last checkpoint marker to the stop, not the whole first run.
    admitted = job.events.filter(to_status="admitted").order_by("id").first().time
    preempted = job.events.get(to_status="preempted")
    assert preempted.reason == "reclaim"
    assert "GPU-seconds lost since its last checkpoint at" in preempted.message
    whole_run = 8 * (preempted.time - admitted).total_seconds()
    assert 0 < job.lost_gpu_seconds < whole_run
    body = bob.get(f"/api/v1/jobs/{borrower}/").json()
    assert (body["preemptions"], body["lost_gpu_seconds"]) == (1, pytest.approx(job.lost_gpu_seconds))
