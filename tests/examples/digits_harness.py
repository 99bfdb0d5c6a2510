"""The example training project, examples/digits/train.py, run as the portal runs it, for tests/examples.

A ``Job`` starts train.py as real processes with the job environment contract (TENSORBOARD_LOG_DIR,
PORTAL_OUTPUT_DIR, PORTAL_CHECKPOINT_DIR, WORLD_SIZE, RANK ...), one ``Worker`` per rank, each logging to files
as the executor's do; the assertions read what a user sees: the model file and the TensorBoard curves.
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
