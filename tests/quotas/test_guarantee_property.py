"""The promise a nominal quota makes (issue 18, item 3), as a property over random pools, quotas, gangs, priorities,
arrivals and endings (hypothesis), node-level fragmentation included.

A waiting job is *entitled* when its department's usage plus the job fits in the department's nominal quota (what
bench.replay counts as a guarantee violation after 5 minutes). Played as the replay plays a moment: preempted
workloads stop at once, and cycles run until one neither admits nor preempts. Then:

- the cycles settle (no admit-and-evict loop: a department's own job admitted into the room evicted for another,
  evicted again for it the next cycle, for ever; quotas.scheduler.room._book holds that room within the cycle);
- no entitled job is left waiting unless nothing can make room for it: it does not fit in the pool even with every
  workload that may be preempted gone, because work that cannot be preempted holds GPUs on every node it could use.

That exception is the one a quota cannot promise away: non-preemptible jobs of 1-4 GPUs that end at different
times can leave every node partly held, and an 8-GPU job entitled by the numbers then has no node until they end.
"""

from collections import defaultdict
from dataclasses import replace

from hypothesis import given, settings
from hypothesis import strategies as st

from quotas.scheduler import (
    BEST_EFFORT_FIFO,
    PendingJob,
    PoolState,
    QuotaState,
    RunningJob,
    Snapshot,
    schedule,
)
from quotas.scheduler.placement import place_gang

GPUS_PER_NODE = 8
SETTLE_CYCLES = 30  # far more than a settling moment needs (evictions, then admissions, then backfill)

arrival = st.tuples(
    st.integers(0, 5),  # department (modulo their number)
    st.sampled_from([1, 1, 2, 4, 8, 8, 16]),  # GPUs; above 8, whole 8-GPU nodes
    st.sampled_from([(1000, False), (500, True), (500, True), (100, True)]),  # priority, preemptible
)
step = st.tuples(st.lists(st.integers(0, 50), max_size=3), st.lists(arrival, min_size=1, max_size=10))


def shape(gpus: int) -> tuple[int, float]:
    return (1, float(gpus)) if gpus <= GPUS_PER_NODE else (gpus // GPUS_PER_NODE, float(GPUS_PER_NODE))


class Moment:
    """One pool, its quotas, and what runs and waits in it: the replay's loop, small."""

    def __init__(self, nodes: int, nominal: dict[str, int]):
        self.pool = PoolState(
            pool_id=1,
            name="p",
            nodes=tuple(f"n{i}" for i in range(nodes)),
            gpus_per_node=GPUS_PER_NODE,
            shareable=False,
        )
        self.nominal = nominal
        self.quotas = tuple(QuotaState(department=d, pool_id=1, nominal=n) for d, n in nominal.items())
        self.running: dict[int, RunningJob] = {}
        self.pending: dict[int, PendingJob] = {}
        self.next_id = 0

    def arrive(self, department: str, gpus: int, priority: int, preemptible: bool, now: float) -> None:
        self.next_id += 1
        workers, per_worker = shape(gpus)
        self.pending[self.next_id] = PendingJob(
            job_id=self.next_id,
            pool_id=1,
            department=department,
            priority=priority,
            submitted_at=now,
            workers=workers,
            gpus_per_worker=per_worker,
            # as the portal: work that cannot be preempted runs only within nominal, so none is bigger than it
            preemptible=preemptible or gpus > self.nominal[department],
        )

    def used(self, keep=lambda run: True) -> dict[tuple[str, int], float]:
        return {
            (slot.node, gpu): 1.0
            for run in self.running.values()
            if keep(run)
            for slot in run.slots
            for gpu in slot.gpus
        }

    def settle(self, now: float) -> bool:
        """Cycles at ``now`` until one changes nothing; False if they never stop changing."""
        for _ in range(SETTLE_CYCLES):
            snapshot = Snapshot(
                pools={1: replace(self.pool, used=self.used())},
                pending=tuple(self.pending.values()),
                running=tuple(self.running.values()),
                quotas=self.quotas,
                fifo=dict.fromkeys(self.nominal, BEST_EFFORT_FIFO),
            )
            decisions = schedule(snapshot, now=now)
            for admission in decisions.admissions:
                job = self.pending.pop(admission.job_id)
                self.running[job.job_id] = RunningJob(
                    job_id=job.job_id,
                    pool_id=1,
                    department=job.department,
                    priority=job.priority,
                    preemptible=job.preemptible,
                    gpus=job.gpus,
                    slots=admission.slots,
                    started_at=now,
                    checkpoint_every=1800,
                )
            for preemption in decisions.preemptions:  # they stop at once, and wait again
                run = self.running.pop(preemption.job_id)
                workers = len(run.slots)
                self.pending[run.job_id] = PendingJob(
                    job_id=run.job_id,
                    pool_id=1,
                    department=run.department,
                    priority=run.priority,
                    submitted_at=0.0,
                    workers=workers,
                    gpus_per_worker=run.gpus / workers,
                    preemptible=run.preemptible,
                )
            nominated = {w.job_id for w in decisions.waiting if w.reason == "preemption_in_progress"}
            for job_id, job in self.pending.items():
                self.pending[job_id] = replace(job, nominated=job_id in nominated)
            if not decisions.admissions and not decisions.preemptions:
                return True
        return False

    def entitled_but_waiting(self) -> list[PendingJob]:
        usage: dict[str, float] = defaultdict(float)
        for run in self.running.values():
            usage[run.department] += run.gpus
        return [
            job for job in self.pending.values() if usage[job.department] + job.gpus <= self.nominal[job.department]
        ]

    def could_fit(self, job: PendingJob) -> bool:
        """Would ``job`` fit if every workload that may be preempted were gone?"""
        fixed = self.used(keep=lambda run: not run.preemptible)
        return place_gang(self.pool, fixed, job.workers, job.gpus_per_worker) is not None


@settings(max_examples=300, deadline=None, derandomize=True)
@given(
    nodes=st.integers(2, 8),
    cuts=st.lists(st.floats(0.05, 0.95), min_size=1, max_size=4, unique=True),
    steps=st.lists(step, min_size=1, max_size=6),
)
def test_an_entitled_job_starts_unless_work_that_cannot_be_preempted_blocks_every_place(nodes, cuts, steps):
    total = nodes * GPUS_PER_NODE
    bounds = sorted({round(c * total) for c in cuts} - {0, total})
    nominals = [b - a for a, b in zip([0, *bounds], [*bounds, total])]
    moment = Moment(nodes, {f"d{i}": n for i, n in enumerate(nominals)})
    departments = list(moment.nominal)
    now = 0.0
    for endings, arrivals in steps:
        now += 3600.0
        for index in endings:  # some running workloads end
            if moment.running:
                moment.running.pop(sorted(moment.running)[index % len(moment.running)])
        for department, gpus, (priority, preemptible) in arrivals:
            moment.arrive(departments[department % len(departments)], gpus, priority, preemptible, now)
        assert moment.settle(now), "the cycles kept admitting and evicting at one moment"
        for job in moment.entitled_but_waiting():
            assert not moment.could_fit(job), (
                f"#{job.job_id} ({job.department}, {job.gpus:g} GPUs) is entitled and could run, but waits"
            )
