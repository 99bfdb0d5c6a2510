"""Consolidation (quotas.scheduler.moves.find_consolidation): a job whose quota lets it start, in a pool with enough
GPUs free, that waits only because the free GPUs are scattered gets whole nodes by moving guaranteed work onto the
free GPUs elsewhere. Table tests, then a property over random busy pools (hypothesis).
"""

from dataclasses import replace

import pytest
from hypothesis import event, given, settings
from hypothesis import strategies as st

from quotas.scheduler.placement import Occupancy
from tests.quotas.scheduling import NOW, admitted, cycle, pending, pool, quota, reasons, running


def scattered_pool(audio_nominal=24, ages=(600, 600, 600)):
    """Three nodes; audio's 1-GPU jobs hold 4 GPUs of n0, 6 of n1 and 6 of n2, started ``ages`` seconds ago: 8 GPUs
    free, 4 + 2 + 2. vision (nominal 0) borrows."""
    runs = []
    for node, count, age in zip(("n0", "n1", "n2"), (4, 6, 6), ages, strict=True):
        base = {"n0": 10, "n1": 20, "n2": 30}[node]
        runs += [running(base + g, "audio", [[g]], node=node, started=NOW - age) for g in range(count)]
    return runs, (quota("vision", 0), quota("audio", audio_nominal))


def test_a_job_that_may_start_gathers_scattered_free_gpus_into_a_whole_node():
    runs, quotas = scattered_pool()
    d = cycle([pending(1, "vision", gpus=8)], runs, quotas=quotas, pool={"nodes": 3})
    assert reasons(d) == {1: "preemption_in_progress"}
    # n0 is cheapest to clear (4 GPUs move, into the 2 + 2 free on n1 and n2)
    assert sorted((p.job_id, p.reason) for p in d.preemptions) == [
        (10, "move"),
        (11, "move"),
        (12, "move"),
        (13, "move"),
    ]
    assert "starts again at once on free GPUs elsewhere" in d.preemptions[0].message
    assert "so that its workers get whole nodes" in d.waiting[0].message
    # next cycle: the moved jobs have stopped; the job and every moved one start, the job on the cleared node
    left = [r for r in runs if r.job_id not in {10, 11, 12, 13}]
    nominated = pending(1, "vision", gpus=8, nominated=True)
    moved = [pending(j, "audio", gpus=1, at=1) for j in (10, 11, 12, 13)]
    after = cycle([nominated, *moved], left, quotas=quotas, pool={"nodes": 3})
    assert sorted(admitted(after)) == [1, 10, 11, 12, 13]
    assert {s.node for a in after.admissions if a.job_id == 1 for s in a.slots} == {"n0"}


@pytest.mark.pure_core
def test_without_consolidation_the_job_waits_for_a_node_to_empty(monkeypatch):
    monkeypatch.setattr("quotas.scheduler.room.find_consolidation", lambda *args: None)
    runs, quotas = scattered_pool()
    d = cycle([pending(1, "vision", gpus=8)], runs, quotas=quotas, pool={"nodes": 3})
    assert d.preemptions == [] and reasons(d) == {1: "gang_does_not_fit"}


def test_work_its_department_borrows_is_not_moved():
    # audio's nominal is 8: its 16 GPUs borrow 8, so moving them would not restart them first; vision borrows too
    runs, quotas = scattered_pool(audio_nominal=8)
    d = cycle([pending(1, "vision", gpus=8)], runs, quotas=quotas, pool={"nodes": 3})
    assert d.preemptions == [] and reasons(d) == {1: "gang_does_not_fit"}


def test_nothing_moves_where_the_moved_work_would_not_fit_again_at_once():
    # 8 GPUs free, as 3 + 3 + 2: clearing any node moves a 5- or 6-GPU job, and no other node has that many free
    runs = [
        running(10, "audio", [[0, 1, 2, 3, 4]], node="n0", started=NOW - 600),
        running(11, "audio", [[0, 1, 2, 3, 4]], node="n1", started=NOW - 600),
        running(12, "audio", [[0, 1, 2, 3, 4, 5]], node="n2", started=NOW - 600),
    ]
    quotas = (quota("vision", 0), quota("audio", 32))
    d = cycle([pending(1, "vision", gpus=8)], runs, quotas=quotas, pool={"nodes": 3})
    assert d.preemptions == [] and reasons(d) == {1: "gang_does_not_fit"}
    # a fourth node with a 3-GPU job: moving it into n0's 3 free GPUs clears that node (the fewest GPUs to move)
    more = cycle(
        [pending(1, "vision", gpus=8)],
        [*runs, running(13, "audio", [[0, 1, 2]], node="n3", started=NOW - 600)],
        quotas=quotas,
        pool={"nodes": 4},
    )
    assert [(p.job_id, p.reason) for p in more.preemptions] == [(13, "move")]


def test_among_nodes_as_cheap_to_clear_the_one_with_least_unsaved_work_is_cleared():
    # n0 and n1 each hold 4 of audio's 1-GPU jobs (4 free on each, 8 on neither); n0's started 10 minutes ago, n1's
    # 25 minutes ago (their work since then is what a move loses: no checkpoints declared).
    runs = [running(10 + g, "audio", [[g]], node="n0", started=NOW - 600) for g in range(4)]
    runs += [running(20 + g, "audio", [[g]], node="n1", started=NOW - 1500) for g in range(4)]
    d = cycle([pending(1, "vision", gpus=8)], runs, quotas=(quota("vision", 0), quota("audio", 16)), pool={"nodes": 2})
    assert sorted(p.job_id for p in d.preemptions) == [10, 11, 12, 13]


def test_work_that_would_lose_more_than_half_an_hour_is_not_moved():
    # n0's four jobs ran 2 hours without a checkpoint: moving them would throw that away, for a convenience
    runs, quotas = scattered_pool(ages=(7200, 7200, 7200))
    d = cycle([pending(1, "vision", gpus=8)], runs, quotas=quotas, pool={"nodes": 3})
    assert d.preemptions == [] and reasons(d) == {1: "gang_does_not_fit"}
    # the same jobs, declaring a checkpoint every 30 minutes, lose 0 seconds now (2 h = 4 checkpoints): they move
    saved = [replace(r, checkpoint_every=1800.0) for r in runs]
    d = cycle([pending(1, "vision", gpus=8)], saved, quotas=quotas, pool={"nodes": 3})
    assert sorted(p.job_id for p in d.preemptions) == [10, 11, 12, 13]


# --- property ---------------------------------------------------------------------------------------------------------
NODES = 4
work = st.tuples(
    st.sampled_from([1, 1, 1, 2, 4]),  # GPUs
    st.booleans(),  # preemptible
    st.sampled_from(["audio", "audio", "nlp"]),  # audio is within its nominal, nlp borrows
)
# a node: the GPUs left free, and the work laid on the rest; a third of them hold audio's 1-GPU work only
node = st.one_of(
    st.tuples(st.integers(0, 3), st.lists(work, min_size=5, max_size=8)),
    st.tuples(st.integers(0, 3), st.lists(st.just((1, True, "audio")), min_size=5, max_size=8)),
    st.tuples(st.integers(0, 3), st.lists(work, min_size=5, max_size=8)),
)


def lay_out(nodes):
    """Each node's work on its lowest GPUs while it fits in all but the node's free GPUs: a busy pool whose free GPUs
    are scattered."""
    runs = []
    for i, (hole, draws) in enumerate(nodes):
        free = list(range(8 - hole))
        for gpus, preemptible, department in draws:
            if len(free) < gpus:
                continue
            taken, free = free[:gpus], free[gpus:]
            job_id = 10 + len(runs)
            runs.append(
                running(job_id, department, [taken], node=f"n{i}", preemptible=preemptible, started=NOW - job_id)
            )
    return runs


@settings(max_examples=300, deadline=None, derandomize=True)
@given(st.lists(node, min_size=NODES, max_size=NODES), st.sampled_from([(1, 8), (2, 8), (1, 4)]))
def test_consolidation_moves_only_guaranteed_work_that_fits_again_and_leaves_no_easy_node_uncleared(nodes, shape):
    workers, gpus = shape
    runs = lay_out(nodes)
    quotas = (quota("vision", 0), quota("audio", 8 * NODES), quota("nlp", 0))
    d = cycle([pending(1, "vision", gpus=gpus, workers=workers)], runs, quotas=quotas, pool={"nodes": NODES})
    occupancy = Occupancy(pool(nodes=NODES, running=runs))
    if d.admissions:
        event("placed at once")
        assert d.preemptions == [] and occupancy.fits(workers, float(gpus))
        return
    if occupancy.free + 1e-9 < workers * gpus:
        event("not enough free")
        assert d.preemptions == []
        return
    by_id = {r.job_id: r for r in runs}
    if d.preemptions:
        event("consolidated")
        victims = [by_id[p.job_id] for p in d.preemptions]
        assert all(p.reason == "move" and p.for_job == 1 for p in d.preemptions)
        assert all(v.preemptible and v.department == "audio" and len(v.slots) == 1 for v in victims)
        for victim in victims:
            occupancy.release(victim.slots)
        assert occupancy.place(workers, float(gpus)) is not None
        for victim in sorted(victims, key=lambda v: -v.gpus):
            assert occupancy.place(1, victim.gpus) is not None, "a moved workload fits nowhere"
        return
    event("waits")
    assert reasons(d) == {1: "gang_does_not_fit"}
    if workers != 1:
        return
    # Liveness where it is easy to see: a node whose every holder is audio's preemptible 1-GPU work, with at least as
    # many GPUs free elsewhere as that work, could be cleared for a one-worker job; the job does not wait then.
    for name in occupancy.nodes:
        holders = [r for r in runs if any(s.node == name for s in r.slots)]
        elsewhere = occupancy.free - len(occupancy.whole_free[name])
        easy = all(r.preemptible and r.department == "audio" and r.gpus == 1 for r in holders)
        assert not (easy and len(holders) <= elsewhere), f"{name} could be cleared for it"
