"""quotas.scheduler.eta.likely_end: when a job holding GPUs likely frees them, from how long jobs like it ran."""

from __future__ import annotations

import pytest

from quotas.scheduler.eta import likely_end


@pytest.mark.parametrize(
    ("began", "now", "runtime", "limit", "expected"),
    [
        pytest.param(0, 100, 3600, None, 3600, id="still within the usual runtime: then"),
        pytest.param(0, 5000, 3600, None, 5000 + 3600, id="past it: one usual runtime more, not any moment"),
        pytest.param(0, 5000, 3600, 6000, 6000, id="never past its limit"),
        pytest.param(0, 100, 3600, 1800, 1800, id="a limit shorter than the usual runtime"),
    ],
)
def test_a_running_jobs_likely_end(began, now, runtime, limit, expected):
    assert likely_end(began=began, now=now, runtime=runtime, limit=limit) == expected
