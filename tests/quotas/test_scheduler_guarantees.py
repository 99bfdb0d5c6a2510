"""The scheduling cycle keeps what nominal quotas guarantee: work that cannot be preempted stays within nominal,
guaranteed jobs do not wait behind borrowers, GPUs freed for a job go to it, and fragmentation is cleared by moves.
"""

from dataclasses import replace

import pytest

from quotas.scheduler import (
    STRICT_FIFO,
)
from tests.quotas.scheduling import NOW, admitted, cycle, pending, quota, reasons, running


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
    nominated = pending(1, "vision", gpus=2, priority=1000, at=5, runtime=None, nominated=True)
    second = cycle([pending(3, "nlp", gpus=8, priority=1000), nominated], quotas=(quota("vision", 4), quota("nlp", 4)))
    assert admitted(second)[0] == 1


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
    nominated = pending(1, "vision", gpus=8, runtime=None, nominated=True)
    after = cycle(
        [nominated, pending(10, "nlp", gpus=4)],
        runs[1:],
        quotas=(quota("vision", 8), quota("nlp", 8)),
        pool={"nodes": 2},
    )
    assert sorted(admitted(after)) == [1, 10]
    assert {a.job_id: {s.node for s in a.slots} for a in after.admissions} == {1: {"n0"}, 10: {"n1"}}


def busy_pool():
    """nlp holds its nominal 16 of 24 GPUs as 4-GPU and 1-GPU jobs on every node; the 8 free GPUs are 3, 2 and 3."""
    runs = [
        running(10, "nlp", [[0, 1, 2, 3]], node="n0"),
        running(11, "nlp", [[4]], node="n0"),
        running(12, "nlp", [[0, 1, 2, 3]], node="n1"),
        running(13, "nlp", [[4]], node="n1"),
        running(14, "nlp", [[5]], node="n1"),
        running(15, "nlp", [[0, 1, 2, 3]], node="n2"),
        running(16, "nlp", [[4]], node="n2"),
    ]
    return cycle([pending(1, "vision", gpus=8)], runs, quotas=(quota("vision", 8), quota("nlp", 16)), pool={"nodes": 3})


def test_a_moved_job_that_fits_nowhere_has_smaller_work_moved_aside_for_it(monkeypatch):
    # Clearing any node for vision's 8 GPUs moves a 4-GPU job, and no node has 4 free: a 1-GPU job must move
    # aside first (ITP cluster 04 on 384 GPUs: 282 guarantee violations of exactly this shape).
    d = busy_pool()
    assert reasons(d) == {1: "preemption_in_progress"}
    moved = {p.job_id for p in d.preemptions}
    assert {p.reason for p in d.preemptions} == {"move"} and len(moved) == 3
    assert len(moved & {10, 12, 15}) == 1  # one 4-GPU job, and the two 1-GPU jobs that make way or leave its node
    monkeypatch.setattr("quotas.scheduler.moves.MOVE_DEPTH", 0)  # one level of moves only, as before
    assert reasons(busy_pool()) == {1: "gang_does_not_fit"}


def test_a_gang_that_must_clear_a_node_reclaims_borrowed_work_before_it_moves_guaranteed_work(monkeypatch):
    # vision (nominal 8) needs a whole node. n0: audio's guaranteed 4-GPU job and 4 free GPUs; n1: eight 1-GPU jobs of
    # nlp, which borrows all of them; n2: speech's work that cannot be preempted. The eviction search is cut short (as
    # when a borrower's jobs are many and small), so a node must be cleared. Clearing n0 evicts the fewest GPUs, but
    # audio's job is guaranteed: it would be moved and lose its work since its last checkpoint, while n1 is nothing
    # but what nlp borrows.
    monkeypatch.setattr("quotas.scheduler.preemption.SEARCH_LIMIT", 2)
    runs = [
        running(10, "audio", [[0, 1, 2, 3]], node="n0"),
        *(running(20 + g, "nlp", [[g]], node="n1", priority=100) for g in range(8)),
        running(30, "speech", [list(range(8))], node="n2", preemptible=False),
    ]
    quotas = (quota("vision", 8), quota("audio", 8), quota("speech", 8), quota("nlp", 0))
    d = cycle([pending(1, "vision", gpus=8)], runs, quotas=quotas, pool={"nodes": 3})
    assert reasons(d) == {1: "preemption_in_progress"}
    assert sorted((p.job_id, p.reason) for p in d.preemptions) == [(20 + g, "reclaim") for g in range(8)]


def test_a_gang_of_whole_nodes_may_reclaim_room_for_each_node_s_moved_work(monkeypatch):
    # Six nodes, each with five of audio's guaranteed 1-GPU jobs and three 1-GPU jobs nlp borrows. vision's 2 x 8-GPU
    # gang clears two nodes: it reclaims their six borrowed jobs and moves their ten guaranteed ones, and those fit
    # again only where ten more borrowed jobs are reclaimed: more than one node's worth (8) for a gang of two nodes.
    monkeypatch.setattr("quotas.scheduler.preemption.SEARCH_LIMIT", 2)  # the eviction search alone cannot do it
    runs = []
    for n in range(6):
        runs += [running(100 + 10 * n + g, "audio", [[g]], node=f"n{n}") for g in range(5)]
        runs += [running(200 + 10 * n + g, "nlp", [[g]], node=f"n{n}", priority=100) for g in range(5, 8)]
    quotas = (quota("vision", 16), quota("audio", 30), quota("nlp", 0))

    def plan():
        d = cycle([pending(1, "vision", gpus=8, workers=2)], runs, quotas=quotas, pool={"nodes": 6})
        return reasons(d)[1], sorted({p.reason for p in d.preemptions}), len(d.preemptions)

    assert plan() == ("preemption_in_progress", ["move", "reclaim"], 26)  # 6 + 10 reclaimed, 10 moved
    monkeypatch.setattr("quotas.scheduler.moves.EXTRA_RECLAIMS", 4)  # 8 for the gang: one node's worth, as before
    assert plan() == ("no_capacity", [], 0)


def test_nothing_moves_a_workload_that_cannot_be_preempted():
    _, d = scattered(preemptible=False)
    assert d.preemptions == [] and reasons(d) == {1: "gang_does_not_fit"}


def test_a_guaranteed_job_goes_before_a_borrower_that_gpus_were_also_freed_for():
    # both had evictions started for them; only one fits. Letting the borrower in first would make the
    # guaranteed job evict it again, and so on for ever.
    own = [running(10, "nlp", [[0, 1, 2, 3]])]
    nominated = [
        pending(1, "nlp", gpus=4, runtime=None, nominated=True),
        pending(2, "vision", gpus=4, runtime=None, nominated=True),
    ]
    d = cycle(nominated, own)
    assert admitted(d) == [2]


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
    claimant = pending(1, "vision", gpus=4, runtime=None, nominated=True)
    d = cycle([claimant, pending(2, "nlp", gpus=1)], borrower)
    assert [(p.job_id, p.reason) for p in d.preemptions] == [(10, "reclaim")]
    assert admitted(d) == [] and reasons(d) == {1: "preemption_in_progress", 2: "quota_exhausted"}
    assert "GPUs are being reclaimed for job #1 (vision's nominal quota)" in d.waiting[-1].message
    # a guaranteed job of another department still starts
    own = cycle([claimant, pending(2, "nlp", gpus=1)], borrower, quotas=(quota("vision", 4), quota("nlp", 8)))
    assert admitted(own) == [2]


@pytest.mark.pure_core
def test_work_that_cannot_be_preempted_goes_where_such_work_already_is(monkeypatch):
    # n0 holds a preemptible 4-GPU job, n1 one GPU of work that cannot be preempted. Binpack alone puts the next
    # job on n0, the fullest; one that cannot be preempted goes to n1, so that n0 stays clearable by moves.
    runs = [running(10, "nlp", [[0, 1, 2, 3]], node="n0"), running(11, "nlp", [[0]], node="n1", preemptible=False)]
    quotas = (quota("vision", 8), quota("nlp", 8))

    def node_of(job):
        d = cycle([job], runs, quotas=quotas, pool={"nodes": 2})
        return {s.node for a in d.admissions for s in a.slots}

    assert node_of(pending(1, "vision", gpus=2, preemptible=False)) == {"n1"}
    assert node_of(pending(1, "vision", gpus=2)) == {"n0"}  # preemptible work is placed as the policy says
    monkeypatch.setattr("quotas.scheduler.placement.occupancy.Occupancy._place_preferred", lambda *a: None)
    assert node_of(pending(1, "vision", gpus=2, preemptible=False)) == {"n0"}


def test_identical_jobs_whose_search_failed_do_not_spend_the_search_budget_of_the_jobs_behind_them():
    # Two nodes, each half held by work that cannot be preempted (audio's, within its nominal) and half by nlp's
    # borrowed work. vision's 8-GPU jobs are guaranteed, but evicting every borrower leaves 4 + 4 free GPUs on two
    # nodes: no eviction or move can start one. 70 of them wait; behind them, vision's 4-GPU job, which reclaiming
    # one borrower would start. The first 8-GPU job's failed search says the others' searches fail too: they must
    # not use up the cycle's searches (quotas.scheduler.state.EVICTION_SEARCHES_PER_CYCLE, 64) before it.
    held = [
        running(10, "audio", [[0, 1, 2, 3]], node="n0", preemptible=False),
        running(11, "audio", [[0, 1, 2, 3]], node="n1", preemptible=False),
        running(20, "nlp", [[4, 5, 6, 7]], node="n0", priority=100),
        running(21, "nlp", [[4, 5, 6, 7]], node="n1", priority=100),
    ]
    big = [pending(i, "vision", gpus=8, priority=500, preemptible=False) for i in range(1, 71)]
    small = pending(100, "vision", gpus=4, priority=100, preemptible=False)
    d = cycle(
        [*big, small],
        held,
        quotas=(quota("vision", 8), quota("audio", 8), quota("nlp", 0)),
        pool={"nodes": 2},
    )
    assert [(p.job_id, p.for_job) for p in d.preemptions] == [(20, 100)]
    assert reasons(d)[100] == "preemption_in_progress"
    assert {reasons(d)[job.job_id] for job in big} == {"no_capacity"}


def packed_pool(neighbours_preemptible=True, free_on_n1=4):
    """n0: one GPU of nlp's work that cannot be preempted and seven 1-GPU jobs of nlp (within its nominal) beside it;
    n1: vision's preemptible work on all but ``free_on_n1`` GPUs."""
    runs = [running(10, "nlp", [[0]], node="n0", preemptible=False)]
    runs += [
        running(11 + g, "nlp", [[g]], node="n0", preemptible=neighbours_preemptible, started=NOW - 600 * g)
        for g in range(1, 8)
    ]
    runs.append(running(30, "vision", [list(range(8 - free_on_n1))], node="n1"))
    return runs, (quota("vision", 8), quota("nlp", 8))


def test_work_that_cannot_be_preempted_moves_preemptible_work_off_a_node_such_work_holds_rather_than_pin_another():
    # Placed on n1's free GPUs, vision's 1-GPU job that cannot be preempted would block a second node for every
    # whole-node job until it ends. It moves the nlp job on n0 with the least unsaved work (the latest started)
    # to n1 instead, and starts on n0 once that one has stopped.
    runs, quotas = packed_pool()
    job = pending(1, "vision", gpus=1, preemptible=False, priority=1000)
    d = cycle([job], runs, quotas=quotas, pool={"nodes": 2})
    assert [(p.job_id, p.reason, p.for_job) for p in d.preemptions] == [(12, "move", 1)]
    assert admitted(d) == [] and reasons(d) == {1: "preemption_in_progress"}
    assert "beside other work that cannot be preempted" in d.waiting[0].message
    assert "#1 cannot be preempted and goes beside work of that kind" in d.preemptions[0].message
    moved_off = [r for r in runs if r.job_id != 12]
    again = cycle([replace(job, nominated=True)], moved_off, quotas=quotas, pool={"nodes": 2})
    assert [(a.job_id, {s.node for s in a.slots}) for a in again.admissions] == [(1, {"n0"})]


@pytest.mark.pure_core
def test_work_that_cannot_be_preempted_takes_another_node_at_once_where_nothing_can_move(monkeypatch):
    job = pending(1, "vision", gpus=1, preemptible=False, priority=1000)

    def placed(runs, quotas):
        d = cycle([job], runs, quotas=quotas, pool={"nodes": 2})
        return [p.job_id for p in d.preemptions], {s.node for a in d.admissions for s in a.slots}

    assert placed(*packed_pool(neighbours_preemptible=False)) == ([], {"n1"})  # its neighbours cannot move either
    # a moved 3-GPU job would fit nowhere: n1 has one free GPU, n0 two once the job has taken one
    big_neighbours = [
        running(10, "nlp", [[0]], node="n0", preemptible=False),
        running(11, "nlp", [[1, 2, 3]], node="n0"),
        running(12, "nlp", [[4, 5, 6, 7]], node="n0"),
        running(30, "vision", [list(range(7))], node="n1"),
    ]
    assert placed(big_neighbours, packed_pool()[1]) == ([], {"n1"})
    # where a moved 1-GPU job takes n1's last free GPU, the two change places
    assert placed(*packed_pool(free_on_n1=1)) == ([12], set())
    monkeypatch.setattr("quotas.scheduler.core.find_packing", lambda *args: None)
    assert placed(*packed_pool()) == ([], {"n1"})  # the protection switched off: a second node is pinned


def test_a_guaranteed_job_takes_free_gpus_before_a_borrower_that_goes_first_by_fair_share():
    # nlp uses none of its nominal (share 0) and would borrow for its gang; vision is at 6 of its 14 and needs 8 more.
    # Freed GPUs go to vision's job: had nlp's gang taken them, vision would wait (no capacity) until the next cycle
    # evicted that gang again (as Kueue, workloads that need no borrowing are admitted first).
    own = [running(10, "vision", [[0, 1, 2, 3, 4, 5]], preemptible=False)]
    quotas = (quota("vision", 14), quota("nlp", 2))
    d = cycle([pending(1, "nlp", gpus=8), pending(2, "vision", gpus=8)], own, quotas=quotas, pool={"nodes": 2})
    assert admitted(d) == [2]
    assert list(reasons(d)) == [1]  # it waits: what is free is vision's nominal


def test_a_guaranteed_job_behind_its_own_department_s_blocked_head_still_goes_before_other_borrowers():
    # vision's first job (2 x 8 GPUs) cannot be preempted and would need more than vision's nominal: it cannot
    # start. Its second (8 GPUs) is within nominal and takes a node before nlp's borrowing gang, which goes first
    # by fair share.
    own = [running(10, "vision", [[0, 1, 2, 3, 4, 5]], preemptible=False)]
    quotas = (quota("vision", 14), quota("nlp", 10))
    jobs = [
        pending(1, "vision", gpus=8, workers=2, priority=1000, preemptible=False),
        pending(2, "vision", gpus=8),
        pending(3, "nlp", gpus=8, workers=2),
    ]
    d = cycle(jobs, own, quotas=quotas, pool={"nodes": 3})
    assert admitted(d) == [2]
    assert reasons(d)[1] == "quota_exhausted" and 3 in reasons(d)
    # in strict FIFO, vision's queue order is kept: its second job waits behind the first
    strict = cycle(jobs, own, quotas=quotas, pool={"nodes": 3}, fifo={"vision": STRICT_FIFO})
    assert 2 not in admitted(strict) and reasons(strict)[2] == "lower_in_queue"


def test_a_department_s_own_queue_order_holds_when_its_first_job_borrows():
    # vision's first job borrows 2 GPUs and fits: it starts before vision's own guaranteed job, which then no longer
    # fits (and is no longer guaranteed).
    d = cycle([pending(1, "vision", gpus=6), pending(2, "vision", gpus=4)])
    assert admitted(d) == [1]
    assert list(reasons(d)) == [2]


def test_in_the_first_round_a_department_whose_next_job_borrows_goes_after_one_whose_next_job_does_not():
    # vision (share 0) has a guaranteed 1-GPU job behind an 8-GPU one that would borrow; nlp's 8-GPU job is within
    # its nominal. nlp's job gets the whole free node, though vision goes first by fair share.
    own = [running(10, "nlp", [[0, 1]])]
    quotas = (quota("vision", 4), quota("nlp", 12))
    jobs = [pending(1, "vision", gpus=8), pending(2, "vision", gpus=1), pending(3, "nlp", gpus=8)]
    d = cycle(jobs, own, quotas=quotas, pool={"nodes": 2})
    assert sorted(admitted(d)) == [2, 3]
    assert list(reasons(d)) == [1]
