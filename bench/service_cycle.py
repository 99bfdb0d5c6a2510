"""The scheduler service's cycle on a large queue: a full cycle against an arrival cycle, in one run.

    python -m bench.service_cycle [--queued 5000] [--nodes 125] [--arrivals 15] [--json OUT.json]

A fresh data root (SQLite; or DATABASE_URL's PostgreSQL database, which it drops and makes afresh as bench.api does:
name one of its own), the demo, and
its `local` cluster's pool grown to ``--nodes`` nodes of 8 GPUs, every GPU held by a running job that cannot be
preempted (one per node), departments' nominal quotas sharing the pool, and ``--queued`` jobs waiting (1-8 GPUs,
1-2 workers, three priority classes). Then, in-process, as the service runs them (jobs.admission.service_cycle):

- ``full``: a full cycle (reads every queued and holding job, decides, writes what changed), ``--repeat`` times;
- ``arrival``: one new job queued, then the service's cycle for its request, ``--arrivals`` times. After a full
  cycle that decided nothing these are arrival cycles (the new job decided alone, after the check under the cycle
  lock that the GPU-holding jobs are unchanged); the report says how many were.

Nothing fits (the pool is full), so every cycle decides nothing and the timings are of the deciding and writing
alone. PORTAL_SCHEDULER_PERIOD_SECONDS (default 5) bounds how long after a full cycle arrival cycles are allowed; a
full cycle slower than that leaves none, and the report says so. Goal (issue 18): a submission admitted within
0.2 s of its 201 whatever the queue.
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.api import _recreate_database
from bench.common import emit, percentile

ROOT = Path(__file__).resolve().parent.parent
GOAL_SECONDS = 0.2


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--queued", type=int, default=5000)
    parser.add_argument("--nodes", type=int, default=125)
    parser.add_argument("--arrivals", type=int, default=15)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    data_root = Path(tempfile.mkdtemp(prefix="portal-bench-"))
    os.environ.update(PORTAL_DATA_ROOT=str(data_root), PORTAL_SCHEDULER="service", PORTAL_LOG_LEVEL="WARNING")
    steps = [["migrate", "-v0"], ["demo"]]
    if os.environ.get("DATABASE_URL"):
        _recreate_database(os.environ["DATABASE_URL"])  # bench.api's: a database of its own, made afresh
    if not os.environ.get("REDIS_URL"):  # the embedded channel layer keeps its own SQLite database
        steps.insert(1, ["migrate", "--database", "channels", "-v0"])
    for step in steps:
        subprocess.run([sys.executable, "manage.py", *step], cwd=ROOT, env=os.environ, check=True, capture_output=True)
    try:
        return _measure(args)
    finally:
        shutil.rmtree(data_root, ignore_errors=True)


def _measure(args: argparse.Namespace) -> dict:
    import django

    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    django.setup()
    from django.conf import settings

    from jobs import admission

    new_job = _seed(args.queued, args.nodes, args.seed)
    memory = admission.ServiceMemory()
    full = []
    for _ in range(args.repeat):
        started = time.perf_counter()
        decided = admission.service_cycle(memory, arrivals=None)
        full.append(time.perf_counter() - started)
        assert not decided.admissions and not decided.preemptions, "the pool should be full"
    arrival = []
    for _ in range(args.arrivals):
        job_id = new_job()
        started = time.perf_counter()
        admission.service_cycle(memory, arrivals=[job_id])
        arrival.append(time.perf_counter() - started)
    report = {
        "queued": args.queued,
        "nodes": args.nodes,
        "database": settings.DATABASES["default"]["ENGINE"].rsplit(".", 1)[-1],
        "full_cycle_s_p50": round(statistics.median(full), 3),
        "arrival_cycle_s_p50": round(statistics.median(arrival), 4),
        "arrival_cycle_s_p95": round(percentile(sorted(arrival), 0.95), 4),
        "arrivals": args.arrivals,
        "arrival_cycles": memory.arrival_cycles,
        "period_seconds": settings.PORTAL_SCHEDULER_PERIOD_SECONDS,
        "goal_seconds": GOAL_SECONDS,
    }
    verdict = "within" if report["arrival_cycle_s_p50"] <= GOAL_SECONDS else "NOT within"
    summary = (
        f"{args.queued} queued on {args.nodes * 8} GPUs: full cycle p50 {report['full_cycle_s_p50']} s; a submission's "
        f"cycle p50 {report['arrival_cycle_s_p50']} s, p95 {report['arrival_cycle_s_p95']} s "
        f"({memory.arrival_cycles} of {args.arrivals} arrival cycles), {verdict} the {GOAL_SECONDS} s goal"
    )
    return emit(report, summary=summary, json_path=args.json)


def _seed(queued: int, nodes: int, seed: int):
    """The full pool and the queue; returns a function that queues one more job and gives its id."""
    from django.contrib.auth import get_user_model
    from django.utils import timezone

    from accounts.models import Department
    from clusters.models import Cluster
    from images.models import FrameworkImage
    from jobs.models import Job
    from quotas.models import PriorityClass, Quota

    rng = random.Random(seed)
    cluster = Cluster.objects.get(name="local")
    pool = cluster.pools.get()
    pool.nodes, pool.gpus_per_node = nodes, 8
    pool.save(update_fields=["nodes", "gpus_per_node"])
    departments = list(Department.objects.filter(quotas__pool=pool).distinct())
    Quota.objects.filter(pool=pool).update(nominal=pool.total // len(departments))
    user = get_user_model().objects.get(username="alice")
    image = FrameworkImage.objects.filter(official=True).first()
    priorities = list(PriorityClass.objects.order_by("value"))
    fixed = max(priorities, key=lambda p: (not p.preemptible, p.value))
    now = timezone.now()

    def job(**fields) -> Job:
        return Job(
            name=f"bench-{rng.randrange(10**6)}",
            cluster=cluster,
            pool=pool,
            submitted_by=user,
            code_url="https://git.example.com/bench/model.git",
            code_ref="main",
            command="python train.py",
            image=image,
            **fields,
        )

    running = [
        job(
            department=departments[node % len(departments)],
            workers=1,
            gpus_per_worker=8,
            priority=fixed,
            status="running",
            admitted_at=now,
            started_at=now,
            run_id=f"bench-{node}",
            placement=[{"worker": 0, "node": name, "gpus": list(range(8)), "gpu_fraction": None}],
        )
        for node, name in enumerate(pool.node_names)
    ]
    Job.objects.bulk_create(running)
    waiting = []
    for _ in range(queued):
        workers, gpus = rng.choice([(1, 1), (1, 2), (1, 4), (1, 8), (2, 8), (2, 4)])
        waiting.append(
            job(
                department=rng.choice(departments),
                workers=workers,
                gpus_per_worker=gpus,
                priority=rng.choice(priorities),
                status="queued",
            )
        )
    Job.objects.bulk_create(waiting)

    def new_job() -> int:
        made = job(department=rng.choice(departments), workers=1, gpus_per_worker=2, priority=rng.choice(priorities))
        made.status = "queued"
        made.save()
        return made.pk

    return new_job


if __name__ == "__main__":
    main()
