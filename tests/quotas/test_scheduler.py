"""The pure scheduling cycle, rule by rule (table-style), and invariants that must always hold (hypothesis)."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from quotas.scheduler import (
    STRICT_FIFO,
    PendingJob,
    PoolState,
    QuotaState,
    RunningJob,
    ServicePolicy,
    Slot,
    Snapshot,
    schedule,
)

NOW = 10_000.0


def pool(nodes=1, gpus=8, shareable=True, running=(), min_runtime=0, usage_weight=0.0):
    used = {}
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
    )


def quota(dept, nominal, borrowing=None, lending=None):
    return QuotaState(department=dept, pool_id=1, nominal=nominal, borrowing_limit=borrowing, lending_limit=lending)


def pending(
    job_id, dept="vision", gpus=1.0, workers=1, priority=500, at=None, runtime=3600.0, preemptible=True, attained=0.0
):
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
    long = cycle([pending(1, gpus=6), pending(2, gpus=3, runtime=7200)], busy, quotas=quotas)
    assert admitted(long) == [] and reasons(long)[2] == "lower_in_queue"
    assert "would delay that job" in long.waiting[1].message


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


# --- invariants --------------------------------------------------------------------------------

jobs_strategy = st.lists(
    st.tuples(
        st.sampled_from(["vision", "nlp", "audio"]),
        st.sampled_from([0.25, 0.5, 1, 2, 4, 8]),
        st.integers(1, 3),
        st.sampled_from([100, 500, 1000]),
    ),
    max_size=25,
)
running_strategy = st.lists(
    st.tuples(
        st.sampled_from(["vision", "nlp", "audio"]), st.integers(1, 4), st.booleans(), st.sampled_from([100, 500, 1000])
    ),
    max_size=6,
)


@settings(max_examples=150, deadline=None)
@given(
    jobs=jobs_strategy,
    runs=running_strategy,
    nominals=st.tuples(st.integers(0, 8), st.integers(0, 8), st.integers(0, 8)),
    limits=st.tuples(st.none() | st.integers(0, 8), st.none() | st.integers(0, 8)),
)
def test_capacity_quota_limits_gangs_and_non_preemptibility_always_hold(jobs, runs, nominals, limits):
    # running jobs occupy whole GPUs from the left of a 2x8 pool
    live, next_gpu = [], 0
    for index, (dept, gpus, preemptible, priority) in enumerate(runs):
        if next_gpu + gpus > 16:
            break
        node, first = divmod(next_gpu, 8)
        if first + gpus > 8:
            continue
        live.append(
            running(
                100 + index,
                dept,
                [list(range(first, first + gpus))],
                node=f"n{node}",
                preemptible=preemptible,
                priority=priority,
            )
        )
        next_gpu += gpus
    quotas = (
        quota("vision", nominals[0], borrowing=limits[0]),
        quota("nlp", nominals[1], lending=limits[1]),
        quota("audio", nominals[2]),
    )
    waiting = [
        pending(i + 1, dept, gpus=g if g < 1 else g, workers=w if g >= 1 else 1, priority=p)
        for i, (dept, g, w, p) in enumerate(jobs)
    ]
    d = cycle(waiting, live, quotas=quotas, pool={"nodes": 2, "gpus": 8})
    by_id = {j.job_id: j for j in waiting}
    # gang atomicity: every admitted job has exactly one slot per worker; nobody both admitted and waiting
    for a in d.admissions:
        assert len(a.slots) == by_id[a.job_id].workers
    assert not set(admitted(d)) & set(reasons(d))
    assert len(d.admissions) + len(d.waiting) == len(waiting)
    # capacity: no GPU share above 1 after admissions (preempted jobs still hold theirs until they stop)
    used = dict(pool(nodes=2, gpus=8, running=live).used)
    for a in d.admissions:
        for slot in a.slots:
            for gpu in slot.gpus:
                used[(slot.node, gpu)] = used.get((slot.node, gpu), 0) + (slot.fraction or 1.0)
                assert used[(slot.node, gpu)] <= 1 + 1e-9
            assert slot.fraction is None or len(slot.gpus) == 1
    # never a non-preemptible victim, and victims only for jobs that waited
    preemptible = {r.job_id for r in live if r.preemptible}
    for p in d.preemptions:
        assert p.job_id in preemptible and p.for_job in reasons(d)
    # borrowing limit: vision never goes past nominal + limit through this cycle's admissions
    if limits[0] is not None:
        vision = sum(r.gpus for r in live if r.department == "vision")
        vision_new = sum(by_id[a.job_id].gpus for a in d.admissions if by_id[a.job_id].department == "vision")
        assert vision_new == 0 or vision + vision_new <= nominals[0] + limits[0] + 1e-9


@settings(max_examples=100, deadline=None)
@given(jobs=jobs_strategy)
def test_a_job_within_its_nominal_on_an_idle_pool_of_its_own_is_always_admitted(jobs):
    """Guarantee: with nobody else running, a department's jobs fit up to its nominal."""
    first = [pending(1, "vision", gpus=1, workers=1)]
    d = cycle(
        first + [pending(i + 2, "nlp", gpus=1) for i in range(len(jobs))], quotas=(quota("vision", 4), quota("nlp", 4))
    )
    assert 1 in admitted(d)


def test_a_job_that_cannot_be_preempted_runs_only_within_nominal():
    d = cycle(
        [
            pending(1, gpus=4, preemptible=False, priority=1000),
            pending(2, gpus=2, preemptible=False),
            pending(3, gpus=2, priority=1000),
        ]
    )
    assert admitted(d) == [1, 3]  # the preemptible one borrows nlp's idle GPUs
    assert reasons(d) == {2: "quota_exhausted"}
    assert "a job that cannot be preempted runs only within its department's nominal quota" in d.waiting[0].message


def test_a_job_within_nominal_does_not_wait_behind_a_head_that_must_borrow():
    own = [running(10, "vision", [[0, 1]], preemptible=False)]
    quotas = (quota("vision", 4), quota("nlp", 4, lending=0))
    jobs = [pending(1, gpus=4, priority=1000), pending(2, gpus=2)]
    d = cycle(jobs, own, quotas=quotas)
    assert admitted(d) == [2] and reasons(d) == {1: "quota_exhausted"}
    strict = cycle(jobs, own, quotas=quotas, fifo={"vision": STRICT_FIFO})
    assert admitted(strict) == [] and reasons(strict) == {1: "quota_exhausted", 2: "lower_in_queue"}


def test_nothing_takes_the_gpus_being_freed_for_a_job():
    borrowers = [running(10, "nlp", [[0, 1, 2, 3, 4, 5, 6, 7]], priority=100)]
    first = cycle([pending(1, "vision", gpus=2, priority=1000), pending(2, "vision", gpus=3)], borrowers)
    assert reasons(first) == {1: "preemption_in_progress", 2: "lower_in_queue"}  # #2 may not slip in
    # a job guaranteed even once the head runs does not wait behind it: it waits for the same evictions
    both = cycle([pending(1, "vision", gpus=2, priority=1000), pending(2, "vision", gpus=1)], borrowers)
    assert reasons(both) == {1: "preemption_in_progress", 2: "preemption_in_progress"} and admitted(both) == []
    # next cycle: the borrower stopped; the job evictions were started for goes first, before fair share
    nominated = PendingJob(
        job_id=1,
        pool_id=1,
        department="vision",
        priority=1000,
        submitted_at=5,
        workers=1,
        gpus_per_worker=2,
        preemptible=True,
        nominated=True,
    )
    second = cycle([pending(3, "nlp", gpus=8, priority=1000), nominated], quotas=(quota("vision", 4), quota("nlp", 4)))
    assert admitted(second)[0] == 1


HOUR = 3600.0
# Least attained service, on one 8-GPU node: vision (nominal 2) runs #9 within its nominal and #10 on borrowed
# GPUs; nlp (nominal 2) runs #11 on 4 GPUs and wants 2 more, beyond its nominal, for job #1 (default policy:
# quantum 4 GPU-hours, factor 2, minimum run 30 minutes).
SHARING = (quota("vision", 2), quota("nlp", 2), quota("ops", 4))


def sharing(served=100 * HOUR, started=NOW - HOUR, priority=500, waiting_attained=0.0, keep=True, **kw):
    runs = [
        running(10, "vision", [[2, 3]], started=started, priority=priority, attained=served),
        running(11, "nlp", [[4, 5, 6, 7]]),
    ]
    if keep:
        runs.append(running(9, "vision", [[0, 1]]))
    return cycle([pending(1, "nlp", gpus=2, attained=waiting_attained)], runs, quotas=SHARING, **kw)


@pytest.mark.parametrize(
    "case, expected",
    [
        ({}, [(10, "service")]),  # 102 GPU-hours against none: the borrowed GPUs go to the fresh job
        ({"served": 2 * HOUR}, []),  # 4 GPU-hours in all (2 before, 2 in this run): below factor x quantum
        ({"waiting_attained": 60 * HOUR}, []),  # not twice the waiting job's own service
        ({"started": NOW - 600}, []),  # ran 10 minutes this time: shorter than the minimum run
        ({"priority": 1000}, []),  # higher priority than the waiting job
        ({"keep": False}, []),  # vision would drop below its nominal
        ({"service": ServicePolicy(enabled=False)}, []),  # sharing turned off
    ],
)
def test_borrowed_gpus_go_to_the_less_served_job(case, expected):
    d = sharing(**case)
    assert [(p.job_id, p.reason) for p in d.preemptions] == expected
    if expected:
        assert reasons(d) == {1: "preemption_in_progress"}
        assert "it has had 102.0 GPU-hours of service and #1 0.0" in d.preemptions[0].message


def test_jobs_that_had_a_quantum_of_service_wait_behind_fresh_ones_of_the_same_priority():
    jobs = [
        pending(1, gpus=4, attained=5 * HOUR),
        pending(2, gpus=4),
        pending(3, gpus=4, priority=1000, attained=50 * HOUR),
    ]
    d = cycle(jobs, quotas=(quota("vision", 8),))
    assert admitted(d) == [3, 2] and reasons(d) == {1: "quota_exhausted"}
    off = cycle(jobs, quotas=(quota("vision", 8),), service=ServicePolicy(enabled=False))
    assert admitted(off) == [3, 1]


def scattered(preemptible=True):
    """nlp holds its nominal 8 as two 4-GPU jobs on two nodes; vision, idle, wants one whole 8-GPU node."""
    runs = [
        running(10, "nlp", [[0, 1, 2, 3]], node="n0", preemptible=preemptible, started=NOW - 100),
        running(11, "nlp", [[0, 1, 2, 3]], node="n1", preemptible=preemptible, started=NOW - 50),
    ]
    return runs, cycle(
        [pending(1, "vision", gpus=8)], runs, quotas=(quota("vision", 8), quota("nlp", 8)), pool={"nodes": 2}
    )


def test_a_guaranteed_job_blocked_by_fragmentation_moves_a_guaranteed_one():
    runs, d = scattered()
    assert [(p.job_id, p.reason) for p in d.preemptions] == [(10, "move")]
    assert reasons(d) == {1: "preemption_in_progress"}
    assert "starts again at once on other GPUs" in d.preemptions[0].message
    # next cycle: #10 has stopped; the job it made room for and #10 itself both start
    nominated = PendingJob(
        job_id=1,
        pool_id=1,
        department="vision",
        priority=500,
        submitted_at=1,
        workers=1,
        gpus_per_worker=8,
        preemptible=True,
        nominated=True,
    )
    after = cycle(
        [nominated, pending(10, "nlp", gpus=4)],
        runs[1:],
        quotas=(quota("vision", 8), quota("nlp", 8)),
        pool={"nodes": 2},
    )
    assert sorted(admitted(after)) == [1, 10]
    assert {a.job_id: {s.node for s in a.slots} for a in after.admissions} == {1: {"n0"}, 10: {"n1"}}


def test_nothing_moves_a_workload_that_cannot_be_preempted():
    _, d = scattered(preemptible=False)
    assert d.preemptions == [] and reasons(d) == {1: "gang_does_not_fit"}


def test_a_guaranteed_job_goes_before_a_borrower_that_gpus_were_also_freed_for():
    # both had evictions started for them; only one fits. Letting the borrower in first would make the
    # guaranteed job evict it again, and so on for ever.
    def nominated(job_id, dept, gpus):
        return PendingJob(
            job_id=job_id,
            pool_id=1,
            department=dept,
            priority=500,
            submitted_at=job_id,
            workers=1,
            gpus_per_worker=gpus,
            preemptible=True,
            nominated=True,
        )

    own = [running(10, "nlp", [[0, 1, 2, 3]])]
    d = cycle([nominated(1, "nlp", 4), nominated(2, "vision", 4)], own)
    assert admitted(d) == [2]


def test_fair_share_can_weigh_recent_usage():
    quotas = (
        QuotaState(department="vision", pool_id=1, nominal=4, recent_usage=4.0),
        QuotaState(department="nlp", pool_id=1, nominal=4, recent_usage=0.0),
    )
    jobs = [pending(1, "vision", gpus=8), pending(2, "nlp", gpus=8)]
    assert admitted(cycle(jobs, quotas=quotas)) == [1]  # now-only: equal shares, the earlier job goes first
    assert admitted(cycle(jobs, quotas=quotas, pool={"usage_weight": 0.5})) == [2]  # vision used its share lately


def test_work_that_cannot_be_preempted_fits_in_nominal_and_the_preemptible_rest_is_what_borrows():
    own = [running(10, "vision", [[0, 1, 2, 3]])]  # vision at its nominal with preemptible work
    d = cycle([pending(1, "vision", gpus=2, priority=1000, preemptible=False)], own)
    assert admitted(d) == [1] and d.preemptions == []  # no need to evict its own work: idle GPUs are there
    # nlp claims its nominal back: vision's preemptible work is reclaimed, the job that cannot be preempted stays
    both = own + [running(11, "vision", [[4, 5]], priority=1000, preemptible=False)]
    claim = cycle([pending(2, "nlp", gpus=4)], both)
    assert [(p.job_id, p.reason) for p in claim.preemptions] == [(10, "reclaim")]
    # a second job that cannot be preempted would take vision's work of that kind past its nominal
    more = cycle(
        [pending(3, "vision", gpus=4, priority=1000, preemptible=False)],
        both,
        quotas=(quota("vision", 4), quota("nlp", 8)),
        pool={"nodes": 2},
    )
    assert reasons(more) == {3: "quota_exhausted"}
    assert "runs 2/4 local/sim GPUs of work that cannot be preempted" in more.waiting[0].message


def test_nothing_starts_on_borrowed_gpus_while_gpus_are_reclaimed_for_a_guaranteed_job():
    borrower = [running(10, "nlp", [[0, 1, 2, 3, 4, 5]])]  # nlp borrows 2; GPUs 6 and 7 are free
    claimant = PendingJob(
        job_id=1,
        pool_id=1,
        department="vision",
        priority=500,
        submitted_at=1,
        workers=1,
        gpus_per_worker=4,
        preemptible=True,
        nominated=True,
    )
    d = cycle([claimant, pending(2, "nlp", gpus=1)], borrower)
    assert [(p.job_id, p.reason) for p in d.preemptions] == [(10, "reclaim")]
    assert admitted(d) == [] and reasons(d) == {1: "preemption_in_progress", 2: "quota_exhausted"}
    assert "GPUs are being reclaimed for job #1 (vision's nominal quota)" in d.waiting[-1].message
    # a guaranteed job of another department still starts
    own = cycle([claimant, pending(2, "nlp", gpus=1)], borrower, quotas=(quota("vision", 4), quota("nlp", 8)))
    assert admitted(own) == [2]


@settings(max_examples=150, deadline=None)
@given(
    runs=st.lists(
        st.tuples(st.sampled_from(["vision", "nlp", "audio"]), st.integers(1, 3), st.booleans()), max_size=12
    ),
    nominals=st.tuples(st.integers(1, 6), st.integers(0, 6), st.integers(0, 4)),
    want=st.integers(1, 4),
)
def test_a_guaranteed_job_is_admitted_or_evictions_start_for_it(runs, nominals, want):
    """Guarantee: with nominals that fit the pool, a job within its department's nominal (workers of one GPU)
    never just waits: it starts, or others' borrowed work is being evicted for it."""
    quotas = (quota("vision", nominals[0]), quota("nlp", nominals[1]), quota("audio", nominals[2]))
    nominal = {q.department: q.nominal for q in quotas}
    live, usage, fixed, next_gpu = [], {"vision": 0, "nlp": 0, "audio": 0}, {"vision": 0, "nlp": 0, "audio": 0}, 0
    for index, (dept, gpus, preemptible) in enumerate(runs):
        node, first = divmod(next_gpu, 8)
        if node > 1 or first + gpus > 8:
            continue
        if not preemptible and fixed[dept] + gpus > nominal[dept]:
            continue  # the scheduler never lets work that cannot be preempted past its nominal
        if dept == "vision" and usage["vision"] + gpus + want > nominal["vision"]:
            continue  # keep vision's room for the job
        live.append(
            running(100 + index, dept, [list(range(first, first + gpus))], node=f"n{node}", preemptible=preemptible)
        )
        usage[dept] += gpus
        fixed[dept] += 0 if preemptible else gpus
        next_gpu += gpus
    if usage["vision"] + want > nominal["vision"]:
        return
    d = cycle([pending(1, "vision", gpus=1, workers=want)], live, quotas=quotas, pool={"nodes": 2, "gpus": 8})
    assert admitted(d) == [1] or reasons(d) == {1: "preemption_in_progress"}, (reasons(d), d.waiting)
