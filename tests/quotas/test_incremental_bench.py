"""bench.replay's two engines give the same policy results, and bench.cycle --incremental reports beside the full cycle."""

from __future__ import annotations

import random

from bench import cycle, replay

POLICY_FIGURES = (
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
    "violations_by_size_and_reason",
    "preemptions_by_reason",
    "wasted_gpu_seconds_by_reason",
)


def test_the_replay_engines_agree_on_every_policy_figure(tmp_path):
    rng = random.Random(11)
    paths = []
    for name, jobs in (("teamA", 150), ("teamB", 90), ("teamC", 40)):
        rows = ["job_id,submission_time,duration,num_gpu"]
        rows += [
            f"{name}-{i},{rng.randint(0, 30000)},{rng.randint(60, 9000)},{rng.choice([1, 1, 2, 4, 8, 16])}"
            for i in range(jobs)
        ]
        path = tmp_path / f"{name}.csv"
        path.write_text("\n".join(rows) + "\n")
        paths.append(str(path))
    args = ["--trace", "itp", "--input", *paths, "--gpus", "32", "--policy", "portal", "--seed", "5"]
    incremental = replay.main([*args, "--engine", "incremental"])
    stateless = replay.main([*args, "--engine", "stateless"])
    assert incremental["preemptions"] > 0  # a busy pool: the engines had something to disagree on
    assert {k: incremental[k] for k in POLICY_FIGURES} == {k: stateless[k] for k in POLICY_FIGURES}
    assert incremental["engine"] == "incremental" and incremental["rebuilds"] == {}
    assert incremental["admissions"] == stateless["admissions"] > 0
    assert incremental["admissions_per_cpu_second"] > 0 and incremental["scheduler_cpu_seconds"] >= 0
    assert replay.main(args)["engine"] == "incremental"  # the default


def test_the_cycle_bench_times_the_incremental_cycle_beside_the_full_one():
    report = cycle.main(
        [
            "--pending",
            "300",
            "--nodes",
            "40",
            "--gpus-per-node",
            "8",
            "--departments",
            "6",
            "--repeat",
            "3",
            "--incremental",
        ]
    )
    assert report["incremental_equals_schedule"] is True
    assert report["incremental_rebuilds"] == {}
    assert 0 < report["incremental_ms_p50"] <= report["incremental_ms_p95"]
    assert report["cycle_ms_p50"] > 0 and report["goal_incremental_ms"] == 5.0
    # arrival cycles: most of the measured ones, each admitting and evicting what schedule() does
    assert report["arrival_cycles"] >= 1 and report["arrival_cycles_admit_and_evict_as_schedule"] is True
    assert 0 < report["arrival_cycle_ms_p50"] <= report["arrival_cycle_ms_p95"]
