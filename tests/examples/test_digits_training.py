"""examples/digits/train.py trains as a job (digits_harness.py): the exit code, the log lines, the model file,
the TensorBoard curves and metrics.json, alone and as two ranks that each train a shard."""

from __future__ import annotations

from tests.examples.digits_harness import assert_curves, assert_good_model


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


def test_rank_0_fails_with_a_clear_message_when_a_shard_never_comes(two_workers):
    rank0 = two_workers.run("--epochs", "2", "--shard-timeout", "1", rank=0)

    assert rank0.process.returncode == 1
    assert "no shard from rank(s) [1]" in rank0.stderr
    assert not (two_workers.output_dir / "model.joblib").exists()
