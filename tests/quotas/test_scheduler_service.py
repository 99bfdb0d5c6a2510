"""The scheduling cycle shares borrowed GPUs by least attained service (ServicePolicy): who had the most goes first."""

import pytest

from quotas.scheduler import (
    ServicePolicy,
)
from tests.quotas.scheduling import NOW, admitted, cycle, pending, quota, reasons, running

HOUR = 3600.0
# Least attained service, on one 8-GPU node: vision (nominal 2) runs #9 within its nominal and #10 on borrowed
# GPUs; nlp (nominal 2) runs #11 on 4 GPUs and wants 2 more, beyond its nominal, for job #1 (default policy:
# quantum 4 GPU-hours, factor 2, minimum run 30 minutes).
SHARING = (quota("vision", 2), quota("nlp", 2), quota("ops", 4))


def sharing(served=100 * HOUR, started=NOW - HOUR, priority=500, waiting_attained=0.0, keep=True, **kw):
    runs = [
        running(10, "vision", [[2, 3]], started=started, priority=priority, attained=served),
        running(11, "nlp", [[4, 5, 6, 7]]),
    ]
    if keep:
        runs.append(running(9, "vision", [[0, 1]]))
    return cycle([pending(1, "nlp", gpus=2, attained=waiting_attained)], runs, quotas=SHARING, **kw)


@pytest.mark.parametrize(
    "case, expected",
    [
        ({}, [(10, "service")]),  # 102 GPU-hours against none: the borrowed GPUs go to the fresh job
        ({"served": 2 * HOUR}, []),  # 4 GPU-hours in all (2 before, 2 in this run): below factor x quantum
        ({"waiting_attained": 60 * HOUR}, []),  # not twice the waiting job's own service
        ({"started": NOW - 600}, []),  # ran 10 minutes this time: shorter than the minimum run
        ({"priority": 1000}, []),  # higher priority than the waiting job
        ({"keep": False}, []),  # vision would drop below its nominal
        ({"service": ServicePolicy(enabled=False)}, []),  # sharing turned off
    ],
)
def test_borrowed_gpus_go_to_the_less_served_job(case, expected):
    d = sharing(**case)
    assert [(p.job_id, p.reason) for p in d.preemptions] == expected
    if expected:
        assert reasons(d) == {1: "preemption_in_progress"}
        assert "it has had 102.0 GPU-hours of service and #1 0.0" in d.preemptions[0].message


def test_jobs_that_had_a_quantum_of_service_wait_behind_fresh_ones_of_the_same_priority():
    jobs = [
        pending(1, gpus=4, attained=5 * HOUR),
        pending(2, gpus=4),
        pending(3, gpus=4, priority=1000, attained=50 * HOUR),
    ]
    d = cycle(jobs, quotas=(quota("vision", 8),))
    assert admitted(d) == [3, 2] and reasons(d) == {1: "quota_exhausted"}
    off = cycle(jobs, quotas=(quota("vision", 8),), service=ServicePolicy(enabled=False))
    assert admitted(off) == [3, 1]
