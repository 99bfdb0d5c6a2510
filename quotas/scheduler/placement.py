"""Placing a gang of workers onto GPUs: all workers or none, binpacking by default.

Whole-GPU workers take free GPUs on one node, preferring the fullest node that
fits (keeps whole nodes free for big gangs). Fractional workers share one GPU
and never span two: they go to the fullest shared GPU with room, else to a
free GPU on the fullest node.
"""

from __future__ import annotations

from quotas.scheduler.types import PoolState, Slot

EPSILON = 1e-9


def place_gang(pool: PoolState, used: dict[tuple[str, int], float], workers: int, gpus_per_worker: float) -> list[Slot] | None:
    """Slots for every worker, updating ``used`` in place; None (and ``used`` untouched) if the gang does not fit."""
    trial = dict(used)
    slots = []
    for worker in range(workers):
        slot = _place_one(pool, trial, worker, gpus_per_worker)
        if slot is None:
            return None
        slots.append(slot)
    used.clear()
    used.update(trial)
    return slots


def _node_load(pool: PoolState, used: dict, node: str) -> float:
    return sum(used.get((node, gpu), 0.0) for gpu in range(pool.gpus_per_node))


def _place_one(pool: PoolState, used: dict, worker: int, gpus: float) -> Slot | None:
    if gpus == 0:
        return Slot(worker=worker, node=pool.nodes[0])
    fullest_first = sorted(pool.nodes, key=lambda node: -_node_load(pool, used, node))
    if gpus < 1:
        shared = [
            (used[(node, gpu)], node, gpu)
            for node in pool.nodes
            for gpu in range(pool.gpus_per_node)
            if 0 < used.get((node, gpu), 0.0) < 1 and used[(node, gpu)] + gpus <= 1 + EPSILON
        ]
        if shared:
            _, node, gpu = max(shared, key=lambda item: item[0])
        else:
            free = [(node, gpu) for node in fullest_first for gpu in range(pool.gpus_per_node) if used.get((node, gpu), 0.0) == 0]
            if not free:
                return None
            node, gpu = free[0]
        used[(node, gpu)] = used.get((node, gpu), 0.0) + gpus
        return Slot(worker=worker, node=node, gpus=(gpu,), fraction=gpus)
    needed = int(gpus)
    for node in fullest_first:
        free = [gpu for gpu in range(pool.gpus_per_node) if used.get((node, gpu), 0.0) == 0]
        if len(free) >= needed:
            chosen = tuple(free[:needed])
            for gpu in chosen:
                used[(node, gpu)] = 1.0
            return Slot(worker=worker, node=node, gpus=chosen)
    return None
