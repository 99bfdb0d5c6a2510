"""Placement (quotas.scheduler.placement): what no pool policy may ever do, on random pools and requests (hypothesis)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from quotas.scheduler import PLACEMENTS, QuotaState, RunningJob, Slot, Snapshot, schedule
from quotas.scheduler.placement import FULL, Fragmentation, NodeSpec, Occupancy, PodMix, Shape, make_policy, units
from tests.quotas.placement_cases import busy, pending, pool

SHARES = [0, 0.1, 0.25, 0.5, 0.75, 1, 2, 3, 4, 8]


@st.composite
def occupancies(draw):
    """A random pool: a portal pool (GPUs only, some in use) or nodes of any shape that track CPU and memory."""
    name = draw(st.sampled_from(PLACEMENTS))
    if name == "fragmentation":
        served = PodMix(coverage=1.0)
        for gpus, cpu, count in draw(
            st.lists(st.tuples(st.sampled_from(SHARES), st.integers(0, 8000), st.integers(1, 5)), max_size=4)
        ):
            served.add(Shape(cpu, int(gpus), FULL) if gpus >= 1 else Shape(cpu, 1 if gpus else 0, units(gpus)), count)
        policy = Fragmentation(served.typical())
    else:
        policy = make_policy(name)
    if draw(st.booleans()):
        nodes, gpus = draw(st.integers(1, 5)), draw(st.sampled_from([1, 2, 4, 8]))
        used = {
            (f"n{n}", g): share
            for n in range(nodes)
            for g in range(gpus)
            if (share := draw(st.sampled_from([0, 0, 0.25, 0.5, 1.0])))
        }
        return Occupancy(pool(nodes=nodes, gpus=gpus, used=used), policy)
    specs = [
        NodeSpec(f"n{i}", gpus, model, cpu, mem, pods)
        for i, (gpus, model, cpu, mem, pods) in enumerate(
            draw(
                st.lists(
                    st.tuples(
                        st.integers(0, 8),
                        st.sampled_from(["T4", "V100"]),
                        st.integers(0, 32000),
                        st.integers(0, 32000),
                        st.integers(0, 6),
                    ),
                    min_size=1,
                    max_size=5,
                )
            )
        )
    ]
    return Occupancy.from_nodes(specs, policy)


requests = st.tuples(
    st.integers(1, 4),
    st.sampled_from(SHARES),
    st.integers(0, 9000),
    st.integers(0, 9000),
    st.sampled_from([(), frozenset({"T4"})]),
)


def state_of(occupancy):
    return (
        [list(g) for g in occupancy.gpu_free],
        list(occupancy.cpu_free),
        list(occupancy.mem_free),
        list(occupancy.pods_free),
    )


def assert_consistent(occupancy):
    """The indexes agree with the state (what the policies read is what there is)."""
    total = 0
    for i, node in enumerate(occupancy.nodes):
        free = occupancy.gpu_free[i]
        assert all(0 <= f <= FULL for f in free) and len(free) == occupancy.gpu_count[i]
        assert occupancy.whole_free[node] == {g for g, f in enumerate(free) if f == FULL}
        assert node in occupancy.by_free[len(occupancy.whole_free[node])]
        assert all((node, g) in occupancy.shared[FULL - f] for g, f in enumerate(free) if 0 < f < FULL)
        assert min(occupancy.cpu_free[i], occupancy.mem_free[i], occupancy.pods_free[i]) >= 0
        if occupancy.by_state is not None:
            assert i in occupancy.by_state[occupancy.state(i)][0]
        total += sum(free)
    assert total == occupancy.free_units and occupancy.levels == sorted(occupancy.shared)


@settings(max_examples=300, deadline=None)
@given(occupancies(), st.lists(st.tuples(requests, st.integers(0, 3)), max_size=25))
def test_no_policy_ever_overcommits_a_node_or_splits_a_worker(occupancy, steps):
    capacity = {
        node: (occupancy.cpu_free[i], occupancy.mem_free[i], occupancy.pods_free[i])
        for i, node in enumerate(occupancy.nodes)
    }
    in_use = {
        (node, g): FULL - f for i, node in enumerate(occupancy.nodes) for g, f in enumerate(occupancy.gpu_free[i])
    }
    held = {node: [0, 0, 0] for node in occupancy.nodes}  # CPU, memory, workers placed here by this test
    gangs = []
    for (workers, gpus, cpu, mem, models), release in steps:
        if release and gangs:  # give a gang back now and then
            slots, cpu_of, mem_of = gangs.pop(release % len(gangs))
            occupancy.release(slots, cpu=cpu_of, mem=mem_of)
            for slot in slots:
                for g in slot.gpus:
                    in_use[(slot.node, g)] -= units(slot.fraction) if slot.fraction else FULL
                held[slot.node] = [held[slot.node][0] - cpu_of, held[slot.node][1] - mem_of, held[slot.node][2] - 1]
            assert_consistent(occupancy)
        before = state_of(occupancy)
        slots = occupancy.place(workers, gpus, cpu=cpu, mem=mem, models=models)
        assert_consistent(occupancy)
        if slots is None:
            assert state_of(occupancy) == before  # all or nothing
            if workers == 1:  # a lone worker is refused only when no node could take it
                milli = FULL if gpus >= 1 else units(gpus)
                assert not any(
                    occupancy.fits_node(i, int(gpus) if gpus >= 1 else int(gpus > 0), milli, cpu, mem, models)
                    for i in range(len(occupancy.nodes))
                )
            continue
        assert [slot.worker for slot in slots] == list(range(workers))  # one slot, so one node, per worker
        for slot in slots:
            if gpus >= 1:
                assert len(set(slot.gpus)) == len(slot.gpus) == int(gpus) and slot.fraction is None
            else:
                assert len(slot.gpus) == (1 if gpus else 0) and slot.fraction == (gpus or None)
            for g in slot.gpus:
                assert 0 <= g < occupancy.gpu_count[occupancy.index[slot.node]]
                in_use[(slot.node, g)] += units(slot.fraction) if slot.fraction else FULL
                assert in_use[(slot.node, g)] <= FULL
            if occupancy.limited:
                held[slot.node] = [held[slot.node][0] + cpu, held[slot.node][1] + mem, held[slot.node][2] + 1]
                assert all(h <= c for h, c in zip(held[slot.node], capacity[slot.node]))
                if gpus and models:
                    assert occupancy.model[occupancy.index[slot.node]] in models
        gangs.append((slots, cpu, mem))


@settings(max_examples=150, deadline=None)
@given(
    placement=st.sampled_from(PLACEMENTS),
    runs=st.lists(st.tuples(st.sampled_from(["vision", "nlp"]), st.integers(1, 4), st.booleans()), max_size=6),
    jobs=st.lists(
        st.tuples(st.sampled_from(["vision", "nlp"]), st.sampled_from([0.25, 0.5, 1, 2, 4, 8]), st.integers(1, 3)),
        max_size=20,
    ),
)
def test_every_policy_keeps_the_cycle_within_capacity_and_gangs_whole(placement, runs, jobs):
    live, used, next_gpu = [], {}, 0
    for index, (dept, gpus, preemptible) in enumerate(runs):
        node, first = divmod(next_gpu, 8)
        if node > 1 or first + gpus > 8:
            continue
        slot = Slot(0, f"n{node}", tuple(range(first, first + gpus)))
        live.append(
            RunningJob(
                job_id=100 + index,
                pool_id=1,
                department=dept,
                priority=100,
                preemptible=preemptible,
                gpus=float(gpus),
                slots=(slot,),
                started_at=0,
            )
        )
        used.update(busy(slot.node, slot.gpus))
        next_gpu += gpus
    waiting = [pending(i + 1, gpus, workers if gpus >= 1 else 1, dept) for i, (dept, gpus, workers) in enumerate(jobs)]
    snapshot = Snapshot(
        pools={1: pool(nodes=2, used=used, placement=placement)},
        pending=tuple(waiting),
        running=tuple(live),
        quotas=(QuotaState("vision", 1, 8), QuotaState("nlp", 1, 8)),
    )
    decisions = schedule(snapshot, now=10_000.0)
    by_id = {job.job_id: job for job in waiting}
    for admission in decisions.admissions:
        job = by_id[admission.job_id]
        assert [slot.worker for slot in admission.slots] == list(range(job.workers))
        for slot in admission.slots:
            assert len(slot.gpus) == (int(job.gpus_per_worker) if job.gpus_per_worker >= 1 else 1)
            for gpu in slot.gpus:
                used[(slot.node, gpu)] = used.get((slot.node, gpu), 0) + (slot.fraction or 1.0)
                assert used[(slot.node, gpu)] <= 1 + 1e-9
    assert len(decisions.admissions) + len(decisions.waiting) == len(waiting)
