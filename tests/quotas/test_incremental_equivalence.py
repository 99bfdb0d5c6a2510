"""The incremental scheduler decides what the stateless cycle decides, after any sequence of changes (hypothesis).

Random pools (node shapes, placement policies, shared GPUs), GPUs held by others (fragmentation), running gangs,
quotas with borrowing and lending limits, FIFO modes, service sharing, priorities; arrivals, cancellations,
endings, updates and quota and pool changes interleaved with cycles. Before every cycle the object's equivalent
snapshot goes through ``schedule()``; the decisions must be equal, messages and estimated starts included.
"""

from dataclasses import replace

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from quotas.scheduler import (
    BEST_EFFORT_FIFO,
    GREEDY,
    PLACEMENTS,
    STRICT_FIFO,
    PendingJob,
    PoolState,
    QuotaState,
    RunningJob,
    ServicePolicy,
    Snapshot,
    schedule,
)
from quotas.scheduler.incremental import IncrementalScheduler
from quotas.scheduler.placement import Occupancy

DEPARTMENTS = ("vision", "nlp", "audio")
SHARES = (0.25, 0.5)  # binary fractions: sums do not round (see the module's docstring)


@st.composite
def worlds(draw):
    pools = {}
    running = []
    job_id = 1000
    for pool_id in range(1, draw(st.integers(1, 2)) + 1):
        gpus_per_node = draw(st.sampled_from([2, 4, 8]))
        nodes = tuple(f"p{pool_id}n{i}" for i in range(draw(st.integers(1, 4))))
        shareable = draw(st.booleans())
        pool = PoolState(
            pool_id=pool_id,
            name=f"c/{pool_id}",
            nodes=nodes,
            gpus_per_node=gpus_per_node,
            shareable=shareable,
            min_runtime_seconds=draw(st.sampled_from([0, 600])),
            usage_weight=draw(st.sampled_from([0.0, 0.5])),
            placement=draw(st.sampled_from(PLACEMENTS)),
        )
        # GPUs held by work the scheduler does not manage (fragmentation the ledger does not see)
        used: dict[tuple[str, int], float] = {}
        for node in nodes:
            for gpu in range(gpus_per_node):
                if draw(st.integers(0, 9)) == 0:
                    used[(node, gpu)] = 1.0
        occupancy = Occupancy(replace(pool, used=used))
        for _ in range(draw(st.integers(0, 5))):
            workers = draw(st.integers(1, 2))
            share = draw(st.sampled_from((*SHARES, 1.0, 2.0, 4.0) if shareable else (1.0, 2.0, 4.0)))
            slots = occupancy.place(workers, share)
            if slots is None:
                continue
            for slot in slots:
                for gpu in slot.gpus:
                    used[(slot.node, gpu)] = used.get((slot.node, gpu), 0.0) + (slot.fraction or 1.0)
            job_id += 1
            running.append(
                RunningJob(
                    job_id=job_id,
                    pool_id=pool_id,
                    department=draw(st.sampled_from(DEPARTMENTS)),
                    priority=draw(st.sampled_from([100, 500, 1000])),
                    preemptible=draw(st.booleans()),
                    gpus=workers * share,
                    slots=tuple(slots),
                    started_at=draw(st.sampled_from([0.0, 5000.0, 9000.0])),
                    deadline=draw(st.sampled_from([None, 12_000.0, 30_000.0])),
                    terminating=draw(st.integers(0, 5)) == 0,
                    attained=draw(st.sampled_from([0.0, 50_000.0])),
                    checkpoint_every=draw(st.sampled_from([None, 900.0])),
                )
            )
        pools[pool_id] = replace(pool, used=used)
    quotas = tuple(
        QuotaState(
            department=department,
            pool_id=pool_id,
            nominal=draw(st.integers(0, 8)),
            borrowing_limit=draw(st.none() | st.integers(0, 4)),
            lending_limit=draw(st.none() | st.integers(0, 4)),
            recent_usage=draw(st.sampled_from([0.0, 2.0])),
        )
        for pool_id in pools
        for department in DEPARTMENTS
        if draw(st.integers(0, 5)) > 0  # now and then a department without quota in a pool
    )
    return Snapshot(
        pools=pools,
        pending=(),
        running=tuple(running),
        quotas=quotas,
        fifo={d: draw(st.sampled_from([STRICT_FIFO, BEST_EFFORT_FIFO, GREEDY])) for d in DEPARTMENTS},
        service=draw(
            st.sampled_from([ServicePolicy(), ServicePolicy(enabled=False), ServicePolicy(quantum=600, factor=2.0)])
        ),
        explain=draw(st.booleans()),
    )


def a_job(draw, job_id: int, pools: dict[int, PoolState], now: float) -> PendingJob:
    pool = pools[draw(st.sampled_from(sorted(pools)))]
    share = draw(st.sampled_from((*SHARES, 1.0, 2.0, 4.0, 8.0) if pool.shareable else (1.0, 2.0, 4.0, 8.0)))
    return PendingJob(
        job_id=job_id,
        pool_id=pool.pool_id,
        department=draw(st.sampled_from(DEPARTMENTS)),
        priority=draw(st.sampled_from([100, 500, 1000])),
        submitted_at=now - draw(st.sampled_from([0.0, 10.0, 100.0])),  # equal submit times: ties by job id
        workers=1 if share < 1 else draw(st.integers(1, 3)),
        gpus_per_worker=share,
        preemptible=draw(st.booleans()),
        max_runtime=draw(st.sampled_from([None, 600.0, 3600.0])),
        attained=draw(st.sampled_from([0.0, 0.0, 20_000.0])),
    )


def check_cycle(scheduler: IncrementalScheduler, now: float):
    expected = schedule(scheduler.snapshot(), now=now)
    decided = scheduler.cycle(now)
    assert decided == expected
    return decided


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(world=worlds(), data=st.data())
def test_incremental_decisions_equal_a_fresh_schedule_after_any_changes(world, data):
    draw = data.draw
    now = 10_000.0
    scheduler = IncrementalScheduler(world)
    next_id = 1
    for _ in range(draw(st.integers(1, 4))):  # an initial queue
        scheduler.add_pending(a_job(draw, next_id, world.pools, now))
        next_id += 1
    pools = dict(world.pools)
    for _ in range(draw(st.integers(1, 16))):
        snap = scheduler.snapshot()
        pending, running = list(snap.pending), list(snap.running)
        step = draw(
            st.sampled_from(
                [
                    "arrive",
                    "arrive",
                    "arrive",
                    "cancel",
                    "end",
                    "stopped",
                    "nominate",
                    "reprioritise",
                    "quota",
                    "pool",
                    "nodes",
                ]
            )
        )
        if step == "arrive":
            for _ in range(draw(st.integers(1, 3))):
                scheduler.add_pending(a_job(draw, next_id, pools, now))
                next_id += 1
        elif step == "cancel" and pending:
            scheduler.remove_pending(draw(st.sampled_from(pending)).job_id)
        elif step == "end" and running:
            scheduler.remove_running(draw(st.sampled_from(running)).job_id)
        elif step == "stopped":  # the preempted ones have stopped
            for run in running:
                if run.terminating:
                    scheduler.remove_running(run.job_id)
        elif step == "nominate" and pending:
            job = draw(st.sampled_from(pending))
            scheduler.update_pending(replace(job, nominated=not job.nominated))
        elif step == "reprioritise":
            if pending:
                job = draw(st.sampled_from(pending))
                scheduler.update_pending(replace(job, priority=draw(st.sampled_from([100, 500, 1000]))))
            if running:
                run = draw(st.sampled_from(running))
                scheduler.update_running(replace(run, priority=draw(st.sampled_from([100, 500, 1000]))))
        elif step == "quota" and snap.quotas:
            changed = draw(st.sampled_from(snap.quotas))
            scheduler.set_quotas(
                tuple(replace(q, nominal=draw(st.integers(0, 8))) if q == changed else q for q in scheduler.quotas)
            )
        elif step == "pool":
            pool = pools[draw(st.sampled_from(sorted(pools)))]
            pool = replace(pool, placement=draw(st.sampled_from(PLACEMENTS)), min_runtime_seconds=0)
            pools[pool.pool_id] = pool
            scheduler.set_pool(pool)
        elif step == "nodes":  # a node more: the pool's occupancy is rebuilt
            pool = pools[draw(st.sampled_from(sorted(pools)))]
            pool = replace(pool, nodes=(*pool.nodes, f"p{pool.pool_id}n{len(pool.nodes)}"))
            pools[pool.pool_id] = pool
            scheduler.set_pool(pool)
        if draw(st.booleans()):
            now += draw(st.sampled_from([0.0, 30.0, 700.0, 4000.0]))
            check_cycle(scheduler, now)
    check_cycle(scheduler, now + 1.0)
