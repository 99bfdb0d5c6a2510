"""Fixtures of the digits example's tests: jobs of train.py processes, each in its own directory."""

from __future__ import annotations

import pytest

from tests.examples.digits_harness import Job


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
