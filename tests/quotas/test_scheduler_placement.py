"""Placement (quotas.scheduler.placement): the fit rules and what each pool policy does.

What no policy may ever do is tests/quotas/test_scheduler_placement_invariants.py.
"""

from __future__ import annotations

import pytest

from quotas.scheduler import PLACEMENTS, PoolState, QuotaState, RunningJob, Slot, Snapshot, schedule
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
)
from tests.quotas.placement_cases import busy, mix, nodes_of, one, pending, pool

# --- fit rules ---------------------------------------------------------------------------------

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
