"""The pure placement core (quotas.scheduler.packing): fit rules, the three policies, capacity invariants."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from quotas.scheduler.fragmentation import PodMix, Shape, TypicalPods
from quotas.scheduler.packing import Node, Placement, Pod, commit, eligible_gpus, fits, make_policy, release


def node(gpus=2, cpu=16000, mem=65536, model="T4", free=None, max_pods=1001):
    n = Node("n", cpu, mem, gpus, model, max_pods=max_pods)
    if free is not None:
        n.gpu_free = list(free)
    return n


FIT_CASES = [
    # (description, node, pod, fits)
    ("cpu-only pod within cpu and memory", node(), Pod(16000, 65536), True),
    ("cpu over", node(), Pod(16001, 1), False),
    ("memory over", node(), Pod(1, 65537), False),
    ("pod count reached", node(max_pods=0), Pod(1, 1), False),
    ("model listed", node(model="T4"), Pod(1, 1, 1, 1000, frozenset({"V100", "T4"})), True),
    ("model not listed", node(model="T4"), Pod(1, 1, 1, 1000, frozenset({"V100"})), False),
    ("spec ignored for cpu-only pods", node(model="T4"), Pod(1, 1, 0, 0, frozenset({"V100"})), True),
    ("whole GPUs on one node", node(gpus=4), Pod(1, 1, 4, 1000), True),
    ("more whole GPUs than the node has", node(gpus=2), Pod(1, 1, 4, 1000), False),
    ("whole GPUs need completely free GPUs", node(free=[1000, 999]), Pod(1, 1, 2, 1000), False),
    ("fraction fits one GPU", node(free=[300, 600]), Pod(1, 1, 1, 600), True),
    ("fraction never spans two GPUs", node(free=[300, 500]), Pod(1, 1, 1, 600), False),
    ("no GPU on a cpu node", node(gpus=0), Pod(1, 1, 1, 100), False),
]


@pytest.mark.parametrize(("desc", "n", "pod", "expected"), FIT_CASES, ids=[c[0] for c in FIT_CASES])
def test_fit_rules(desc, n, pod, expected):
    assert fits(n, pod) is expected


def test_commit_and_release_move_the_resources_and_refuse_what_does_not_fit():
    nodes = [node(free=[1000, 400])]
    pod = Pod(4000, 1000, 1, 300)
    commit(nodes, pod, Placement(0, (1,), 300))
    assert (nodes[0].cpu_free, nodes[0].mem_free, nodes[0].pods_free, nodes[0].gpu_free) == (12000, 64536, 1000, [1000, 100])
    with pytest.raises(ValueError):
        commit(nodes, pod, Placement(0, (1,), 300))  # 100 left on GPU 1
    with pytest.raises(ValueError):
        commit(nodes, Pod(1, 1, 2, 1000), Placement(0, (0,), 1000))  # one GPU for a two-GPU pod
    release(nodes, pod, Placement(0, (1,), 300))
    assert nodes[0].gpu_free == [1000, 400] and nodes[0].cpu_free == 16000


BESTFIT_CASES = [
    # (description, node states, pod, expected node, expected GPUs)
    ("fullest node wins", [dict(free=[1000, 1000]), dict(free=[1000, 0])], Pod(1000, 1, 1, 1000), 1, (0,)),
    ("cpu counts too", [dict(free=[1000, 1000], cpu=16000), dict(free=[1000, 1000], cpu=8000)], Pod(1000, 1), 1, ()),
    ("tightest GPU for a fraction", [dict(free=[1000, 700, 500, 500])], Pod(1, 1, 1, 450), 0, (2,)),
    ("lowest free GPUs for whole pods", [dict(free=[200, 1000, 1000, 1000])], Pod(1, 1, 2, 1000), 0, (1, 2)),
    ("equal scores: lowest rank", [dict(free=[1000, 1000]), dict(free=[1000, 1000])], Pod(1, 1, 1, 1000), 0, (0,)),
]


@pytest.mark.parametrize(("desc", "states", "pod", "expected_node", "expected_gpus"), BESTFIT_CASES,
                         ids=[c[0] for c in BESTFIT_CASES])
def test_bestfit(desc, states, pod, expected_node, expected_gpus):
    nodes = [node(gpus=len(s["free"]), **s) for s in states]
    placement = make_policy("bestfit", nodes).choose(nodes, pod)
    assert (placement.node, placement.gpus) == (expected_node, expected_gpus)


def test_bestfit_score_is_the_truncated_weighted_leftover():
    # max spec: 32000 CPU, 2 GPUs. Node 0 leaves (16000 cpu, 1000 gpu) -> 100*(1-(0.25+0.25)) = 50;
    # node 1 leaves (31999 cpu, 0 gpu) -> int(100*(1-0.49998)) = 50: a tie, so rank decides.
    nodes = [node(cpu=16000, free=[1000, 1000]), node(cpu=32000, free=[1000, 0])]
    nodes[1].cpu_free = 31999
    pod = Pod(0, 1, 1, 1000)
    assert make_policy("bestfit", nodes, ranks=[1, 0]).choose(nodes, pod).node == 1
    assert make_policy("bestfit", nodes, ranks=[0, 1]).choose(nodes, pod).node == 0
    nodes[1].cpu_free = 31000  # leaves 0.484 -> 51: now node 1 wins whatever the ranks
    assert make_policy("bestfit", nodes, ranks=[0, 1]).choose(nodes, pod).node == 1


def test_random_only_picks_feasible_nodes_and_eligible_gpus():
    nodes = [node(free=[100, 100]), node(free=[100, 900], model="V100"), node(free=[800, 50]), node(cpu=10)]
    pod = Pod(100, 1, 1, 500, frozenset({"T4"}))
    policy = make_policy("random", nodes, seed=7)
    picks = {policy.choose(nodes, pod) for _ in range(200)}
    assert picks == {Placement(2, (0,), 500)}
    assert make_policy("random", nodes, seed=1).choose(nodes, Pod(100, 1, 1, 950)) is None


def _portal(nodes, pods_seen):
    policy = make_policy("portal", nodes, mix=PodMix.from_pods(pods_seen, coverage=1.0), learn=False)
    return policy


def test_portal_packs_fractional_pods_on_a_shared_gpu_and_keeps_whole_gpus_free():
    mix = [Pod(1000, 1, 1, 1000)] * 5 + [Pod(1000, 1, 1, 500)] * 5
    nodes = [node(gpus=2, free=[1000, 1000]), node(gpus=2, free=[1000, 500]), node(gpus=2, free=[1000, 1000])]
    placement = _portal(nodes, mix).choose(nodes, Pod(1000, 1, 1, 500))
    assert placement == Placement(1, (1,), 500)


def test_portal_keeps_whole_nodes_free_for_multi_gpu_pods():
    mix = [Pod(1000, 1, 4, 1000)] * 5 + [Pod(1000, 1, 1, 1000)] * 5
    nodes = [node(gpus=4, free=[1000] * 4), node(gpus=4, free=[0, 1000, 1000, 1000]), node(gpus=4, free=[1000] * 4)]
    placement = _portal(nodes, mix).choose(nodes, Pod(1000, 1, 1, 1000))
    assert placement.node == 1


def test_portal_steers_cpu_only_pods_away_from_cpu_poor_gpu_nodes():
    mix = [Pod(8000, 1, 1, 1000)] * 5 + [Pod(8000, 1)] * 2
    nodes = [node(gpus=2, cpu=16000), node(gpus=2, cpu=104000)]
    placement = _portal(nodes, mix).choose(nodes, Pod(8000, 1))
    assert placement == Placement(1, (), 0)


def test_fragmentation_measures():
    typical = TypicalPods([(Shape(1000, 1, 470), 1.0)])
    assert typical.fgd("T4", 10000, [1000, 400]) == 400  # the 400 GPU is too small
    assert typical.fill("T4", 10000, [1000, 400]) == 1400 - 2 * 470  # two copies on the whole GPU only
    assert typical.fill("T4", 1000, [1000, 1000]) == 2000 - 470  # CPU for one copy only
    assert TypicalPods([(Shape(1, 1, 100, frozenset({"A10"})), 1.0)]).fgd("T4", 10, [1000]) == 1000
    mix = PodMix.from_pods([Pod(1, 1, 1, 1000)] * 19 + [Pod(2, 1)], coverage=0.95)
    assert [shape.cpu for shape, _ in mix.typical().items] == [1]


pods_strategy = st.builds(
    lambda cpu, mem, kind, milli, n: Pod(cpu, mem, *(0, 0) if kind == 0 else (1, milli) if kind == 1 else (n, 1000)),
    st.integers(0, 9000), st.integers(0, 9000), st.integers(0, 2), st.integers(1, 999), st.integers(1, 4),
)
nodes_strategy = st.lists(
    st.tuples(st.integers(0, 32000), st.integers(0, 32000), st.integers(0, 4), st.sampled_from(["T4", "V100"])),
    min_size=1, max_size=5,
)


@settings(max_examples=60, deadline=None)
@given(nodes_strategy, st.lists(pods_strategy, max_size=40), st.sampled_from(["random", "bestfit", "portal"]))
def test_no_policy_ever_exceeds_a_gpu_or_a_node(node_specs, pods, policy_name):
    nodes = [Node(f"n{i}", cpu, mem, gpus, model, max_pods=8) for i, (cpu, mem, gpus, model) in enumerate(node_specs)]
    policy = make_policy(policy_name, nodes, seed=3)
    for pod in pods:
        policy.observe(pod)
        placement = policy.choose(nodes, pod)
        if placement is None:
            assert not any(fits(n, pod) for n in nodes)
            continue
        chosen = nodes[placement.node]
        assert fits(chosen, pod) and set(placement.gpus) <= set(eligible_gpus(chosen, pod))
        commit(nodes, pod, placement)
        for n in nodes:
            assert all(0 <= g <= 1000 for g in n.gpu_free)
            assert n.cpu_free >= 0 and n.mem_free >= 0 and 0 <= n.pods_free <= n.max_pods
