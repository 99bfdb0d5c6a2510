"""The pure scheduling cycle as it stands before the quota scheduler: FIFO per pool, gang, placement."""

from quotas.scheduler import PendingJob, PoolState, Snapshot, schedule


def pool(nodes=1, gpus=8, used=None, shareable=True):
    return PoolState(pool_id=1, name="local/sim", nodes=tuple(f"n{i}" for i in range(nodes)), gpus_per_node=gpus,
                     shareable=shareable, used=used or {})


def job(job_id, workers=1, gpus=1.0, at=None):
    return PendingJob(job_id=job_id, pool_id=1, department="vision", priority=500, submitted_at=at or job_id,
                      workers=workers, gpus_per_worker=gpus)


def test_it_admits_in_submit_order_while_gpus_are_free():
    decisions = schedule(Snapshot(pools={1: pool()}, pending=(job(2, gpus=4), job(1, gpus=4), job(3, gpus=1))), now=0)
    assert [a.job_id for a in decisions.admissions] == [1, 2]
    assert [(w.job_id, w.reason, w.position) for w in decisions.waiting] == [(3, "no_capacity", 1)]
    assert decisions.waiting[0].message == "Needs 1 GPUs (1 worker x 1 GPU); 0 of 8 local/sim GPUs are free."


def test_it_places_every_worker_on_distinct_gpus():
    decisions = schedule(Snapshot(pools={1: pool(nodes=2, gpus=4)}, pending=(job(1, workers=3, gpus=2),)), now=0)
    slots = decisions.admissions[0].slots
    taken = [(slot.node, gpu) for slot in slots for gpu in slot.gpus]
    assert len(taken) == len(set(taken)) == 6
    assert all(len(slot.gpus) == 2 for slot in slots)


def test_it_admits_a_gang_whole_or_not_at_all():
    busy = {("n0", g): 1.0 for g in range(3)} | {("n1", g): 1.0 for g in range(3)}
    decisions = schedule(Snapshot(pools={1: pool(nodes=2, gpus=4, used=busy)}, pending=(job(1, workers=1, gpus=2),)), now=0)
    assert decisions.admissions == []
    assert decisions.waiting[0].reason == "gang_does_not_fit"
    assert "2 of 8 local/sim GPUs are free" in decisions.waiting[0].message


def test_it_keeps_later_jobs_behind_a_blocked_head():
    decisions = schedule(Snapshot(pools={1: pool(gpus=2)}, pending=(job(1, gpus=2), job(2, gpus=2), job(3, gpus=1))), now=0)
    assert [a.job_id for a in decisions.admissions] == [1]
    assert [(w.job_id, w.reason, w.position) for w in decisions.waiting] == [(2, "no_capacity", 1), (3, "lower_in_queue", 2)]
    assert decisions.waiting[1].message == "Waiting behind job #2, first in the local/sim queue (FIFO)."


def test_it_packs_fractions_onto_one_shared_gpu_without_spanning_two():
    decisions = schedule(
        Snapshot(pools={1: pool(gpus=2, used={("n0", 0): 0.5})}, pending=(job(1, gpus=0.5), job(2, gpus=0.25), job(3, gpus=0.5))),
        now=0,
    )
    slots = {a.job_id: a.slots[0] for a in decisions.admissions}
    assert (slots[1].gpus, slots[1].fraction) == ((0,), 0.5)  # fills the half-used GPU
    assert slots[2].gpus == (1,) and slots[3].gpus == (1,)  # then shares the next one
    assert all(len(slot.gpus) == 1 for slot in slots.values())


def test_it_runs_cpu_only_jobs_without_gpus():
    decisions = schedule(Snapshot(pools={1: pool(gpus=1, used={("n0", 0): 1.0})}, pending=(job(1, workers=2, gpus=0),)), now=0)
    assert [slot.gpus for slot in decisions.admissions[0].slots] == [(), ()]
