"""Placement (quotas.scheduler.placement): the fit rules, what each pool policy does, and what none may ever do."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from quotas.scheduler import PLACEMENTS, PendingJob, PoolState, QuotaState, RunningJob, Slot, Snapshot, schedule
from quotas.scheduler.placement import (
    FULL,
    Fragmentation,
    NodeSpec,
    Occupancy,
    PodMix,
    Shape,
    TypicalPods,
    make_policy,
    policy_for,
    units,
)


def pool(nodes=3, gpus=8, used=None, placement="binpack"):
    return PoolState(
        pool_id=1,
        name="local/sim",
        nodes=tuple(f"n{i}" for i in range(nodes)),
        gpus_per_node=gpus,
        shareable=True,
        used=used or {},
        placement=placement,
    )


def busy(node, gpus, share=1.0):
    return {(node, g): share for g in gpus}


def mix(*shapes):
    """A mix of (whole GPUs or share, count) worker shapes, as the cycle makes it."""
    counted = PodMix(coverage=1.0)
    for gpus, count in shapes:
        counted.add(Shape(0, int(gpus), FULL) if gpus >= 1 else Shape(0, 1, units(gpus)), count)
    return counted.typical()


def nodes_of(slots):
    return [slot.node for slot in slots]


# --- fit rules ---------------------------------------------------------------------------------


def one(gpus=2, cpu=16000, mem=65536, model="T4", free=None, max_pods=1001):
    occupancy = Occupancy.from_nodes(
        [NodeSpec("n", gpus, model, cpu, mem, max_pods)],
        used={("n", g): (FULL - f) / FULL for g, f in enumerate(free or ())},
    )
    return occupancy


FIT_CASES = [
    # (description, occupancy of one node, (GPUs, milli, cpu, mem, models), fits)
    ("no-GPU worker within cpu and memory", one(), (0, 0, 16000, 65536, ()), True),
    ("cpu over", one(), (0, 0, 16001, 1, ()), False),
    ("memory over", one(), (0, 0, 1, 65537, ()), False),
    ("pod slots used up", one(max_pods=0), (0, 0, 1, 1, ()), False),
    ("model listed", one(model="T4"), (1, 1000, 1, 1, {"V100", "T4"}), True),
    ("model not listed", one(model="T4"), (1, 1000, 1, 1, {"V100"}), False),
    ("models ignored without GPUs", one(model="T4"), (0, 0, 1, 1, {"V100"}), True),
    ("whole GPUs on one node", one(gpus=4), (4, 1000, 1, 1, ()), True),
    ("more whole GPUs than the node has", one(gpus=2), (4, 1000, 1, 1, ()), False),
    ("whole GPUs need completely free GPUs", one(free=[1000, 999]), (2, 1000, 1, 1, ()), False),
    ("a fraction fits one GPU", one(free=[300, 600]), (1, 600, 1, 1, ()), True),
    ("a fraction never spans two GPUs", one(free=[300, 500]), (1, 600, 1, 1, ()), False),
    ("no GPU on a node without GPUs", one(gpus=0), (1, 100, 1, 1, ()), False),
]


@pytest.mark.parametrize(("desc", "occupancy", "worker", "expected"), FIT_CASES, ids=[c[0] for c in FIT_CASES])
@pytest.mark.parametrize("policy", PLACEMENTS)
def test_the_fit_rules_are_the_same_for_every_policy(desc, occupancy, worker, expected, policy):
    gpus, milli, cpu, mem, models = worker
    assert occupancy.fits_node(0, gpus, milli, cpu, mem, models) is expected
    occupancy = occupancy.copy()
    occupancy.policy = make_policy(policy)
    share = milli / FULL if gpus == 1 else gpus
    assert occupancy.fits(1, share, cpu=cpu, mem=mem, models=models) is expected


def test_placing_and_releasing_moves_the_resources_and_leaves_nothing_behind():
    occupancy = one(free=[1000, 400])
    slots = occupancy.place(1, 0.3, cpu=4000, mem=1000)
    assert slots == [Slot(worker=0, node="n", gpus=(1,), fraction=0.3)]  # the fullest GPU with room
    assert (occupancy.cpu_free, occupancy.mem_free, occupancy.pods_free, occupancy.gpu_free) == (
        [12000],
        [64536],
        [1000],
        [[1000, 100]],
    )
    occupancy.release(slots, cpu=4000, mem=1000)
    assert (occupancy.cpu_free, occupancy.gpu_free, occupancy.free) == ([16000], [[1000, 400]], 1.4)


def test_a_pool_that_tracks_only_gpus_puts_workers_without_gpus_on_its_first_node():
    occupancy = Occupancy(pool(used=busy("n0", range(8))), make_policy("spread"))
    assert occupancy.place(2, 0) == [Slot(0, "n0"), Slot(1, "n0")]


def test_an_unknown_policy_is_refused():
    with pytest.raises(ValueError, match="binpack, spread, fragmentation"):
        schedule(Snapshot(pools={1: pool(placement="tetris")}, pending=(pending(1, 1),)), now=0)


# --- what each policy does -----------------------------------------------------------------------


def test_binpack_fills_a_partly_used_node_first():
    used = {**busy("n1", range(5)), **busy("n2", range(2)), ("n2", 2): 0.5}
    occupancy = Occupancy(pool(used=used))  # the default policy
    assert nodes_of(occupancy.place(1, 2)) == ["n1"]  # 3 free: the fullest that fits
    assert occupancy.place(1, 0.25)[0] == Slot(0, "n2", (2,), 0.25)  # onto the shared GPU
    assert nodes_of(occupancy.place(2, 4)) == ["n2", "n0"]  # only then a whole node


def test_spread_picks_the_emptiest_node():
    used = {**busy("n0", range(5)), **busy("n1", range(2)), ("n2", 0): 0.5}
    occupancy = Occupancy(pool(used=used, placement="spread"))
    assert nodes_of(occupancy.place(1, 2)) == ["n2"]  # 7 whole free GPUs
    assert nodes_of(occupancy.place(3, 1)) == ["n1", "n2", "n1"]  # each worker to the emptiest node then
    assert occupancy.place(1, 0.25)[0].gpus != (0,)  # a fraction gets a GPU of its own while there is one
    full = Occupancy(pool(nodes=1, gpus=2, used={("n0", 0): 0.25, ("n0", 1): 0.75}, placement="spread"))
    assert full.place(1, 0.25)[0].gpus == (0,)  # then the least used shared GPU


def test_fragmentation_keeps_whole_nodes_free_for_8_gpu_gangs():
    # n0 has 5 GPUs free, n1 4, n2 all 8; the pool runs and is asked for 1-, 4- and 8-GPU workers.
    used = {**busy("n0", range(3)), **busy("n1", range(4))}
    served = mix((1, 1), (3, 1), (4, 3), (8, 1))
    placements = {}
    for name in PLACEMENTS:
        occupancy = Occupancy(pool(used=used), Fragmentation(served) if name == "fragmentation" else make_policy(name))
        placements[name] = [nodes_of(occupancy.place(1, gpus) or []) for gpus in (1, 4, 4, 8)]
    # binpack puts the 1-GPU worker in the 4-GPU hole of n1; a 4-GPU worker then breaks n2
    assert placements["binpack"] == [["n1"], ["n0"], ["n2"], []]
    assert placements["spread"] == [["n2"], ["n2"], ["n0"], []]
    # fragmentation leaves n1's 4 GPUs for a 4-GPU worker and n2 whole: everything fits
    assert placements["fragmentation"] == [["n0"], ["n0"], ["n1"], ["n2"]]


def test_fragmentation_slices_a_shared_gpu_before_a_whole_one():
    occupancy = Occupancy(pool(nodes=3, gpus=2, used={("n1", 1): 0.5}), Fragmentation(mix((1, 5), (0.5, 5))))
    assert occupancy.place(1, 0.5)[0] == Slot(0, "n1", (1,), 0.5)


def test_fragmentation_steers_cpu_only_work_away_from_cpu_poor_gpu_nodes():
    served = PodMix(coverage=1.0)
    served.add(Shape(8000, 1, FULL), 5)
    served.add(Shape(8000, 0, 0), 2)
    nodes = [NodeSpec("small", 2, "T4", 16000, 65536, 1001), NodeSpec("big", 2, "T4", 104000, 65536, 1001)]
    occupancy = Occupancy.from_nodes(nodes, Fragmentation(served.typical()))
    assert occupancy.place(1, 0, cpu=8000, mem=1) == [Slot(0, "big")]


def test_the_cycle_places_with_each_pools_policy_and_fragmentation_learns_the_mix_from_the_queue():
    # the same jobs as above, now through the cycle: the mix comes from its running and pending workers
    running = [
        RunningJob(
            job_id=90,
            pool_id=1,
            department="vision",
            priority=500,
            preemptible=False,
            gpus=3,
            slots=(Slot(0, "n0", (0, 1, 2)),),
            started_at=0,
        ),
        RunningJob(
            job_id=91,
            pool_id=1,
            department="vision",
            priority=500,
            preemptible=False,
            gpus=4,
            slots=(Slot(0, "n1", (0, 1, 2, 3)),),
            started_at=0,
        ),
    ]
    used = {**busy("n0", range(3)), **busy("n1", range(4))}
    jobs = (pending(1, 1), pending(2, 4), pending(3, 4), pending(4, 8))
    admitted = {}
    for name in PLACEMENTS:
        snapshot = Snapshot(
            pools={1: pool(used=used, placement=name)},
            pending=jobs,
            running=tuple(running),
            quotas=(QuotaState(department="vision", pool_id=1, nominal=24),),
        )
        decisions = schedule(snapshot, now=100.0)
        admitted[name] = {a.job_id: nodes_of(a.slots) for a in decisions.admissions}
        if name != "fragmentation":
            assert [(w.job_id, w.reason) for w in decisions.waiting] == [(4, "gang_does_not_fit")]
    assert admitted["binpack"] == {1: ["n1"], 2: ["n0"], 3: ["n2"]}
    assert admitted["fragmentation"] == {1: ["n0"], 2: ["n0"], 3: ["n1"], 4: ["n2"]}
    assert PoolState(pool_id=1, name="p", nodes=("n0",), gpus_per_node=1, shareable=False).placement == "binpack"


def test_the_fragmentation_mix_is_the_pools_workers():
    snapshot_pool = pool(placement="fragmentation")
    policy = policy_for(
        snapshot_pool,
        [pending(1, 2, workers=3), pending(2, 0.5)],
        [
            RunningJob(
                job_id=9,
                pool_id=1,
                department="nlp",
                priority=1,
                preemptible=True,
                gpus=8,
                slots=(Slot(0, "n0", tuple(range(8))),),
                started_at=0,
            )
        ],
    )
    assert {(s.num_gpu, s.gpu_milli): f for s, f in policy.typical.items} == {
        (2, 1000): 0.6,
        (1, 500): 0.2,
        (8, 1000): 0.2,
    }
    assert policy_for(pool(placement="spread")).name == "spread"


def test_fragmentation_measures():
    typical = TypicalPods([(Shape(1000, 1, 470), 1.0)])
    assert typical.fgd("T4", 10000, [1000, 400]) == 400  # the 400 GPU is too small
    assert typical.fill("T4", 10000, [1000, 400]) == 1400 - 2 * 470  # two copies on the whole GPU only
    assert typical.fill("T4", 1000, [1000, 1000]) == 2000 - 470  # CPU for one copy only
    assert typical.fill("T4", float("inf"), [1000, 1000]) == 2000 - 4 * 470  # a node that does not track CPU
    assert TypicalPods([(Shape(1, 1, 100, frozenset({"A10"})), 1.0)]).fgd("T4", 10, [1000]) == 1000
    counted = PodMix(coverage=0.95)
    counted.add(Shape(1, 1, 1000), 19)
    counted.add(Shape(2, 0, 0))
    assert [shape.cpu for shape, _ in counted.typical().items] == [1]


# --- what no policy may do -----------------------------------------------------------------------


def pending(job_id, gpus, workers=1, dept="vision"):
    return PendingJob(
        job_id=job_id,
        pool_id=1,
        department=dept,
        priority=500,
        submitted_at=job_id,
        workers=workers,
        gpus_per_worker=gpus,
        preemptible=True,
    )


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
