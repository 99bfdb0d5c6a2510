"""The incremental scheduler (quotas.scheduler.incremental) on the cases people care about: what it keeps between
cycles, what it applies itself, when it rebuilds, and the errors a caller gets."""

from dataclasses import replace

import pytest

from quotas.scheduler import Slot, Snapshot, schedule
from quotas.scheduler.incremental import IncrementalScheduler
from tests.quotas.scheduling import NOW, pending, pool, quota, running


def snapshot(pool_state, pending_jobs, running=(), quotas=()):
    return Snapshot(pools={1: pool_state}, pending=tuple(pending_jobs), running=tuple(running), quotas=tuple(quotas))


def fresh_equals(scheduler: IncrementalScheduler, now: float):
    expected = schedule(scheduler.snapshot(), now=now)
    decided = scheduler.cycle(now)
    assert decided == expected
    return decided


def test_an_admitted_job_runs_on_its_slots_and_its_end_frees_them_for_the_next():
    scheduler = IncrementalScheduler(snapshot(pool(nodes=1), [pending(1, gpus=8)], quotas=(quota("vision", 8),)))
    first = fresh_equals(scheduler, NOW)
    assert [a.job_id for a in first.admissions] == [1]
    (run,) = scheduler.snapshot().running
    assert run.slots == first.admissions[0].slots and run.started_at == NOW and run.deadline == NOW + 3600
    assert scheduler.snapshot().pools[1].used == {("n0", g): 1.0 for g in range(8)}

    scheduler.add_pending(pending(2, gpus=4))
    second = fresh_equals(scheduler, NOW + 60)
    assert second.admissions == [] and [w.reason for w in second.waiting] == ["quota_exhausted"]

    scheduler.remove_running(1)
    third = fresh_equals(scheduler, NOW + 120)
    assert [a.job_id for a in third.admissions] == [2]
    assert scheduler.rebuilds == {}


def test_a_freed_node_is_taken_in_pool_order_as_a_fresh_cycle_would():
    # n0 fills and empties again: binpack must still pick n0 first (a fresh occupancy lists nodes in pool order)
    scheduler = IncrementalScheduler(
        snapshot(pool(nodes=2, gpus=4), [pending(1, gpus=1)], quotas=(quota("vision", 8),))
    )
    assert fresh_equals(scheduler, NOW).admissions[0].slots[0].node == "n0"
    scheduler.remove_running(1)
    scheduler.add_pending(pending(2, gpus=1))
    assert fresh_equals(scheduler, NOW + 1).admissions[0].slots[0].node == "n0"


def test_a_preempted_workload_stops_and_the_job_it_was_preempted_for_starts_once_it_is_gone():
    borrower = running(50, "nlp", [[0, 1, 2, 3, 4, 5, 6, 7]], started=NOW - 7200)
    scheduler = IncrementalScheduler(
        snapshot(
            pool(nodes=1, running=[borrower]),
            [pending(1, "vision", gpus=4, preemptible=False)],
            running=[borrower],
            quotas=(quota("vision", 4), quota("nlp", 4)),
        )
    )
    decided = fresh_equals(scheduler, NOW)
    assert [(p.job_id, p.reason) for p in decided.preemptions] == [(50, "reclaim")]
    assert [r.terminating for r in scheduler.snapshot().running] == [True]
    scheduler.update_pending(replace(scheduler.snapshot().pending[0], nominated=True))
    assert [w.reason for w in fresh_equals(scheduler, NOW + 10).waiting] == ["preemption_in_progress"]
    scheduler.remove_running(50)  # it has stopped
    assert [a.job_id for a in fresh_equals(scheduler, NOW + 20).admissions] == [1]


def test_quota_and_priority_changes_take_effect_at_the_next_cycle():
    scheduler = IncrementalScheduler(
        snapshot(pool(nodes=1), [pending(1, gpus=4, preemptible=False)], quotas=(quota("vision", 2),))
    )
    assert [w.reason for w in fresh_equals(scheduler, NOW).waiting] == ["quota_exhausted"]
    scheduler.set_quotas((quota("vision", 4),))
    assert [a.job_id for a in fresh_equals(scheduler, NOW + 1).admissions] == [1]
    scheduler.add_pending(pending(2, gpus=4, priority=100, preemptible=False))
    scheduler.add_pending(pending(3, gpus=4, priority=100, preemptible=False))
    scheduler.update_pending(replace(scheduler.snapshot().pending[1], priority=1000))  # job 3 goes first now
    assert [w.job_id for w in fresh_equals(scheduler, NOW + 2).waiting] == [3, 2]


def test_a_pool_with_other_nodes_is_rebuilt_and_counted():
    scheduler = IncrementalScheduler(
        snapshot(pool(nodes=1), [pending(1, gpus=8, workers=2)], quotas=(quota("vision", 16),))
    )
    assert [w.reason for w in fresh_equals(scheduler, NOW).waiting] == ["no_capacity"]
    scheduler.set_pool(pool(nodes=2))
    assert scheduler.rebuilds == {"pool nodes changed": 1}
    assert [a.job_id for a in fresh_equals(scheduler, NOW + 1).admissions] == [1]


def test_a_workload_on_gpus_that_are_not_free_makes_the_pool_rebuild_rather_than_go_wrong():
    scheduler = IncrementalScheduler(snapshot(pool(nodes=1), [], quotas=(quota("vision", 8),)))
    scheduler.add_running(running(10, "vision", [[0, 1]]))
    scheduler.add_running(running(11, "nlp", [[1, 2]]))  # GPU 1 twice: a re-read saw something odd
    assert scheduler.rebuilds == {"running job's slots not free on the pool's nodes": 1}
    scheduler.add_pending(pending(1, gpus=4))
    fresh_equals(scheduler, NOW)


def test_changes_a_caller_cannot_make_are_refused_with_what_to_do():
    scheduler = IncrementalScheduler(snapshot(pool(nodes=1), [pending(1)], quotas=(quota("vision", 8),)))
    with pytest.raises(KeyError, match="pool 7 is not known to the scheduler; set_pool it first"):
        scheduler.add_pending(replace(pending(2), pool_id=7))
    scheduler.add_running(running(10, "vision", [[0]]))
    with pytest.raises(ValueError, match="already known; use update_running"):
        scheduler.add_running(running(10, "vision", [[1]]))
    with pytest.raises(ValueError, match="is running; remove_running it"):
        scheduler.add_pending(pending(10))
    scheduler.remove(12345)  # unknown: nothing happens


def test_a_running_job_moved_to_other_gpus_gives_back_the_old_ones():
    scheduler = IncrementalScheduler(snapshot(pool(nodes=1), [], quotas=(quota("vision", 8),)))
    scheduler.add_running(running(10, "vision", [[0, 1]]))
    scheduler.update_running(replace(running(10, "vision", [[0, 1]]), slots=(Slot(worker=0, node="n0", gpus=(6, 7)),)))
    assert set(scheduler.snapshot().pools[1].used) == {("n0", 6), ("n0", 7)}
