"""quotas.scheduler.eta.quota_allows_at: a quota-blocked job does not read "now" because the pool is idle."""

from __future__ import annotations

import pytest

from quotas.scheduler import RunningJob, Slot
from quotas.scheduler.eta import quota_allows_at

NOW = 1_000_000.0


def held(job_id: int, department: str, gpus: float, deadline: float | None, terminating: bool = False) -> RunningJob:
    return RunningJob(
        job_id=job_id,
        pool_id=1,
        department=department,
        priority=500,
        preemptible=False,
        gpus=gpus,
        slots=(Slot(worker=0, node="n0", gpus=tuple(range(int(gpus)))),),
        started_at=NOW - 60,
        deadline=deadline,
        terminating=terminating,
    )


@pytest.mark.parametrize(
    ("running", "need", "allowed", "expected"),
    [
        pytest.param([], 4, 4, NOW, id="nothing runs: now"),
        pytest.param([held(1, "vision", 2, NOW + 100)], 2, 4, NOW, id="room within the quota: now"),
        pytest.param([held(1, "vision", 4, NOW + 100)], 2, 4, NOW + 100, id="when its own job ends"),
        pytest.param(
            [held(1, "vision", 2, NOW + 300), held(2, "vision", 2, NOW + 100)], 3, 4, NOW + 300, id="as many as needed"
        ),
        pytest.param([held(1, "nlp", 8, NOW + 100)], 4, 4, NOW, id="other departments do not count"),
        pytest.param([held(1, "vision", 4, None)], 2, 4, None, id="a job without a limit: no estimate"),
        pytest.param([], 8, 4, None, id="more than the quota: never"),
        pytest.param([held(1, "vision", 4, NOW - 50)], 2, 4, NOW, id="past its limit: any moment, not the past"),
        pytest.param([held(1, "vision", 4, None, terminating=True)], 2, 4, NOW, id="already stopping"),
        pytest.param([held(1, "vision", 4, NOW + 100)], 2, None, NOW, id="no limit on borrowing"),
    ],
)
def test_the_first_moment_a_quota_lets_the_job_in(running, need, allowed, expected):
    assert quota_allows_at(running=running, department="vision", need=need, allowed=allowed, now=NOW) == expected
