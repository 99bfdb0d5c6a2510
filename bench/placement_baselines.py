"""The FGD protocol's baseline placements (PROTOCOL.md items 8-10): for comparison only, never the portal's.

Each is a policy for the live ``quotas.scheduler.placement.Occupancy`` -- the portal's state, fit rules and
taking -- and only chooses a node (and a fraction's GPU). The benchmark builds the occupancy with the
nodes in rank order, so the lowest node index is the lowest rank (the protocol's tie-break).

- ``random``: a uniformly random feasible node, drawn from the trace's node order; a fraction on a random
  eligible GPU of it; whole GPUs are the lowest-index free ones (the occupancy's rule for every policy).
- ``bestfit``: the highest int(100 x (1 - [0.5 x leftover CPU / largest node CPU + 0.5 x leftover GPU
  milli / largest node GPU milli])), lowest rank among equals; a fraction on the GPU it fits most tightly.
- ``fgd``: the paper's policy, the live fragmentation policy with FGD's measure alone (over the trace's
  95% most frequent shapes, given up front) and its integer sigmoid score.
"""

from __future__ import annotations

import math
import random

from quotas.scheduler.placement import FULL, Fragmentation


def feasible(occupancy, order, gpus: int, milli: int, cpu, mem, models=()):
    """The nodes of ``order`` that fit one worker: ``Occupancy.fits_node`` inlined, as these policies look at
    every node for every pod."""
    cpu_free, mem_free, pods_free, gpu_free, model = (
        occupancy.cpu_free,
        occupancy.mem_free,
        occupancy.pods_free,
        occupancy.gpu_free,
        occupancy.model,
    )
    for i in order:
        if cpu > cpu_free[i] or mem > mem_free[i] or pods_free[i] < 1:
            continue
        if gpus:
            if models and model[i] not in models:
                continue
            free = gpu_free[i]
            if (not free or max(free) < milli) if gpus == 1 else free.count(FULL) < gpus:
                continue
        yield i


class RandomPlacement:
    def __init__(self, seed, trace_order: list[int]):
        self.rng = random.Random(seed)
        self.trace_order = trace_order  # occupancy index of each node, in the trace's order

    def _pick(self, occupancy, gpus: int, milli: int, cpu, mem, models=()) -> int | None:
        nodes = list(feasible(occupancy, self.trace_order, gpus, milli, cpu, mem, models))
        return self.rng.choice(nodes) if nodes else None

    def whole(self, occupancy, count, cpu, mem, models=()):
        i = self._pick(occupancy, count, FULL, cpu, mem, models)
        return None if i is None else occupancy.nodes[i]

    def fraction(self, occupancy, amount, cpu, mem, models=()):
        i = self._pick(occupancy, 1, amount, cpu, mem, models)
        if i is None:
            return None
        eligible = [g for g, free in enumerate(occupancy.gpu_free[i]) if free >= amount]
        return occupancy.nodes[i], self.rng.choice(eligible)

    def no_gpu(self, occupancy, cpu, mem):
        i = self._pick(occupancy, 0, 0, cpu, mem)
        return None if i is None else occupancy.nodes[i]


class BestFitPlacement:
    def __init__(self, nodes):
        self.max_cpu = max((n.cpu for n in nodes), default=1) or 1
        self.max_gpu = FULL * max((n.gpus for n in nodes), default=1) or FULL

    def _pick(self, occupancy, gpus: int, milli: int, cpu, mem, models=()) -> int | None:
        best = best_key = None
        request, max_cpu, max_gpu = gpus * milli, self.max_cpu, self.max_gpu
        cpu_free, gpu_free = occupancy.cpu_free, occupancy.gpu_free
        for i in feasible(occupancy, range(len(occupancy.nodes)), gpus, milli, cpu, mem, models):
            left = (cpu_free[i] - cpu) / max_cpu * 0.5 + (sum(gpu_free[i]) - request) / max_gpu * 0.5
            key = -int((1.0 - left) * 100)
            if best_key is None or key < best_key:
                best, best_key = i, key
        return best

    def whole(self, occupancy, count, cpu, mem, models=()):
        i = self._pick(occupancy, count, FULL, cpu, mem, models)
        return None if i is None else occupancy.nodes[i]

    def fraction(self, occupancy, amount, cpu, mem, models=()):
        i = self._pick(occupancy, 1, amount, cpu, mem, models)
        if i is None:
            return None
        free = occupancy.gpu_free[i]
        return occupancy.nodes[i], min((g for g in range(len(free)) if free[g] >= amount), key=lambda g: (free[g], g))

    def no_gpu(self, occupancy, cpu, mem):
        i = self._pick(occupancy, 0, 0, cpu, mem)
        return None if i is None else occupancy.nodes[i]


class FgdPlacement(Fragmentation):
    def measure(self, model, cpu_free, free):
        return self.typical.fgd(model, cpu_free, free)

    def key(self, delta, free_after, cpu_after):
        return (-int(100 / (1 + math.exp(delta / 1000))),)
