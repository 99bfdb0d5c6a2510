"""The FGD protocol's baselines (bench.placement_baselines) on the live occupancy: PROTOCOL.md items 8-10."""

from __future__ import annotations

import random

import pytest

from bench.placement_baselines import BestFitPlacement, FgdPlacement, RandomPlacement, feasible
from quotas.scheduler import Slot
from quotas.scheduler.placement import FULL, NodeSpec, Occupancy, Shape, TypicalPods


def occupancy(states, policy=None):
    """Nodes in rank order: (free milli per GPU, CPU) each, 64 GiB, T4 unless told."""
    specs = [
        NodeSpec(f"n{i}", len(s["free"]), s.get("model", "T4"), s.get("cpu", 16000), 65536, 1001)
        for i, s in enumerate(states)
    ]
    used = {(f"n{i}", g): (FULL - f) / FULL for i, s in enumerate(states) for g, f in enumerate(s["free"]) if f < FULL}
    built = Occupancy.from_nodes(specs, "binpack", used)
    built.policy = policy or BestFitPlacement(specs)
    return built


BESTFIT_CASES = [
    # (description, node states, (GPUs, cpu), expected slot)
    ("fullest node wins", [dict(free=[1000, 1000]), dict(free=[1000, 0])], (1, 1000), Slot(0, "n1", (0,))),
    (
        "cpu counts too",
        [dict(free=[1000, 1000], cpu=16000), dict(free=[1000, 1000], cpu=8000)],
        (0, 1000),
        Slot(0, "n1"),
    ),
    ("tightest GPU for a fraction", [dict(free=[1000, 700, 500, 500])], (0.45, 1), Slot(0, "n0", (2,), 0.45)),
    ("lowest free GPUs for whole ones", [dict(free=[200, 1000, 1000, 1000])], (2, 1), Slot(0, "n0", (1, 2))),
    ("equal scores: lowest rank", [dict(free=[1000, 1000]), dict(free=[1000, 1000])], (1, 1), Slot(0, "n0", (0,))),
]


@pytest.mark.parametrize(("desc", "states", "worker", "expected"), BESTFIT_CASES, ids=[c[0] for c in BESTFIT_CASES])
def test_bestfit(desc, states, worker, expected):
    gpus, cpu = worker
    assert occupancy(states).place(1, gpus, cpu=cpu, mem=1) == [expected]


def test_bestfit_score_is_the_truncated_weighted_leftover():
    # largest node: 32000 CPU, 2 GPUs. n0 leaves (16000 cpu, 1000 gpu) -> 100*(1-(0.25+0.25)) = 50;
    # n1 leaves (31999 cpu, 0 gpu) -> int(100*(1-0.49998)) = 50: a tie, so the lower rank (index) wins.
    states = [dict(free=[1000, 1000], cpu=16000), dict(free=[1000, 0], cpu=32000)]
    tie = occupancy(states)
    tie.cpu_free[1] = 31999
    assert tie.place(1, 1) == [Slot(0, "n0", (0,))]
    wins = occupancy(states)
    wins.cpu_free[1] = 31000  # leaves 0.484 -> 51: n1 wins whatever the ranks
    assert wins.place(1, 1) == [Slot(0, "n1", (0,))]


def test_random_only_picks_feasible_nodes_and_eligible_gpus():
    states = [dict(free=[100, 100]), dict(free=[100, 900], model="V100"), dict(free=[800, 50]), dict(free=[], cpu=10)]
    picks = set()
    for seed in range(50):
        built = occupancy(states, RandomPlacement(seed, [0, 1, 2, 3]))
        picks.add(tuple(built.place(1, 0.5, cpu=100, mem=1, models=frozenset({"T4"}))))
    assert picks == {(Slot(0, "n2", (0,), 0.5),)}
    assert occupancy(states, RandomPlacement(1, [0, 1, 2, 3])).place(1, 0.95, cpu=100, mem=1) is None


def test_fgd_takes_the_least_fragmenting_node():
    typical = TypicalPods([(Shape(1000, 4, FULL), 0.5), (Shape(1000, 1, FULL), 0.5)])
    states = [dict(free=[1000] * 4), dict(free=[0, 1000, 1000, 1000]), dict(free=[1000] * 4)]
    assert occupancy(states, FgdPlacement(typical)).place(1, 1, cpu=1000, mem=1)[0].node == "n1"


def test_the_inlined_fit_rule_is_the_occupancys():
    rng = random.Random(5)
    for _ in range(200):
        specs = [
            NodeSpec(
                f"n{i}",
                rng.randint(0, 4),
                rng.choice(["T4", "V100"]),
                rng.randint(0, 8000),
                rng.randint(0, 8000),
                rng.randint(0, 2),
            )
            for i in range(rng.randint(1, 5))
        ]
        used = {(s.name, g): rng.choice([0.25, 0.5, 1.0]) for s in specs for g in range(s.gpus) if rng.random() < 0.5}
        built = Occupancy.from_nodes(specs, "binpack", used)
        gpus, milli = rng.choice([(0, 0), (1, 300), (1, 800), (1, FULL), (2, FULL), (4, FULL)])
        cpu, mem, models = rng.randint(0, 8000), rng.randint(0, 8000), rng.choice([(), frozenset({"T4"})])
        expected = [i for i in range(len(specs)) if built.fits_node(i, gpus, milli, cpu, mem, models)]
        assert list(feasible(built, range(len(specs)), gpus, milli, cpu, mem, models)) == expected
