"""Builders for the placement tests (tests/quotas/test_scheduler_placement*.py): pools of 8-GPU nodes with some
GPUs in use, one node that tracks CPU, memory and pods, a mix of worker shapes, and pending jobs.
"""

from __future__ import annotations

from quotas.scheduler.placement import FULL, NodeSpec, Occupancy, PodMix, Shape, units
from tests.quotas import scheduling


def pool(nodes=3, gpus=8, used=None, placement="binpack"):
    """Three 8-GPU shareable nodes by default (scheduling.pool with no running jobs)."""
    return scheduling.pool(nodes, gpus, used=used, placement=placement)


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


def one(gpus=2, cpu=16000, mem=65536, model="T4", free=None, max_pods=1001):
    occupancy = Occupancy.from_nodes(
        [NodeSpec("n", gpus, model, cpu, mem, max_pods)],
        used={("n", g): (FULL - f) / FULL for g, f in enumerate(free or ())},
    )
    return occupancy


def pending(job_id, gpus, workers=1, dept="vision"):
    """A preemptible job of priority 500 without a runtime limit, submitted at its id."""
    return scheduling.pending(job_id, dept, gpus=gpus, workers=workers, runtime=None)
