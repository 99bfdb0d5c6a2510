"""bench.replay and bench.cycle on small seeded inputs: they run, keep their JSON keys and stay physical."""

from __future__ import annotations

import json
import random

import pytest

from bench import cycle, replay

REPLAY_KEYS = {
    "jobs",
    "mean_queue_s",
    "p50_queue_s",
    "p95_queue_s",
    "p99_queue_s",
    "mean_jct_s",
    "p95_jct_s",
    "utilization",
    "makespan_s",
    "preemptions",
    "wasted_gpu_seconds",
    "guarantee_violations",
    "admissions_per_second",
    "wall_seconds",
}


@pytest.fixture
def itp(tmp_path):
    rng = random.Random(7)
    paths = []
    for name, jobs in (("teamA", 120), ("teamB", 60)):
        rows = ["job_id,submission_time,duration,num_gpu"]
        rows += [
            f"{name}-{i},{rng.randint(0, 20000)},{rng.randint(60, 7200)},{rng.choice([1, 1, 2, 4, 8, 16])}"
            for i in range(jobs)
        ]
        path = tmp_path / f"{name}.csv"
        path.write_text("\n".join(rows) + "\n")
        paths.append(str(path))
    return paths


@pytest.mark.parametrize("policy", ["portal", "fifo", "fifo-backfill", "hard-quota"])
def test_the_replay_reports_every_figure_within_physical_bounds(itp, policy, tmp_path):
    out = tmp_path / "out.json"
    report = replay.main(
        [
            "--trace",
            "itp",
            "--input",
            *itp,
            "--gpus",
            "32",
            "--gpus-per-node",
            "8",
            "--policy",
            policy,
            "--seed",
            "3",
            "--json",
            str(out),
        ]
    )
    assert REPLAY_KEYS <= set(report) and json.loads(out.read_text()) == report
    assert report["jobs"] == 180
    assert report["p50_queue_s"] <= report["p95_queue_s"] <= report["p99_queue_s"]
    assert report["mean_jct_s"] >= report["mean_queue_s"]  # a job's JCT includes its duration
    assert 0 < report["utilization"] <= 1
    if policy != "portal":
        assert report["preemptions"] == 0 and report["wasted_gpu_seconds"] == 0


def test_quotas_are_proportional_to_gpu_hours_and_sum_to_the_pool(itp):
    from pathlib import Path

    jobs = replay.load_itp([Path(p) for p in itp], seed=1)
    quotas = replay.nominal_quotas(jobs, 32)
    assert sum(quotas.values()) == 32 and quotas["teamA"] > quotas["teamB"]


def test_one_cycle_on_a_synthetic_snapshot(tmp_path):
    report = cycle.main(
        ["--pending", "300", "--nodes", "20", "--departments", "5", "--repeat", "2", "--json", str(tmp_path / "c.json")]
    )
    assert {"cycle_ms_p50", "cycle_ms_p95"} <= set(report)
    assert report["admitted"] + report["waiting"] == 300


def test_a_moment_can_settle_on_every_change_as_the_scheduler_service_does(itp):
    argv = ["--trace", "itp", "--input", *itp, "--gpus", "32", "--policy", "portal", "--seed", "3"]
    default, settled = replay.main(argv), replay.main([*argv, "--settle", "changes"])
    assert default["settle"] == "preemptions" and settled["settle"] == "changes"
    assert settled["jobs"] == default["jobs"] == 180 and settled["never_started"] == 0
    # nobody waits longer for being looked at again sooner
    assert settled["mean_queue_s"] <= default["mean_queue_s"] * 1.05


def test_service_cycle_bench_times_full_and_arrival_cycles_on_a_database_of_its_own(tmp_path):
    """bench.service_cycle in a process of its own (it sets up Django on a fresh SQLite data root)."""
    import os
    import subprocess
    import sys

    from tests.processes import ROOT

    env = {k: v for k, v in os.environ.items() if k not in {"DATABASE_URL", "REDIS_URL", "DJANGO_SETTINGS_MODULE"}}
    env["TMPDIR"] = str(tmp_path)
    out = tmp_path / "out.json"
    argv = ["--queued", "40", "--nodes", "2", "--arrivals", "3", "--repeat", "1", "--json", str(out)]
    subprocess.run([sys.executable, "-m", "bench.service_cycle", *argv], cwd=ROOT, env=env, check=True, timeout=300)
    report = json.loads(out.read_text())
    assert report["queued"] == 40 and report["database"] == "sqlite3"
    assert report["arrival_cycles"] == 3  # each submission after the quiet full cycle was decided alone
    assert 0 < report["arrival_cycle_s_p50"] <= report["arrival_cycle_s_p95"] and report["full_cycle_s_p50"] > 0
