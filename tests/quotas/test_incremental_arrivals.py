"""Arrival cycles of the incremental scheduler (``IncrementalScheduler(arrivals_window=...)``): after a pool's cycle
that admitted and evicted nothing, while only new jobs are queued there, a cycle decides those jobs alone, on the
end state of that cycle (rooms it booked still held), instead of looking at every waiting job again.

What a user would notice: the new job starts (or is told why it waits) at once, and it is the decision a full cycle
makes; it never takes GPUs held for a job that is making room; anything other than a new job, or the window
passing, brings the full cycle back.
"""

from dataclasses import replace

from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from quotas.scheduler import Snapshot, schedule
from quotas.scheduler.incremental import IncrementalScheduler
from tests.quotas.scheduling import NOW, admitted, pending, pool, quota, reasons, running
from tests.quotas.test_incremental_equivalence import a_job, worlds

WINDOW = 5.0


def a_scheduler(pool_state, pending_jobs, running_jobs=(), quotas=()):
    return IncrementalScheduler(
        Snapshot(pools={1: pool_state}, pending=tuple(pending_jobs), running=tuple(running_jobs), quotas=tuple(quotas)),
        arrivals_window=WINDOW,
    )


def a_busy_pool():
    """One node of 8 GPUs, 6 of them held by nlp; a queue of vision jobs that cannot start (8 GPUs each)."""
    held = running(50, "nlp", [[0, 1, 2, 3, 4, 5]], preemptible=False)
    scheduler = a_scheduler(
        pool(nodes=1, running=[held]),
        [pending(i, "vision", gpus=8, preemptible=False) for i in range(1, 21)],
        [held],
        quotas=(quota("vision", 2), quota("nlp", 6)),
    )
    first = scheduler.cycle(NOW)
    assert admitted(first) == [] and first.preemptions == [] and len(first.waiting) == 20
    return scheduler


def test_an_arrival_after_a_quiet_cycle_is_decided_alone_and_starts_at_once():
    scheduler = a_busy_pool()
    scheduler.add_pending(pending(100, "vision", gpus=2, priority=100, at=NOW))
    expected = schedule(scheduler.snapshot(), now=NOW + 1)

    decided = scheduler.cycle(NOW + 1)

    assert scheduler.quick_cycles == 1
    assert admitted(decided) == admitted(expected) == [100]
    assert decided.admissions[0].slots == expected.admissions[0].slots
    # the others are still said to wait, as the last full cycle said
    assert reasons(decided) == reasons(expected) and len(decided.waiting) == 20


def test_an_arrival_behind_its_department_s_blocked_head_waits_behind_it():
    scheduler = a_busy_pool()
    scheduler.add_pending(pending(100, "vision", gpus=4, priority=100, at=NOW))
    decided = scheduler.cycle(NOW + 1)
    assert scheduler.quick_cycles == 1 and admitted(decided) == []
    (waiting,) = [w for w in decided.waiting if w.job_id == 100]
    assert waiting.reason == reasons(schedule(scheduler.snapshot(), now=NOW + 1))[100]
    assert waiting.position == 21  # it came last


def test_an_arrival_does_not_take_gpus_held_for_a_job_whose_room_is_being_made():
    # vision's job 1 had its own low-priority job 40 preempted for it; 40 is stopping. Once it is gone, job 1 runs on
    # GPUs 0-5: GPUs 4 and 5, free now, are held for it. nlp's new job of 4 GPUs (within nlp's nominal) must not
    # take them, or job 1 would find its room gone once 40 has stopped.
    stopping = replace(running(40, "vision", [[0, 1, 2, 3]], priority=100), terminating=True)
    scheduler = a_scheduler(
        pool(nodes=1, running=[stopping]),
        [pending(1, "vision", gpus=6, priority=1000, nominated=True, preemptible=False)],
        [stopping],
        quotas=(quota("vision", 6), quota("nlp", 4)),
    )
    first = scheduler.cycle(NOW)
    assert reasons(first) == {1: "preemption_in_progress"}
    scheduler.add_pending(pending(2, "nlp", gpus=4, at=NOW))
    expected = schedule(scheduler.snapshot(), now=NOW + 1)

    decided = scheduler.cycle(NOW + 1)

    assert scheduler.quick_cycles == 1
    assert admitted(decided) == admitted(expected) == []
    assert reasons(decided)[2] == reasons(expected)[2]


def test_anything_but_a_new_job_and_the_window_passing_bring_the_full_cycle_back():
    scheduler = a_busy_pool()
    scheduler.add_pending(pending(100, "vision", gpus=8, at=NOW))
    scheduler.cycle(NOW + 1)
    assert scheduler.quick_cycles == 1

    scheduler.remove_running(50)  # nlp's job ended: the waiting jobs may start now (borrowing)
    scheduler.add_pending(pending(101, "vision", gpus=1, priority=100, at=NOW))
    expected = schedule(scheduler.snapshot(), now=NOW + 2)
    decided = scheduler.cycle(NOW + 2)
    assert scheduler.quick_cycles == 1 and decided == expected  # the full cycle, exactly

    scheduler.cycle(NOW + 3)  # full (the last one admitted) and quiet
    scheduler.add_pending(pending(102, "vision", gpus=8, at=NOW))
    scheduler.cycle(NOW + 3 + WINDOW + 1)  # that cycle is too old now
    assert scheduler.quick_cycles == 1
    scheduler.add_pending(pending(103, "vision", gpus=8, at=NOW))
    scheduler.cycle(NOW + 3 + WINDOW + 2)  # within the window of the last one
    assert scheduler.quick_cycles == 2


def test_without_a_window_every_cycle_is_full():
    held = running(50, "nlp", [[0, 1, 2, 3, 4, 5]], preemptible=False)
    scheduler = IncrementalScheduler(
        Snapshot(
            pools={1: pool(nodes=1, running=[held])},
            pending=(pending(1, "vision", gpus=8),),
            running=(held,),
            quotas=(quota("vision", 2), quota("nlp", 6)),
        )
    )
    scheduler.cycle(NOW)
    scheduler.add_pending(pending(2, "vision", gpus=1, at=NOW))
    assert admitted(scheduler.cycle(NOW + 1)) == [2] and scheduler.quick_cycles == 0


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(world=worlds(), data=st.data())
def test_an_arrival_cycle_admits_and_evicts_what_a_full_cycle_does(world, data):
    """Random pools, quotas, FIFO modes, running and stopping work (tests/quotas/test_incremental_equivalence.py):
    cycles until one decides nothing, then 1 to 4 new jobs. The arrival cycle admits and evicts the jobs a fresh
    ``schedule()`` of the same state admits and evicts (their GPUs may differ where two placements are as good),
    and says of every waiting job why it waits."""
    draw = data.draw
    now = 10_000.0
    scheduler = IncrementalScheduler(world, arrivals_window=WINDOW)
    next_id = 1
    for _ in range(draw(st.integers(1, 6))):
        scheduler.add_pending(a_job(draw, next_id, world.pools, now))
        next_id += 1
    for _ in range(6):
        decided = scheduler.cycle(now)
        for preemption in decided.preemptions:  # stopped at once
            scheduler.remove_running(preemption.job_id)
        if not decided.admissions and not decided.preemptions:
            break
    else:
        return
    for _ in range(draw(st.integers(1, 4))):
        scheduler.add_pending(a_job(draw, next_id, world.pools, now))
        next_id += 1
    snapshot = scheduler.snapshot()
    expected = schedule(snapshot, now=now)
    quick = scheduler.quick_cycles

    decided = scheduler.cycle(now)

    event("arrival cycle" if scheduler.quick_cycles > quick else "full cycle")
    assert sorted(admitted(decided)) == sorted(admitted(expected))
    assert sorted((p.job_id, p.reason) for p in decided.preemptions) == sorted(
        (p.job_id, p.reason) for p in expected.preemptions
    )
    assert sorted(w.job_id for w in decided.waiting) == sorted(w.job_id for w in expected.waiting)
