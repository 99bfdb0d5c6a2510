"""What is free on a pool's nodes, and placing a gang of workers there: all workers or none, each on one node.

Owns the state -- the free milli-GPUs of every GPU (``FULL`` = 1000 = a whole GPU) and, on nodes that track
them, free CPU (milli), memory (MiB) and pod slots -- the fit rules, and taking and giving back. *Which*
node and GPU a worker gets is the pool's policy's choice (``policies``: binpack, spread, fragmentation);
a policy only reads the state and its indexes, and never changes them.

Fit rules for one worker of ``g`` GPUs, ``cpu``, ``mem`` and allowed GPU ``models`` (empty: any):
- ``g >= 1``: ``int(g)`` completely free GPUs of one node (the lowest-index ones are taken);
- ``0 < g < 1``: that share of one GPU with enough room left (a fraction never spans two GPUs);
- ``g == 0``: no GPU. On a pool that tracks nothing but GPUs (the portal's) such a worker takes nothing
  and is put on the first node;
and, where the node tracks them, CPU, memory and a pod slot, and (workers with GPUs) the node's GPU model.

Indexes, so that one placement costs a few dictionary steps rather than a scan of the pool (a cycle over
thousands of nodes and jobs stays within milliseconds): nodes bucketed by their count of whole free GPUs
(``by_free``); shared GPUs by milli in use (``shared``, with the sorted non-empty ``levels``); and, for a
policy that scores node states, nodes grouped by state (``states()``: nodes in one state score the same).
"""

from __future__ import annotations

from bisect import bisect_left, insort
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass
from heapq import heappop, heappush
from math import inf

from quotas.scheduler.placement.fragmentation import FULL
from quotas.scheduler.placement.policies import PlacementPolicy, make_policy
from quotas.scheduler.types import BINPACK, PoolState, Slot

# What a scoring policy sees of a node: (model, free CPU, free memory, free pod slots, sorted free milli).
State = tuple[str, float, float, float, tuple[int, ...]]


def units(share: float) -> int:
    """A share of one GPU in milli-GPUs (at least 1 for a positive share, ``FULL`` from a whole GPU up)."""
    return FULL if share >= 1.0 else max(1, round(share * FULL)) if share > 0 else 0


@dataclass(frozen=True)
class NodeSpec:
    """One node's capacity; ``inf`` for what is not tracked (a portal pool tracks GPUs only)."""

    name: str
    gpus: int
    model: str = ""
    cpu: float = inf
    mem: float = inf
    max_pods: float = inf


class Occupancy:
    state_of: list[State]  # each node's state, by node index; set with ``by_state`` (``states``)

    def __init__(self, pool: PoolState | None, policy: PlacementPolicy | None = None):
        """The occupancy of ``pool`` (its nodes, ``used`` shares and ``placement`` policy, or ``policy``); of no
        node for None (``from_nodes`` and ``copy`` then fill it: the compiled core has no ``object.__new__``)."""
        if pool is None:
            self._build([], {}, policy if policy is not None else make_policy(BINPACK))
            return
        self._build(
            [NodeSpec(name, pool.gpus_per_node) for name in pool.nodes],
            pool.used,
            policy if policy is not None else make_policy(pool.placement),
        )

    @classmethod
    def from_nodes(
        cls,
        nodes: Iterable[NodeSpec],
        policy: str | PlacementPolicy = BINPACK,
        used: Mapping[tuple[str, int], float] | None = None,
    ) -> Occupancy:
        """Nodes that may differ (``NodeSpec``s); ``used``: (node, GPU) -> share in use; ``policy``: a name or
        a policy object (anything with ``whole``, ``fraction`` and ``no_gpu`` as in ``policies``)."""
        occupancy = cls(None)
        occupancy._build(list(nodes), used or {}, make_policy(policy) if isinstance(policy, str) else policy)
        return occupancy

    def _build(self, specs: list[NodeSpec], used: Mapping[tuple[str, int], float], policy: PlacementPolicy) -> None:
        self.policy = policy
        self.nodes = tuple(spec.name for spec in specs)
        self.index = {name: i for i, name in enumerate(self.nodes)}
        self.gpu_count = [spec.gpus for spec in specs]
        self.model = [spec.model for spec in specs]
        self.cpu_free = [spec.cpu for spec in specs]
        self.mem_free = [spec.mem for spec in specs]
        self.pods_free = [spec.max_pods for spec in specs]
        # Only GPUs tracked and one model: the first node in an index bucket always fits (the portal's case).
        self.limited = any(s.cpu < inf or s.mem < inf or s.max_pods < inf for s in specs)
        self.most = max(self.gpu_count, default=0)
        self.gpu_free = [[FULL] * spec.gpus for spec in specs]  # free milli of each GPU, by node index
        self.whole_free = {spec.name: set(range(spec.gpus)) for spec in specs}
        self.by_free: list[dict[str, None]] = [{} for _ in range(self.most + 1)]
        self.shared: dict[int, dict[tuple[str, int], None]] = {}
        self.levels: list[int] = []
        self.free_units = FULL * sum(self.gpu_count)
        index, gpu_free, whole_free = self.index, self.gpu_free, self.whole_free
        for key, share in used.items():  # in bulk, and cheap for whole GPUs: a pool can have thousands busy
            amount = min(FULL, units(share))
            if amount <= 0:
                continue
            gpu_free[index[key[0]]][key[1]] = FULL - amount
            whole_free[key[0]].discard(key[1])
            self.free_units -= amount
            if amount < FULL:
                self._share(amount, key)
        for name in self.nodes:
            self.by_free[len(whole_free[name])][name] = None
        # state -> (its nodes, a heap of their indexes); made when a policy first asks (``states``)
        self.by_state: dict[State, tuple[set[int], list[int]]] | None = None

    @property
    def free(self) -> float:
        """Free GPUs in the pool (fractions of shared GPUs included)."""
        return self.free_units / FULL

    def copy(self) -> Occupancy:
        clone = Occupancy(None, self.policy)
        clone.nodes, clone.index, clone.gpu_count, clone.model = self.nodes, self.index, self.gpu_count, self.model
        clone.limited, clone.most, clone.free_units = self.limited, self.most, self.free_units
        clone.cpu_free, clone.mem_free, clone.pods_free = list(self.cpu_free), list(self.mem_free), list(self.pods_free)
        clone.gpu_free = [list(gpus) for gpus in self.gpu_free]
        clone.whole_free = {node: set(gpus) for node, gpus in self.whole_free.items()}
        clone.by_free = [dict(bucket) for bucket in self.by_free]
        clone.shared = {level: dict(bucket) for level, bucket in self.shared.items()}
        clone.levels = list(self.levels)
        if self.by_state is not None:
            clone.by_state = {state: (set(members), list(heap)) for state, (members, heap) in self.by_state.items()}
            clone.state_of = list(self.state_of)
        return clone

    # --- what policies read -------------------------------------------------------------
    def room(self, i: int, cpu: float, mem: float, models: Collection[str] = ()) -> bool:
        """CPU, memory, a pod slot and the GPU model on node ``i`` (the GPUs are each policy's index)."""
        return (
            cpu <= self.cpu_free[i]
            and mem <= self.mem_free[i]
            and self.pods_free[i] >= 1
            and (not models or self.model[i] in models)
        )

    def first_fitting(self, nodes: Iterable[str], cpu: float, mem: float, models: Collection[str] = ()) -> str | None:
        """The first of ``nodes`` (names, in order) with room for the rest of a worker."""
        if not self.limited and not models:
            return next(iter(nodes), None)
        index = self.index
        for node in nodes:
            if self.room(index[node], cpu, mem, models):
                return node
        return None

    def first_fitting_gpu(
        self, keys: Iterable[tuple[str, int]], cpu: float, mem: float, models: Collection[str] = ()
    ) -> tuple[str, int] | None:
        if not self.limited and not models:
            return next(iter(keys), None)
        index = self.index
        for key in keys:
            if self.room(index[key[0]], cpu, mem, models):
                return key
        return None

    def fits_node(
        self, i: int, gpus: int, milli: int, cpu: float = 0, mem: float = 0, models: Collection[str] = ()
    ) -> bool:
        """The whole fit rule on node ``i`` for one worker: ``gpus`` whole GPUs (``milli`` = FULL), a share of one
        GPU (``gpus`` = 1, ``milli`` < FULL) or no GPU (``gpus`` = 0)."""
        if not gpus:
            return self.room(i, cpu, mem)
        if not self.room(i, cpu, mem, models):
            return False
        free = self.gpu_free[i]
        if gpus == 1:
            return bool(free) and max(free) >= milli
        return free.count(FULL) >= gpus

    def state(self, i: int) -> State:
        """What a scoring policy needs of node ``i``: (model, CPU, memory, pod slots, sorted free milli)."""
        return self.model[i], self.cpu_free[i], self.mem_free[i], self.pods_free[i], tuple(sorted(self.gpu_free[i]))

    def states(self) -> dict[State, tuple[set[int], list[int]]]:
        """The nodes grouped by ``state``, kept up to date from the first call on."""
        if self.by_state is None:
            by_state: dict[State, tuple[set[int], list[int]]] = {}
            self.by_state, self.state_of = by_state, [self.state(i) for i in range(len(self.nodes))]
            for i, state in enumerate(self.state_of):
                self._join(by_state, i, state)
        return self.by_state

    def first_in_state(self, state: State) -> int:
        """The lowest node index in ``state`` (``states()`` made the groups)."""
        assert self.by_state is not None, "first_in_state before states()"
        members, heap = self.by_state[state]
        while heap[0] not in members:
            heappop(heap)
        return heap[0]

    # --- placing --------------------------------------------------------------------------
    def place(
        self,
        workers: int,
        gpus_per_worker: float,
        *,
        cpu: float = 0,
        mem: float = 0,
        models: Collection[str] = (),
        prefer: Collection[str] = (),
    ) -> list[Slot] | None:
        """Slots for every worker, taken from the pool; None (and nothing taken) if the gang does not fit.
        ``prefer``: nodes a worker of whole GPUs goes to first where one fits (the fullest of them), before the
        policy chooses among all."""
        per_worker = int(gpus_per_worker) * FULL if gpus_per_worker >= 1 else units(gpus_per_worker)
        if workers * per_worker > self.free_units:
            return None
        slots: list[Slot] = []
        for worker in range(workers):
            slot = (
                self._place_preferred(worker, int(gpus_per_worker), cpu, mem, models, prefer)
                if (prefer and gpus_per_worker >= 1)
                else None
            )
            slot = slot or self._place_one(worker, gpus_per_worker, cpu, mem, models)
            if slot is None:
                self.release(slots, cpu=cpu, mem=mem)
                return None
            slots.append(slot)
        return slots

    def fits(
        self, workers: int, gpus_per_worker: float, *, cpu: float = 0, mem: float = 0, models: Collection[str] = ()
    ) -> bool:
        slots = self.place(workers, gpus_per_worker, cpu=cpu, mem=mem, models=models)
        if slots is None:
            return False
        self.release(slots, cpu=cpu, mem=mem)
        return True

    def _place_preferred(
        self, worker: int, needed: int, cpu: float, mem: float, models: Collection[str], prefer: Collection[str]
    ) -> Slot | None:
        """One worker of ``needed`` whole GPUs on the fullest of ``prefer`` it fits (binpack's order among equals)."""
        simple = not self.limited and not models  # then any node with the GPUs fits (first_fitting)
        for free in range(needed, self.most + 1):
            for node in self.by_free[free]:
                if node in prefer and (simple or self.room(self.index[node], cpu, mem, models)):
                    return self._take_whole(worker, node, needed, cpu, mem)
        return None

    def _take_whole(self, worker: int, node: str, needed: int, cpu: float, mem: float) -> Slot:
        """Take the lowest-index ``needed`` whole free GPUs of ``node`` (and ``cpu``, ``mem``) for one worker."""
        chosen = tuple(sorted(self.whole_free[node])[:needed])
        i = self.index[node]
        self._flip(node, i, chosen, 0)
        self._use(i, cpu, mem, 1)
        return Slot(worker=worker, node=node, gpus=chosen)

    def _place_one(self, worker: int, gpus: float, cpu: float, mem: float, models: Collection[str]) -> Slot | None:
        policy = self.policy
        if gpus >= 1:
            needed = int(gpus)
            node = policy.whole(self, needed, cpu, mem, models)
            return None if node is None else self._take_whole(worker, node, needed, cpu, mem)
        if gpus > 0:
            amount = units(gpus)
            key = policy.fraction(self, amount, cpu, mem, models)
            if key is None:
                return None
            i = self.index[key[0]]
            self._take(key[0], i, key[1], amount)
            self._use(i, cpu, mem, 1)
            return Slot(worker=worker, node=key[0], gpus=(key[1],), fraction=gpus)
        if not self.limited:
            return Slot(worker=worker, node=self.nodes[0])  # nothing tracked that it could take
        node = policy.no_gpu(self, cpu, mem)
        if node is None:
            return None
        self._use(self.index[node], cpu, mem, 1)
        return Slot(worker=worker, node=node)

    def release(self, slots: Iterable[Slot], *, cpu: float = 0, mem: float = 0) -> None:
        """Give back what these slots hold (and, where tracked, ``cpu`` and ``mem`` per worker)."""
        index = self.index
        for slot in slots:
            i = index[slot.node]
            if slot.fraction or not self._whole(i, slot.gpus, 0):
                amount = units(slot.fraction) if slot.fraction else FULL
                for gpu in slot.gpus:
                    self._give(slot.node, i, gpu, amount)
            else:
                self._flip(slot.node, i, slot.gpus, FULL)
            self._use(i, -cpu, -mem, -1)

    def retake(self, slots: Iterable[Slot], *, cpu: float = 0, mem: float = 0) -> None:
        """Undo ``release`` of these slots."""
        index = self.index
        for slot in slots:
            i = index[slot.node]
            if slot.fraction or not self._whole(i, slot.gpus, FULL):
                amount = units(slot.fraction) if slot.fraction else FULL
                for gpu in slot.gpus:
                    self._take(slot.node, i, gpu, amount)
            else:
                self._flip(slot.node, i, slot.gpus, 0)
            self._use(i, cpu, mem, 1)

    # --- bookkeeping ----------------------------------------------------------------------
    def _share(self, level: int, key: tuple[str, int]) -> None:
        bucket = self.shared.get(level)
        if bucket is None:
            self.shared[level] = {key: None}
            insort(self.levels, level)
        else:
            bucket[key] = None

    def _unshare(self, level: int, key: tuple[str, int]) -> None:
        bucket = self.shared[level]
        del bucket[key]
        if not bucket:
            del self.shared[level]
            del self.levels[bisect_left(self.levels, level)]

    def _take(self, node: str, i: int, gpu: int, amount: int) -> None:
        free = self.gpu_free[i]
        before = FULL - free[gpu]
        after = min(FULL, before + amount)
        if 0 < before < FULL:
            self._unshare(before, (node, gpu))
        if before == 0:
            self._move(node, gpu, taken=True)
        if after < FULL:
            self._share(after, (node, gpu))
        free[gpu] = FULL - after
        self.free_units -= after - before

    def _give(self, node: str, i: int, gpu: int, amount: int) -> None:
        free = self.gpu_free[i]
        before = FULL - free[gpu]
        after = max(0, before - amount)
        if 0 < before < FULL:
            self._unshare(before, (node, gpu))
        if after == 0:
            self._move(node, gpu, taken=False)
        elif after < FULL:
            self._share(after, (node, gpu))
        free[gpu] = FULL - after
        self.free_units += before - after

    def _whole(self, i: int, gpus: tuple[int, ...], level: int) -> bool:
        """Is each of these GPUs of node ``i`` at ``level`` free milli (0: wholly held, FULL: wholly free)?"""
        free = self.gpu_free[i]
        for gpu in gpus:
            if free[gpu] != level:
                return False
        return True

    def _flip(self, node: str, i: int, gpus: tuple[int, ...], level: int) -> None:
        """Whole GPUs all wholly held become wholly free (``level`` FULL), or the other way round (0): what ``_give``
        or ``_take`` do GPU by GPU, with the node changing bucket once (it ends last in the same bucket). Evictions
        tried and undone release and retake whole GPUs thousands of times a cycle."""
        free = self.gpu_free[i]
        for gpu in gpus:
            free[gpu] = level
        whole = self.whole_free[node]
        count = len(whole)
        if level:
            whole.update(gpus)
            self.free_units += FULL * len(gpus)
        else:
            whole.difference_update(gpus)
            self.free_units -= FULL * len(gpus)
        if len(whole) != count:
            del self.by_free[count][node]
            self.by_free[len(whole)][node] = None

    def _move(self, node: str, gpu: int, *, taken: bool) -> None:
        """``gpu`` of ``node`` stops (``taken``) or starts being whole and free: the node changes bucket."""
        whole = self.whole_free[node]
        count = len(whole)
        if taken:
            whole.discard(gpu)
        else:
            whole.add(gpu)
        if len(whole) != count:
            del self.by_free[count][node]
            self.by_free[len(whole)][node] = None

    def _use(self, i: int, cpu: float, mem: float, pods: int) -> None:
        if self.limited:
            self.cpu_free[i] -= cpu
            self.mem_free[i] -= mem
            self.pods_free[i] -= pods
        by_state = self.by_state
        if by_state is not None:
            state = self.state(i)
            old = self.state_of[i]
            if state != old:
                members = by_state[old][0]
                members.discard(i)
                if not members:
                    del by_state[old]
                self._join(by_state, i, state)

    def _join(self, by_state: dict[State, tuple[set[int], list[int]]], i: int, state: State) -> None:
        self.state_of[i] = state
        group = by_state.get(state)
        if group is None:
            by_state[state] = ({i}, [i])
        else:
            group[0].add(i)
            heappush(group[1], i)
