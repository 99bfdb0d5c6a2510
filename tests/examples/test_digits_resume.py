"""examples/digits/train.py stopped and started again (digits_harness.py): SIGTERM writes a checkpoint and the
next run resumes from it, into PORTAL_CHECKPOINT_DIR across output folders, and never from other settings."""

from __future__ import annotations

import json
import os
import signal
import time

import joblib
import numpy as np

from tests.examples.digits_harness import assert_curves, assert_good_model, train


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
