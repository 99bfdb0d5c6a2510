"""Placement: where the workers of a gang go on a pool's nodes. One model for the cycle and the benchmarks.

- ``occupancy``: the state (free GPU milli, and CPU, memory and pod slots where tracked), the fit rules,
  gang placement (all workers or none, each worker on one node) and giving back;
- ``policies``: the per-pool choice of node and GPU: ``binpack`` (default), ``spread``, ``fragmentation``;
- ``fragmentation``: the measure the fragmentation policy minimises, and the mix of shapes it is taken over.
"""

from dataclasses import replace

from quotas.scheduler import compiled

compiled.use(__path__, "placement")  # as quotas.scheduler does

from quotas.scheduler.placement.fragmentation import FULL, PodMix, Shape, TypicalPods  # noqa: E402
from quotas.scheduler.placement.occupancy import NodeSpec, Occupancy, units  # noqa: E402
from quotas.scheduler.placement.policies import Binpack, Fragmentation, Spread, make_policy, policy_for  # noqa: E402
from quotas.scheduler.types import PoolState, Slot  # noqa: E402

__all__ = [
    "FULL",
    "Binpack",
    "Fragmentation",
    "NodeSpec",
    "Occupancy",
    "PodMix",
    "Shape",
    "Spread",
    "TypicalPods",
    "make_policy",
    "place_gang",
    "policy_for",
    "units",
]


def place_gang(
    pool: PoolState, used: dict[tuple[str, int], float], workers: int, gpus_per_worker: float
) -> list[Slot] | None:
    """One-off placement with the pool's policy against a plain usage map (updated in place on success)."""
    slots = Occupancy(replace(pool, used=dict(used))).place(workers, gpus_per_worker)
    if slots is not None:
        for slot in slots:
            for gpu in slot.gpus:
                used[(slot.node, gpu)] = used.get((slot.node, gpu), 0.0) + (slot.fraction or 1.0)
    return slots
