"""Placing a gang of workers onto a pool's GPUs: all workers or none, binpacking.

Whole-GPU workers take free GPUs on one node, choosing the fullest node that
still fits (keeps whole nodes free for big gangs). Fractional workers share one
GPU and never span two: they go to the fullest shared GPU with room, else to a
free GPU on the fullest node.

``Occupancy`` keeps, besides the share used of every GPU, each node's count of
whole free GPUs in buckets and shared GPUs by how full they are, so that one
placement costs a few dictionary steps instead of a scan of the pool: a cycle
over thousands of nodes and jobs stays within milliseconds.
"""

from __future__ import annotations

from quotas.scheduler.types import PoolState, Slot

FULL = 100  # shares are kept in hundredths of a GPU, so sums stay exact


def _hundredths(share: float) -> int:
    return FULL if share == 1.0 else round(share * FULL)


class Occupancy:
    def __init__(self, pool: PoolState):
        self.pool = pool
        self.per_node = pool.gpus_per_node
        self.used: dict[tuple[str, int], int] = {}
        self.whole_free = {node: set(range(self.per_node)) for node in pool.nodes}
        self.by_free: list[dict[str, None]] = [{} for _ in range(self.per_node + 1)]
        self.shared: list[dict[tuple[str, int], None]] = [{} for _ in range(FULL)]
        self.free_hundredths = pool.total * FULL
        used, whole_free, shared = self.used, self.whole_free, self.shared
        for key, share in pool.used.items():  # bulk, and cheap for whole GPUs: a pool can have thousands busy
            amount = FULL if share >= 1.0 else round(share * FULL)
            if amount <= 0:
                continue
            used[key] = amount
            whole_free[key[0]].discard(key[1])
            self.free_hundredths -= amount
            if amount < FULL:
                shared[amount][key] = None
        for node in pool.nodes:
            self.by_free[len(self.whole_free[node])][node] = None

    @property
    def free(self) -> float:
        return self.free_hundredths / FULL

    def copy(self) -> Occupancy:
        clone = object.__new__(Occupancy)
        clone.pool, clone.per_node, clone.free_hundredths = self.pool, self.per_node, self.free_hundredths
        clone.used = dict(self.used)
        clone.whole_free = {node: set(gpus) for node, gpus in self.whole_free.items()}
        clone.by_free = [dict(bucket) for bucket in self.by_free]
        clone.shared = [dict(bucket) for bucket in self.shared]
        return clone

    # --- bookkeeping -----------------------------------------------------------------
    def _move_node(self, node: str, before: int) -> None:
        del self.by_free[before][node]
        self.by_free[len(self.whole_free[node])][node] = None

    def _take(self, key: tuple[str, int], amount: int) -> None:
        node, gpu = key
        before = self.used.get(key, 0)
        after = min(FULL, before + amount)
        if 0 < before < FULL:
            del self.shared[before][key]
        if before == 0:
            free_count = len(self.whole_free[node])
            self.whole_free[node].discard(gpu)
            self._move_node(node, free_count)
        if 0 < after < FULL:
            self.shared[after][key] = None
        self.used[key] = after
        self.free_hundredths -= after - before

    def _give(self, key: tuple[str, int], amount: int) -> None:
        node, gpu = key
        before = self.used.get(key, 0)
        after = max(0, before - amount)
        if 0 < before < FULL:
            del self.shared[before][key]
        if after == 0:
            self.used.pop(key, None)
            free_count = len(self.whole_free[node])
            self.whole_free[node].add(gpu)
            self._move_node(node, free_count)
        else:
            self.used[key] = after
            if after < FULL:
                self.shared[after][key] = None
        self.free_hundredths += before - after

    def release(self, slots) -> None:
        for slot in slots:
            for gpu in slot.gpus:
                self._give((slot.node, gpu), _hundredths(slot.fraction) if slot.fraction else FULL)

    def retake(self, slots) -> None:
        """Undo ``release`` of these slots."""
        for slot in slots:
            for gpu in slot.gpus:
                self._take((slot.node, gpu), _hundredths(slot.fraction) if slot.fraction else FULL)

    # --- placing ---------------------------------------------------------------------
    def place(self, workers: int, gpus_per_worker: float) -> list[Slot] | None:
        """Slots for every worker, taken from the pool; None (and nothing taken) if the gang does not fit."""
        if workers * gpus_per_worker * FULL > self.free_hundredths + 1e-6:
            return None
        slots: list[Slot] = []
        for worker in range(workers):
            slot = self._place_one(worker, gpus_per_worker)
            if slot is None:
                self.release(slots)
                return None
            slots.append(slot)
        return slots

    def fits(self, workers: int, gpus_per_worker: float) -> bool:
        slots = self.place(workers, gpus_per_worker)
        if slots is None:
            return False
        self.release(slots)
        return True

    def _fullest_node_with(self, count: int) -> str | None:
        for free in range(count, self.per_node + 1):
            if self.by_free[free]:
                return next(iter(self.by_free[free]))
        return None

    def _place_one(self, worker: int, gpus: float) -> Slot | None:
        if gpus == 0:
            return Slot(worker=worker, node=self.pool.nodes[0])
        if gpus < 1:
            amount = _hundredths(gpus)
            for level in range(FULL - amount, 0, -1):
                if self.shared[level]:
                    key = next(iter(self.shared[level]))
                    break
            else:
                node = self._fullest_node_with(1)
                if node is None:
                    return None
                key = (node, min(self.whole_free[node]))
            self._take(key, amount)
            return Slot(worker=worker, node=key[0], gpus=(key[1],), fraction=gpus)
        needed = int(gpus)
        node = self._fullest_node_with(needed)
        if node is None:
            return None
        chosen = tuple(sorted(self.whole_free[node])[:needed])
        for gpu in chosen:
            self._take((node, gpu), FULL)
        return Slot(worker=worker, node=node, gpus=chosen)


def place_gang(pool: PoolState, used: dict[tuple[str, int], float], workers: int, gpus_per_worker: float) -> list[Slot] | None:
    """One-off placement against a plain usage map (updated in place on success)."""
    occupancy = Occupancy(PoolState(pool_id=pool.pool_id, name=pool.name, nodes=pool.nodes,
                                    gpus_per_node=pool.gpus_per_node, shareable=pool.shareable, used=used))
    slots = occupancy.place(workers, gpus_per_worker)
    if slots is not None:
        used.clear()
        used.update({key: share / FULL for key, share in occupancy.used.items()})
    return slots
