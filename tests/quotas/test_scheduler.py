"""The pure scheduling cycle, rule by rule (table-style): quotas, borrowing, preemption, FIFO, estimates, fair share.

The guarantees of nominal quotas are tests/quotas/test_scheduler_guarantees.py, sharing by attained service
test_scheduler_service.py, the invariants that must always hold (hypothesis) test_scheduler_invariants.py.
"""

from quotas.scheduler import (
    STRICT_FIFO,
    QuotaState,
    RunningJob,
    Slot,
)
from tests.quotas.scheduling import NOW, admitted, cycle, pending, quota, reasons, running


def test_it_admits_within_nominal_in_priority_then_submit_order():
    d = cycle([pending(1, gpus=2), pending(2, gpus=2, priority=1000), pending(3, gpus=2)])
    assert admitted(d) == [2, 1, 3]  # vision borrows nlp's idle GPUs for the third


def test_it_lets_the_department_furthest_below_its_nominal_go_first():
    d = cycle([pending(1, "vision", gpus=4), pending(2, "vision", gpus=4), pending(3, "nlp", gpus=4)])
    assert admitted(d) == [1, 3]
    assert reasons(d) == {2: "quota_exhausted"}
    assert d.waiting[0].message == (
        "vision uses 4/4 local/sim GPUs; this job needs 4 more and only 0 idle "
        "GPUs can be borrowed (others use or keep: nlp 4)."
    )


def test_it_borrows_idle_gpus_up_to_the_borrowing_limit():
    d = cycle(
        [pending(1, gpus=4), pending(2, gpus=2), pending(3, gpus=2)],
        quotas=(quota("vision", 4, borrowing=2), quota("nlp", 4)),
    )
    assert admitted(d) == [1, 2]
    assert reasons(d) == {3: "borrowing_limit"}
    assert "its borrowing limit of 2 allows at most 6 in use" in d.waiting[0].message
    assert d.admissions[1].borrowed == 2


def test_a_lender_keeps_back_what_it_does_not_lend():
    d = cycle([pending(1, gpus=4), pending(2, gpus=3)], quotas=(quota("vision", 4), quota("nlp", 4, lending=1)))
    assert admitted(d) == [1]
    assert reasons(d) == {2: "quota_exhausted"}
    assert (
        cycle([pending(1, gpus=4), pending(2, gpus=1)], quotas=(quota("vision", 4), quota("nlp", 4, lending=1))).waiting
        == []
    )


def test_it_reclaims_borrowed_gpus_for_a_job_within_nominal():
    borrowers = [
        running(10, "nlp", [[0, 1, 2, 3]], started=NOW - 100),
        running(11, "nlp", [[4, 5]], started=NOW - 50),
        running(12, "nlp", [[6, 7]], started=NOW - 10),
    ]
    d = cycle([pending(1, "vision", gpus=2)], borrowers)
    assert admitted(d) == []
    assert [(p.job_id, p.reason, p.for_job) for p in d.preemptions] == [(12, "reclaim", 1)]  # the most recent one
    assert reasons(d) == {1: "preemption_in_progress"}
    assert "#12 (nlp, reclaim)" in d.waiting[0].message


def test_it_evicts_the_fewest_and_lowest_priority_borrowers():
    borrowers = [
        running(10, "nlp", [[0, 1, 2, 3]], priority=100, started=NOW - 100),
        running(11, "nlp", [[4, 5]], priority=100),
        running(12, "nlp", [[6, 7]], priority=500),
    ]
    d = cycle([pending(1, "vision", gpus=4)], borrowers)
    assert [p.job_id for p in d.preemptions] == [10]


def test_it_never_preempts_a_non_preemptible_or_too_young_workload():
    borrowers = [running(10, "nlp", [[0, 1, 2, 3, 4, 5, 6, 7]], preemptible=False)]
    d = cycle([pending(1, "vision", gpus=2)], borrowers)
    assert d.preemptions == [] and reasons(d) == {1: "no_capacity"}
    assert "(nlp borrows 4)" in d.waiting[0].message
    young = [running(10, "nlp", [[0, 1, 2, 3, 4, 5, 6, 7]], started=NOW - 30)]
    assert cycle([pending(1, "vision", gpus=2)], young, pool={"min_runtime": 60}).preemptions == []


def test_a_borrowing_job_does_not_reclaim():
    borrowers = [running(9, "vision", [[6, 7]], preemptible=False), running(10, "nlp", [[0, 1, 2, 3, 4, 5]])]
    d = cycle([pending(1, "vision", gpus=3)], borrowers)
    assert d.preemptions == [] and reasons(d) == {1: "quota_exhausted"}


def test_higher_priority_evicts_lower_priority_preemptible_work_of_its_own_department():
    own = [running(10, "vision", [[0, 1, 2, 3]], priority=100)]
    d = cycle(
        [pending(1, "vision", gpus=4, priority=1000)], own, quotas=(quota("vision", 4), quota("nlp", 4, lending=0))
    )
    assert [(p.job_id, p.reason) for p in d.preemptions] == [(10, "priority")]
    same = cycle(
        [pending(1, "vision", gpus=4, priority=100)], own, quotas=(quota("vision", 4), quota("nlp", 4, lending=0))
    )
    assert same.preemptions == []


def test_it_waits_for_stopping_jobs_instead_of_preempting_more():
    stopping = [
        RunningJob(
            job_id=10,
            pool_id=1,
            department="nlp",
            priority=100,
            preemptible=True,
            gpus=8,
            slots=(Slot(0, "n0", tuple(range(8))),),
            started_at=0,
            terminating=True,
        )
    ]
    d = cycle([pending(1, "vision", gpus=2)], stopping)
    assert d.preemptions == [] and reasons(d) == {1: "preemption_in_progress"}
    assert d.waiting[0].message.startswith("Waiting for #10 to stop (grace period)")


def test_strict_fifo_keeps_smaller_jobs_behind_a_blocked_head():
    busy = [running(10, "nlp", [[0, 1, 2, 3]], preemptible=False, deadline=NOW + 3600)]
    jobs = [pending(1, gpus=6), pending(2, gpus=1, runtime=60)]
    strict = cycle(jobs, busy, fifo={"vision": STRICT_FIFO}, quotas=(quota("vision", 8), quota("nlp", 0)))
    assert admitted(strict) == [] and reasons(strict) == {1: "no_capacity", 2: "lower_in_queue"}
    assert "(strict FIFO)" in strict.waiting[1].message


def test_best_effort_fifo_backfills_only_what_does_not_delay_the_head():
    busy = [running(10, "nlp", [[0, 1, 2, 3]], preemptible=False, deadline=NOW + 3600)]
    quotas = (quota("vision", 8), quota("nlp", 0))
    short = cycle([pending(1, gpus=6), pending(2, gpus=2, runtime=600)], busy, quotas=quotas)
    assert admitted(short) == [2]  # ends before the head can start anyway
    beside = cycle([pending(1, gpus=6), pending(2, gpus=2, runtime=7200)], busy, quotas=quotas)
    assert admitted(beside) == [2]  # runs on GPUs the head will not need when it starts
    # Both borrow (vision's nominal is 2; cv lends its idle 6): the long one would hold GPUs the head needs then.
    borrowing = (quota("vision", 2), quota("nlp", 0), quota("cv", 6))
    long = cycle([pending(1, gpus=6), pending(2, gpus=3, runtime=7200)], busy, quotas=borrowing)
    assert admitted(long) == [] and reasons(long)[2] == "lower_in_queue"
    assert "would delay that job" in long.waiting[1].message


def test_a_guaranteed_job_does_not_wait_behind_a_guaranteed_head_nothing_is_being_freed_for():
    # The head is within vision's nominal but cannot start for an hour (nlp's job cannot be preempted) and no room
    # is being made for it; #2 is within the nominal too. The quota's promise to #2 (start within minutes) wins
    # over backfilling's to the head, which a running #2 then no longer has (6 more would exceed the nominal).
    busy = [running(10, "nlp", [[0, 1, 2, 3]], preemptible=False, deadline=NOW + 3600)]
    d = cycle(
        [pending(1, gpus=6), pending(2, gpus=3, runtime=7200)], busy, quotas=(quota("vision", 8), quota("nlp", 0))
    )
    assert admitted(d) == [2] and reasons(d) == {1: "no_capacity"}


def test_it_estimates_when_waiting_jobs_start_from_runtime_limits():
    busy = [running(10, "nlp", [[0, 1, 2, 3, 4, 5, 6, 7]], preemptible=False, deadline=NOW + 600)]
    d = cycle(
        [pending(1, "vision", gpus=8, runtime=300), pending(2, "vision", gpus=8, runtime=300)],
        busy,
        quotas=(quota("vision", 0), quota("nlp", 0)),
    )
    assert [(w.job_id, w.position, w.estimated_start) for w in d.waiting] == [(1, 1, NOW + 600), (2, 2, NOW + 900)]
    unbounded = [running(10, "nlp", [[0, 1, 2, 3, 4, 5, 6, 7]], preemptible=False)]
    assert cycle([pending(1, gpus=8)], unbounded).waiting[0].estimated_start is None


def test_it_places_gangs_whole_and_fractions_on_one_gpu():
    d = cycle(
        [pending(1, gpus=2, workers=3), pending(2, gpus=0.5), pending(3, gpus=0.25)],
        quotas=(quota("vision", 8),),
        pool={"nodes": 2, "gpus": 4},
    )
    slots = {a.job_id: a.slots for a in d.admissions}
    taken = [(s.node, g) for s in slots[1] for g in s.gpus]
    assert len(taken) == len(set(taken)) == 6 and all(len(s.gpus) == 2 for s in slots[1])
    assert slots[2][0].gpus == slots[3][0].gpus and len(slots[2][0].gpus) == 1  # packed onto one shared GPU
    assert (slots[2][0].fraction, slots[3][0].fraction) == (0.5, 0.25)


def test_fair_share_can_weigh_recent_usage():
    quotas = (
        QuotaState(department="vision", pool_id=1, nominal=4, recent_usage=4.0),
        QuotaState(department="nlp", pool_id=1, nominal=4, recent_usage=0.0),
    )
    jobs = [pending(1, "vision", gpus=8), pending(2, "nlp", gpus=8)]
    assert admitted(cycle(jobs, quotas=quotas)) == [1]  # now-only: equal shares, the earlier job goes first
    assert admitted(cycle(jobs, quotas=quotas, pool={"usage_weight": 0.5})) == [2]  # vision used its share lately
