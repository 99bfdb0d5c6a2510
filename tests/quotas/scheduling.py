"""Builders for the scheduling cycle's tests (tests/quotas/test_scheduler*.py): a one-pool snapshot of
8-GPU nodes, its quotas, pending and running jobs, one cycle run at NOW, and what it decided.
"""

from quotas.scheduler import BINPACK, PendingJob, PoolState, QuotaState, RunningJob, Slot, Snapshot, schedule

NOW = 10_000.0


def pool(nodes=1, gpus=8, shareable=True, running=(), min_runtime=0, usage_weight=0.0, used=None, placement=BINPACK):
    """Nodes n0, n1 ... of ``gpus`` GPUs each; in use: ``used`` ((node, GPU) -> share) and the GPUs of ``running``."""
    used = dict(used or {})
    for job in running:
        for slot in job.slots:
            for gpu in slot.gpus:
                used[(slot.node, gpu)] = used.get((slot.node, gpu), 0) + (slot.fraction or 1.0)
    return PoolState(
        pool_id=1,
        name="local/sim",
        nodes=tuple(f"n{i}" for i in range(nodes)),
        gpus_per_node=gpus,
        shareable=shareable,
        used=used,
        min_runtime_seconds=min_runtime,
        usage_weight=usage_weight,
        placement=placement,
    )


def quota(dept, nominal, borrowing=None, lending=None):
    return QuotaState(department=dept, pool_id=1, nominal=nominal, borrowing_limit=borrowing, lending_limit=lending)


def pending(
    job_id,
    dept="vision",
    gpus=1.0,
    workers=1,
    priority=500,
    at=None,
    runtime=3600.0,
    preemptible=True,
    attained=0.0,
    nominated=False,
):
    """A pending job (submitted at its id unless ``at``); nominated: evictions were started for it last cycle."""
    return PendingJob(
        job_id=job_id,
        pool_id=1,
        department=dept,
        priority=priority,
        submitted_at=at or job_id,
        workers=workers,
        gpus_per_worker=gpus,
        max_runtime=runtime,
        preemptible=preemptible,
        attained=attained,
        nominated=nominated,
    )


def running(
    job_id, dept, gpus_list, node="n0", priority=500, preemptible=True, started=NOW - 3600, deadline=None, attained=0.0
):
    slots = tuple(Slot(worker=i, node=node, gpus=tuple(g)) for i, g in enumerate(gpus_list))
    return RunningJob(
        job_id=job_id,
        pool_id=1,
        department=dept,
        priority=priority,
        preemptible=preemptible,
        gpus=float(sum(len(g) for g in gpus_list)),
        slots=slots,
        started_at=started,
        deadline=deadline,
        attained=attained,
    )


QUOTAS = (quota("vision", 4), quota("nlp", 4))


def cycle(pending_jobs, running_jobs=(), quotas=QUOTAS, **kw):
    snapshot = Snapshot(
        pools={1: pool(running=running_jobs, **kw.pop("pool", {}))},
        pending=tuple(pending_jobs),
        running=tuple(running_jobs),
        quotas=tuple(quotas),
        **kw,
    )
    return schedule(snapshot, now=NOW)


def admitted(decisions):
    return [a.job_id for a in decisions.admissions]


def reasons(decisions):
    return {w.job_id: w.reason for w in decisions.waiting}
