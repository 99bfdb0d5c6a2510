"""Guarantee sweep: bench.replay (--policy portal) over many ITP configurations.

Each configuration is a set of ITP clusters (each alone, or pooled), a pool size and a seed. For each the
table shows jobs, mean/p95 queue, guarantee violations with their breakdown by reason, how many of them were
unplaceable (bench.replay's violations_unplaceable: work that cannot be preempted and guaranteed whole-node work held
every node the job could use, all the time it was entitled), and wasted GPU time as a share of delivered GPU time. The goal (issue 18) is 0 violations in every configuration, not only the tuned
one (01-05 pooled at 832 GPUs).

    python -m bench.guarantees [--sizes 384,512,640,832,1024] [--seeds 1,2,3]
                               [--combos all|singles|pooled|01+02,03] [--jobs-per-core N]
                               [--settle changes|preemptions] --json OUT

Each replay settles a moment on any change (bench.replay --settle changes), as the scheduler service cycles at
least every 5 s; --settle preemptions gives bench.replay's default.

Runs in one process by default (the machine is shared); --jobs-per-core N uses N worker processes.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import itertools
import json
from collections import Counter
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

from bench import replay

DEFAULT_DIR = Path(__file__).resolve().parents[2] / "shared" / "data" / "traces" / "microsoft-itp"


def combos(spec: str, names: list[str]) -> list[tuple[str, ...]]:
    """The cluster sets to replay: singles, the whole pool, or explicit ones like 01+02,03."""
    if spec == "singles":
        return [(n,) for n in names]
    if spec == "pooled":
        return [tuple(names)]
    if spec == "all":
        pairs = list(itertools.combinations(names, 2))
        return list(dict.fromkeys([(n,) for n in names] + pairs + [tuple(names)]))
    return [tuple(part.split("+")) for part in spec.split(",") if part]


def run_one(config: tuple[tuple[str, ...], int, int, str, str]) -> dict:
    clusters, gpus, seed, directory, settle = config
    inputs = [str(Path(directory) / f"cluster{c}.csv") for c in clusters]
    argv = ["--trace", "itp", "--input", *inputs, "--gpus", str(gpus), "--policy", "portal", "--seed", str(seed)]
    argv += ["--settle", settle]
    with contextlib.redirect_stdout(io.StringIO()):
        report = replay.main(argv)
    reasons: Counter[str] = Counter()
    for key, count in report["violations_by_size_and_reason"].items():
        reasons[str(key).split(", ", 1)[-1]] += count  # keys read "8 GPUs, lower_in_queue"
    util_gpu_s = report["utilization"] * gpus * report["makespan_s"]
    return {
        "config": f"{'+'.join(clusters)}@{gpus}/s{seed}",
        "clusters": list(clusters),
        "gpus": gpus,
        "seed": seed,
        "jobs": report["jobs"],
        "mean_queue_h": round(report["mean_queue_s"] / 3600, 2),
        "p95_queue_h": round(report["p95_queue_s"] / 3600, 2),
        "violations": report["guarantee_violations"],
        "violations_by_size_and_reason": report["violations_by_size_and_reason"],
        "violations_by_reason": dict(reasons),
        "unplaceable": report["violations_unplaceable"],
        "wasted_pct": round(100 * report["wasted_gpu_seconds"] / max(util_gpu_s, 1e-9), 2),
        "preemptions": report["preemptions"],
        "never_started": report["never_started"],
        "scheduler_cpu_seconds": report["scheduler_cpu_seconds"],
    }


def table(rows: list[dict]) -> str:
    lines = [
        f"{'config':<28} {'jobs':>6} {'mean h':>7} {'p95 h':>7} {'viol':>6} {'unpl.':>6} {'wasted%':>8}  breakdown"
    ]
    for r in rows:
        breakdown = ", ".join(f"{k} {v}" for k, v in sorted(r["violations_by_reason"].items(), key=lambda kv: -kv[1]))
        lines.append(
            f"{r['config']:<28} {r['jobs']:>6} {r['mean_queue_h']:>7.2f} {r['p95_queue_h']:>7.2f} "
            f"{r['violations']:>6} {r['unplaceable']:>6} {r['wasted_pct']:>8.2f}  {breakdown}"
        )
    total = sum(r["violations"] for r in rows)
    clean = sum(1 for r in rows if r["violations"] == 0)
    unplaceable = sum(r["unplaceable"] for r in rows)
    lines.append(
        f"{len(rows)} configurations, {clean} with 0 violations, {total} violations in all (target: 0 everywhere), "
        f"{unplaceable} of them unplaceable (no node any scheduler could have used)"
    )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> list[dict]:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dir", type=Path, default=DEFAULT_DIR, help="folder holding cluster0N.csv")
    parser.add_argument("--clusters", default="01,02,03,04,05")
    parser.add_argument("--sizes", default="384,512,640,832,1024")
    parser.add_argument("--seeds", default="1,2,3")
    parser.add_argument("--combos", default="all", help="all | singles | pooled | explicit, e.g. 01+02,03")
    parser.add_argument("--jobs-per-core", type=int, default=1, help="worker processes (default 1)")
    parser.add_argument("--settle", choices=["changes", "preemptions"], default="changes")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    names = [c for c in args.clusters.split(",") if c]
    configs = [
        (combo, int(size), int(seed), str(args.dir), args.settle)
        for combo in combos(args.combos, names)
        for size in args.sizes.split(",")
        for seed in args.seeds.split(",")
    ]
    if args.jobs_per_core > 1:
        with ProcessPoolExecutor(max_workers=args.jobs_per_core) as pool:
            rows = list(pool.map(run_one, configs))
    else:
        rows = []
        for config in configs:
            rows.append(run_one(config))
            print(table(rows[-1:]).splitlines()[1], flush=True)  # progress, one line per configuration
    print(table(rows))
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2))
    return rows


if __name__ == "__main__":
    main()
