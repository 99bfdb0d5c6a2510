"""Replay real training-job arrivals through the scheduler's pure core and measure queueing.

    python -m bench.replay --trace itp --input FILE.csv [FILE.csv ...] --gpus N --gpus-per-node 8 \\
        --policy portal|fifo|fifo-backfill|hard-quota --seed S --json OUT.json

Each CSV (``job_id,submission_time,duration,num_gpu``) is one department; all share one pool of N GPUs.
Nominal quotas are proportional to each department's GPU-hours (largest remainder, summing to N).
The scheduler never sees durations: jobs finish when their trace duration has run.

Policies (the same `quotas.scheduler.schedule` drives all of them):
- portal: the departments' quotas, borrowing idle GPUs without limit, reclaim and priority preemption,
  least-attained-service sharing of borrowed GPUs (``--service``, see ``ServicePolicy``), moving
  guaranteed work off a node that a guaranteed gang needs, fair share across departments, best-effort
  FIFO within one. A non-preemptible job never borrows, so a job bigger than its department's nominal
  is made preemptible (it could never start otherwise);
- hard-quota: the same quotas with no borrowing (nothing to reclaim);
- fifo: one queue in submit order, no quotas; fifo-backfill: the same, and any job that fits may pass
  a blocked one (no reservation, since durations are unknown).
The baselines never preempt, and FIFO ignores priorities.

Priorities come from the seed: 10% high (1000, not preemptible), 70% normal (500, preemptible),
20% low (100, preemptible). Gangs above 8 GPUs take whole nodes (num_gpu / 8 workers of 8 GPUs).
A preempted job stops at once, loses the work since its last checkpoint (every 30 simulated minutes)
and is queued again with its original submit time. The scheduler is told that checkpoint cadence (as a
portal cluster declares ``checkpoint_seconds``), never durations. Each cycle looks at the first 64 waiting jobs
of every department (Kueue's heads), and at every waiting job that fits in its department's unused
nominal quota wherever it stands (the portal looks at all of them; the replay, for speed, only at
those that can start or are guaranteed to).

Engines (``--engine``, the same decisions either way): ``incremental`` (the default) keeps one
``quotas.scheduler.incremental.IncrementalScheduler`` for the whole replay and tells it what changed (jobs shown,
started, ended, preempted); ``stateless`` builds a snapshot for every cycle and calls ``schedule()``.

Moments (``--settle``): every arrival and ending is a moment, and the scheduler cycles at it. By default
(``preemptions``, the meaning this benchmark always had) a moment cycles again only while a cycle preempts (the
victims stop at once); with ``changes`` it also cycles again after a cycle that admitted, as the portal's
scheduler service does (a cycle at least every PORTAL_SCHEDULER_PERIOD_SECONDS, 5 s, far inside the 5-minute
guarantee window). Without it, a job that waited behind one just admitted is looked at again only at the pool's
next arrival or ending, which in a long queue can be more than 5 minutes later: a violation of the replay's
making, not the scheduler's.

Metrics: queue = first start - submit; JCT = finish - submit; utilization = useful GPU-seconds /
(N x makespan); wasted = GPU-seconds lost to preemption; a guarantee violation = a job that stays
entitled (its department's usage plus the job within nominal) for more than 5 minutes of one
waiting period; admissions_per_second = admissions / seconds spent inside the scheduler (wall clock; for
the incremental engine the calls that tell it what changed count too); violations_unplaceable = those of the
violations whose job (of whole-node workers) no scheduler could have started in its whole entitled period, since
work that cannot be preempted or guaranteed whole-node work held every node it could use (``_mark_placeable``;
still counted among the violations); admissions_per_cpu_second the same over
CPU seconds (``time.process_time``), which a shared machine disturbs less.
"""

from __future__ import annotations

import argparse
import bisect
import csv
import heapq
import itertools
import math
import random
import statistics
import time
from collections import defaultdict
from dataclasses import dataclass, field, replace
from pathlib import Path

from bench.common import emit, percentile
from quotas.scheduler import (
    BEST_EFFORT_FIFO,
    GREEDY,
    STRICT_FIFO,
    PendingJob,
    PoolState,
    QuotaState,
    RunningJob,
    ServicePolicy,
    Snapshot,
    compiled,
    schedule,
)
from quotas.scheduler.incremental import IncrementalScheduler

CHECKPOINT_SECONDS = 1800
ENTITLED_GRACE_SECONDS = 300
HEADS_PER_DEPARTMENT = 64
CYCLES_PER_MOMENT = 10  # cycles at one moment while each evicts; then one more RETRY_SECONDS later, and so on
RETRY_SECONDS = 1.0
RETRY = 2  # an event kind: a cycle and nothing else
PRIORITIES = [(0.10, 1000, False), (0.80, 500, True), (1.00, 100, True)]  # cumulative share, value, preemptible


@dataclass
class SimJob:
    job_id: int
    department: str
    submitted: float
    duration: float
    gpus: int
    priority: int
    preemptible: bool
    remaining: float = 0.0
    first_start: float | None = None
    started: float = 0.0
    finished: float | None = None
    epoch: int = 0  # bumps on preemption, so stale finish events are ignored
    attained: float = 0.0  # GPU-seconds run in earlier (preempted) runs
    entitled_since: float | None = None
    placeable: bool = False  # in its current entitled period, at some cycle there were nodes it could have used
    slots: tuple = field(default=())
    # What the scheduler sees of it, made once per arrival or admission rather than every cycle.
    pending_view: PendingJob | None = None
    running_view: RunningJob | None = None

    @property
    def shape(self) -> tuple[int, float]:
        return (1, float(self.gpus)) if self.gpus <= 8 else (self.gpus // 8, 8.0)


def load_itp(paths: list[Path], seed: int) -> list[SimJob]:
    rng = random.Random(seed)
    jobs = []
    for path in paths:
        with path.open() as handle:
            rows = sorted(csv.DictReader(handle), key=lambda r: (float(r["submission_time"]), r["job_id"]))
        for row in rows:
            draw = rng.random()
            _, priority, preemptible = next(p for p in PRIORITIES if draw < p[0])
            jobs.append(
                SimJob(
                    job_id=len(jobs) + 1,
                    department=path.stem,
                    submitted=float(row["submission_time"]),
                    duration=float(row["duration"]),
                    gpus=int(row["num_gpu"]),
                    priority=priority,
                    preemptible=preemptible,
                    remaining=float(row["duration"]),
                )
            )
    return jobs


def nominal_quotas(jobs: list[SimJob], gpus: int) -> dict[str, int]:
    hours: dict[str, float] = defaultdict(float)
    for job in jobs:
        hours[job.department] += job.gpus * job.duration
    total = sum(hours.values())
    exact = {d: gpus * h / total for d, h in hours.items()}
    quotas = {d: math.floor(v) for d, v in exact.items()}
    for d in sorted(exact, key=lambda d: exact[d] - quotas[d], reverse=True)[: gpus - sum(quotas.values())]:
        quotas[d] += 1
    return quotas


class Replay:
    def __init__(
        self,
        jobs,
        *,
        gpus,
        gpus_per_node,
        policy,
        nominal,
        service=ServicePolicy(),
        engine="incremental",
        settle="preemptions",
    ):
        self.jobs, self.policy, self.nominal, self.service = jobs, policy, nominal, service
        self.engine = engine
        self.settle = settle  # what makes a moment cycle again: its preemptions only, or any change
        self.scheduler: IncrementalScheduler | None = None  # the incremental engine's, made at the first cycle
        self.scheduler_cpu_seconds = 0.0
        self.nodes = tuple(f"node-{i:03}" for i in range(gpus // gpus_per_node))
        self.gpus_per_node, self.capacity = gpus_per_node, gpus
        self.pending: dict[str, dict[int, SimJob]] = defaultdict(dict)  # department -> waiting jobs
        self.running: dict[int, SimJob] = {}
        self.usage: dict[str, float] = defaultdict(float)  # real departments, for guarantees
        self.events: list[tuple[float, int, int, int]] = []  # time, kind (0 finish, 1 arrival, 2 retry), job id, epoch
        self.violations = self.preemptions = self.admissions = 0
        self.by_reason: dict[str, int] = defaultdict(int)  # preemptions by reason
        self.wasted_by: dict[str, float] = defaultdict(float)  # GPU-seconds lost by preemption reason
        self.violated: dict[str, int] = defaultdict(int)  # violations by the job's last waiting reason
        self.unplaceable = 0  # of the violations, those no scheduler could have avoided (_mark_placeable)
        self.last_reason: dict[int, str] = {}
        self.wasted = 0.0
        self.scheduler_seconds = 0.0
        self.shown: set[int] = set()  # the waiting jobs the incremental engine was shown last cycle
        self.nominated: set[int] = (
            set()
        )  # jobs that evictions were started for (the portal stores this as their reason)
        if policy != "portal":  # baselines never preempt; FIFO ignores priorities altogether
            for job in jobs:
                job.preemptible = False
                job.priority = 500 if policy != "hard-quota" else job.priority
        if policy == "portal":  # a job that may not be preempted runs only within its nominal: none bigger than that
            for job in jobs:
                job.preemptible = job.preemptible or job.gpus > nominal.get(job.department, 0)
        if policy in ("fifo", "fifo-backfill"):
            self.view = lambda job: "all"
            self.quotas = (QuotaState(department="all", pool_id=1, nominal=gpus),)
            self.fifo = {"all": STRICT_FIFO if policy == "fifo" else GREEDY}
        else:
            self.view = lambda job: job.department
            limit = 0 if policy == "hard-quota" else None
            self.quotas = tuple(
                QuotaState(department=d, pool_id=1, nominal=n, borrowing_limit=limit) for d, n in nominal.items()
            )
            self.fifo = {d: BEST_EFFORT_FIFO for d in nominal}

    def run(self) -> float:
        for job in self.jobs:
            heapq.heappush(self.events, (job.submitted, 1, job.job_id, 0))
        by_id = {job.job_id: job for job in self.jobs}
        now = 0.0
        while self.events:
            now = self.events[0][0]
            while self.events and self.events[0][0] == now:
                _, kind, job_id, epoch = heapq.heappop(self.events)
                if kind == RETRY:
                    continue
                job = by_id[job_id]
                if kind == 1:
                    self.pending[job.department][job_id] = job
                    self._entitlement(job.department, now)
                elif job.epoch == epoch and job_id in self.running:
                    del self.running[job_id]
                    if self.scheduler is not None:
                        self._timed(self.scheduler.remove_running, job_id)
                    job.finished = now
                    self._use(job.department, -job.gpus, now)
            for _ in range(CYCLES_PER_MOMENT):  # preempted jobs stop at once: cycle again at the same moment
                if not self._cycle(now):
                    break
            else:
                # Still evicting: the portal cycles again once the victims have stopped (their ends request a
                # cycle), whether or not anything else happens; GPUs freed here must not sit idle until then.
                heapq.heappush(self.events, (now + RETRY_SECONDS, RETRY, 0, 0))
        for department in list(self.pending):
            self._entitlement(department, math.inf)
        return now

    def _use(self, department: str, gpus: float, now: float) -> None:
        self.usage[department] += gpus
        self._entitlement(department, now)

    def _entitlement(self, department: str, now: float) -> None:
        """Start or end the entitled periods of a department's waiting jobs; count those over 5 minutes."""
        room = self.nominal.get(department, 0) - self.usage[department]
        for job in self.pending[department].values():
            entitled = job.gpus <= room + 1e-9 and now != math.inf
            if entitled and job.entitled_since is None:
                job.entitled_since = now
            elif not entitled and job.entitled_since is not None:
                self._close_entitlement(job, now)

    def _mark_placeable(self) -> None:
        """For the violations' breakdown, not the scheduler: mark the entitled waiting jobs of whole-node workers whose
        violation some placement could still avoid as things stand. A whole-node worker needs a node that holds no
        work that cannot be preempted, and so does every whole-node worker of guaranteed work (running in a
        department that does not borrow, and not of lower priority in the job's own department: nothing may evict it
        for this job, and a move needs such a node for it as well). The department's entitled jobs before it in its
        queue have the same claim: while they fit in the department's room together with it, they need their nodes
        first; the first that does not fit with it ends its entitlement by starting, so then it is enough that the
        jobs up to that one could be placed. Counted conservatively (the department's highest-priority waiting job
        decides what may be evicted). A violation whose job was never so placeable in its whole entitled period is
        counted as unplaceable (it stays a violation)."""
        entitled: dict[str, list[SimJob]] = defaultdict(list)
        unmarked = False
        for department, queue in self.pending.items():
            for job in queue.values():
                if job.entitled_since is not None and job.shape[1] == self.gpus_per_node:
                    entitled[department].append(job)
                    unmarked = unmarked or not job.placeable
        if not unmarked:
            return
        pinned: set[str] = set()
        held: dict[tuple[str, int], int] = defaultdict(int)  # (department, priority) -> guaranteed whole-node workers
        for run in self.running.values():
            if not run.preemptible:
                pinned.update(slot.node for slot in run.slots)
            elif self.usage[run.department] <= self.nominal.get(run.department, 0) + 1e-9:
                held[(run.department, run.priority)] += sum(
                    1 for slot in run.slots if len(slot.gpus) == self.gpus_per_node
                )
        usable = len(self.nodes) - len(pinned)
        for department, jobs in entitled.items():
            jobs.sort(key=lambda j: (-j.priority, j.submitted, j.job_id))
            top = jobs[0].priority
            free = usable - sum(n for (d, p), n in held.items() if d != department or p >= top)
            room = self.nominal.get(department, 0) - self.usage[department]
            sums = list(itertools.accumulate(j.gpus for j in jobs))  # GPUs of the first i + 1 jobs
            workers = list(itertools.accumulate(j.shape[0] for j in jobs))
            for k, job in enumerate(jobs):
                i = bisect.bisect_right(sums, room - job.gpus + 1e-9)  # the first that does not fit with it
                need = workers[i] if i < k else (workers[k - 1] if k else 0) + job.shape[0]
                if free >= need:
                    job.placeable = True

    def _cycle(self, now: float) -> bool:
        self._mark_placeable()
        heads = []
        for waiting in self.pending.values():
            first = heapq.nsmallest(
                HEADS_PER_DEPARTMENT, waiting.values(), key=lambda j: (-j.priority, j.submitted, j.job_id)
            )
            seen = {j.job_id for j in first}
            # and every job its department is guaranteed room for now, wherever it stands in the queue
            heads += first + [j for j in waiting.values() if j.entitled_since is not None and j.job_id not in seen]
        if not heads:
            return False
        if self.engine == "incremental":
            decisions = self._timed(self._incremental_cycle, heads, now)
        else:
            decisions = self._stateless_cycle(heads, now)
        return self._apply(decisions, heads, now)

    def _timed(self, call, *args):
        started, cpu = time.perf_counter(), time.process_time()
        try:
            return call(*args)
        finally:
            self.scheduler_seconds += time.perf_counter() - started
            self.scheduler_cpu_seconds += time.process_time() - cpu

    def _incremental_cycle(self, heads: list[SimJob], now: float):
        """Tell the standing scheduler which waiting jobs it is shown now (heads), then one cycle."""
        if self.scheduler is None:
            pool = PoolState(pool_id=1, name="itp", nodes=self.nodes, gpus_per_node=self.gpus_per_node, shareable=False)
            self.scheduler = IncrementalScheduler(
                Snapshot(
                    pools={1: pool}, pending=(), quotas=self.quotas, fifo=self.fifo, explain=False, service=self.service
                )
            )
        scheduler = self.scheduler
        shown = {job.job_id for job in heads}
        for job_id in self.shown - shown:
            if isinstance(scheduler.job(job_id), PendingJob):  # no longer among the heads (not: started)
                scheduler.remove_pending(job_id)
        nominated = []
        for job in heads:
            view = self._pending_view(job)
            if view.nominated:
                nominated.append(view)
            else:
                held = scheduler.job(job.job_id)
                if held is not view and held != view:  # the same view object most of the time: no comparing
                    scheduler.add_pending(view)
        if len(nominated) > 1:  # the cycle takes equal nominated jobs in the order listed: the heads' order
            for view in nominated:
                if scheduler.job(view.job_id) is not None:
                    scheduler.remove_pending(view.job_id)
        for view in nominated:
            if scheduler.job(view.job_id) != view:
                scheduler.add_pending(view)
        self.shown = shown
        return scheduler.cycle(now)

    def _snapshot(self, pending: tuple, running: tuple, *, explain: bool = False) -> Snapshot:
        """The one pool as it stands now, with these waiting and running views (bench.estimates varies them)."""
        used = {(slot.node, gpu): 1.0 for job in self.running.values() for slot in job.slots for gpu in slot.gpus}
        return Snapshot(
            pools={
                1: PoolState(
                    pool_id=1,
                    name="itp",
                    nodes=self.nodes,
                    gpus_per_node=self.gpus_per_node,
                    shareable=False,
                    used=used,
                )
            },
            pending=pending,
            running=running,
            quotas=self.quotas,
            fifo=self.fifo,
            explain=explain,
            service=self.service,
        )

    def _stateless_cycle(self, heads: list[SimJob], now: float):
        snapshot = self._snapshot(
            tuple(self._pending_view(j) for j in heads), tuple(j.running_view for j in self.running.values())
        )
        return self._timed(lambda: schedule(snapshot, now=now))

    def _apply(self, decisions, heads: list[SimJob], now: float) -> bool:
        by_id = {j.job_id: j for j in heads}
        self.nominated = {w.job_id for w in decisions.waiting if w.reason == "preemption_in_progress"}
        for waiting in decisions.waiting:
            self.last_reason[waiting.job_id] = waiting.reason
        for admission in decisions.admissions:
            job = by_id[admission.job_id]
            del self.pending[job.department][job.job_id]
            job.entitled_since and self._close_entitlement(job, now)
            job.slots, job.started = admission.slots, now
            job.running_view = RunningJob(
                job_id=job.job_id,
                pool_id=1,
                department=self.view(job),
                priority=job.priority,
                preemptible=job.preemptible,
                gpus=float(job.gpus),
                slots=job.slots,
                started_at=now,
                attained=job.attained,
                checkpoint_every=CHECKPOINT_SECONDS,
            )
            if self.scheduler is not None:  # it runs them already; this view also says its checkpoints
                self._timed(self.scheduler.update_running, job.running_view)
            job.first_start = now if job.first_start is None else job.first_start
            self.running[job.job_id] = job
            self.admissions += 1
            self._use(job.department, job.gpus, now)
            heapq.heappush(self.events, (now + job.remaining, 0, job.job_id, job.epoch))
        for preemption in decisions.preemptions:
            job = self.running.pop(preemption.job_id)
            if self.scheduler is not None:  # it stops at once
                self._timed(self.scheduler.remove_running, job.job_id)
            ran = now - job.started
            saved = math.floor(ran / CHECKPOINT_SECONDS) * CHECKPOINT_SECONDS
            job.remaining -= saved
            self.wasted += (ran - saved) * job.gpus
            self.wasted_by[preemption.reason] += (ran - saved) * job.gpus
            job.epoch += 1
            job.attained += ran * job.gpus
            job.pending_view = None
            self.preemptions += 1
            self.by_reason[preemption.reason] += 1
            self.pending[job.department][job.job_id] = job
            self._use(job.department, -job.gpus, now)
        if self.settle == "changes":
            return bool(decisions.preemptions or decisions.admissions)
        return bool(decisions.preemptions)

    def _pending_view(self, job: SimJob) -> PendingJob:
        if job.pending_view is None:
            job.pending_view = PendingJob(
                job_id=job.job_id,
                pool_id=1,
                department=self.view(job),
                priority=job.priority,
                submitted_at=job.submitted,
                workers=job.shape[0],
                gpus_per_worker=job.shape[1],
                preemptible=job.preemptible,
                attained=job.attained,
            )
        return replace(job.pending_view, nominated=True) if job.job_id in self.nominated else job.pending_view

    def _close_entitlement(self, job: SimJob, now: float) -> None:
        if now - job.entitled_since > ENTITLED_GRACE_SECONDS:
            self.violations += 1
            self.violated[f"{job.gpus} GPUs, {self.last_reason.get(job.job_id, 'not looked at')}"] += 1
            if job.shape[1] == self.gpus_per_node and not job.placeable:
                self.unplaceable += 1
        job.entitled_since = None
        job.placeable = False


def service_policy(text: str) -> ServicePolicy:
    if text == "off":
        return ServicePolicy(enabled=False)
    try:
        quantum, factor, min_run = (float(part) for part in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(
            "expected 'off' or three numbers: quantum seconds, factor, minimum run seconds"
        ) from None
    return ServicePolicy(quantum=quantum, factor=factor, min_run_seconds=min_run)


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--trace", choices=["itp"], required=True)
    parser.add_argument("--input", type=Path, nargs="+", required=True)
    parser.add_argument("--gpus", type=int, required=True)
    parser.add_argument("--gpus-per-node", type=int, default=8)
    parser.add_argument("--policy", choices=["portal", "fifo", "fifo-backfill", "hard-quota"], required=True)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--json", type=Path)
    parser.add_argument(
        "--engine",
        choices=["incremental", "stateless"],
        default="incremental",
        help="a standing incremental scheduler (default) or a fresh snapshot and schedule() every cycle",
    )
    parser.add_argument(
        "--service",
        type=service_policy,
        default=ServicePolicy(),
        metavar="off|QUANTUM_S,FACTOR,MIN_RUN_S",
        help="least-attained-service sharing for portal (default: the portal's own, 14400,2,1800)",
    )
    parser.add_argument(
        "--estimates",
        action="store_true",
        help="also measure estimated starts, today's (runtime limits) beside history's (bench/estimates.py)",
    )
    parser.add_argument(
        "--settle",
        choices=["preemptions", "changes"],
        default="preemptions",
        help="a moment cycles again after a cycle that preempted (default, the earlier meaning) or after any "
        "cycle that changed something, as the scheduler service does (it cycles at least every few seconds)",
    )
    args = parser.parse_args(argv)
    wall = time.perf_counter()
    jobs = load_itp(args.input, args.seed)
    nominal = nominal_quotas(jobs, args.gpus)
    if args.estimates:
        from bench.estimates import EstimatingReplay  # it builds on Replay

    replay = (EstimatingReplay if args.estimates else Replay)(
        jobs,
        gpus=args.gpus,
        gpus_per_node=args.gpus_per_node,
        policy=args.policy,
        nominal=nominal,
        service=args.service,
        engine=args.engine,
        settle=args.settle,
    )
    end = replay.run()
    done = [j for j in jobs if j.finished is not None]  # under hard quotas a gang above its nominal never runs
    queue = [j.first_start - j.submitted for j in done]
    jct = [j.finished - j.submitted for j in done]
    start = min(j.submitted for j in jobs)
    useful = sum(j.duration * j.gpus for j in done)
    report = {
        "jobs": len(jobs),
        "never_started": len(jobs) - len(done),
        "policy": args.policy,
        "gpus": args.gpus,
        "nominal": nominal,
        "seed": args.seed,
        "mean_queue_s": round(statistics.fmean(queue), 1),
        "p50_queue_s": round(percentile(queue, 0.5), 1),
        "p95_queue_s": round(percentile(queue, 0.95), 1),
        "p99_queue_s": round(percentile(queue, 0.99), 1),
        "mean_jct_s": round(statistics.fmean(jct), 1),
        "p95_jct_s": round(percentile(jct, 0.95), 1),
        "utilization": round(useful / (args.gpus * (end - start)), 4),
        "makespan_s": round(end - start, 1),
        "preemptions": replay.preemptions,
        "wasted_gpu_seconds": round(replay.wasted, 1),
        "guarantee_violations": replay.violations,
        "violations_by_size_and_reason": dict(sorted(replay.violated.items(), key=lambda kv: -kv[1])),
        "violations_unplaceable": replay.unplaceable,
        "preemptions_by_reason": dict(replay.by_reason),
        "wasted_gpu_seconds_by_reason": {reason: round(lost) for reason, lost in replay.wasted_by.items()},
        "service": "off"
        if not args.service.enabled
        else [args.service.quantum, args.service.factor, args.service.min_run_seconds],
        "engine": args.engine,
        "scheduler_core": "compiled" if compiled.active() else "python",
        "settle": args.settle,
        "admissions": replay.admissions,
        "admissions_per_second": round(replay.admissions / max(replay.scheduler_seconds, 1e-9), 1),
        "admissions_per_cpu_second": round(replay.admissions / max(replay.scheduler_cpu_seconds, 1e-9), 1),
        "scheduler_seconds": round(replay.scheduler_seconds, 2),
        "scheduler_cpu_seconds": round(replay.scheduler_cpu_seconds, 2),
        "rebuilds": dict(replay.scheduler.rebuilds) if replay.scheduler is not None else {},
        "wall_seconds": round(time.perf_counter() - wall, 1),
    }
    if args.estimates:
        from bench.estimates import estimate_report

        report["start_estimates"] = estimate_report(replay)
    return emit(
        report,
        json_path=args.json,
        summary=(
            f"mean queue {report['mean_queue_s'] / 3600:.2f} h, p95 {report['p95_queue_s'] / 3600:.2f} h, "
            f"{replay.violations} guarantee violations, wasted {100 * replay.wasted / useful:.2f}% of delivered GPU-hours "
            "(targets for portal: <= 0.80 h, <= 8.5 h, 0, <= 1%)"
        ),
    )


if __name__ == "__main__":
    main()
