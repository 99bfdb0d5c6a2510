"""bench.replay --estimates (bench/estimates.py): the start-estimate report, and that it changes nothing else."""

from __future__ import annotations

from bench import replay
from tests.bench.test_scheduler_benches import itp  # noqa: F401  (the fixture)

ARGS = ["--trace", "itp", "--gpus", "32", "--gpus-per-node", "8", "--policy", "portal", "--seed", "3"]


def test_the_replay_measures_both_estimators_on_the_jobs_that_waited(itp):
    plain = replay.main([*ARGS, "--input", *itp])
    measured = replay.main([*ARGS, "--input", *itp, "--estimates"])

    assert "start_estimates" not in plain
    report = measured.pop("start_estimates")
    for key in ("wall_seconds", "scheduler_seconds", "scheduler_cpu_seconds", "admissions_per_second"):
        plain.pop(key), measured.pop(key, None)
    plain.pop("admissions_per_cpu_second"), measured.pop("admissions_per_cpu_second")
    assert measured == plain  # measuring estimates does not change a single decision
    assert report["jobs_waited_10_min"] > 0
    for name in ("limits", "history"):
        figures = report[name]
        assert 0 <= figures["no_estimate"] <= report["jobs_waited_10_min"]
        assert 0 <= figures["median_relative_error"] <= figures["p90_relative_error"]
    # Knowing how long similar jobs ran beats assuming every job runs for 7 days.
    assert report["history"]["median_relative_error"] < report["limits"]["median_relative_error"]
