"""Where one worker goes: the pool's placement policy (``PoolState.placement``). Pure, no I/O.

A policy reads an ``Occupancy`` and answers, for one worker, with a node (whole GPUs: the node's
lowest-index free ones are taken; no GPU) or a (node, GPU) pair (a fraction); ``Occupancy.place`` does the
taking, worker by worker, all or none. Every policy only answers with a node the worker fits.

- ``binpack`` (the default): the fullest node that still fits (fewest whole free GPUs), so that whole
  nodes stay free for big gangs; a fraction goes to the fullest shared GPU with room, else to a free GPU of
  the fullest node.
- ``spread``: the emptiest node (most whole free GPUs), so a gang's workers and small jobs land on nodes of
  their own; a fraction gets a free GPU of the emptiest node, else the least used shared GPU with room.
- ``fragmentation``: the node whose placement least increases the pool's expected fragmentation under the
  mix of workload shapes it serves (``TypicalPods.portal``: FGD's measure plus what copies of each typical
  worker would leave unused); ties go to the node left with fewer free GPUs, then less free CPU, then the
  lowest node index; a fraction goes to the GPU of that node whose slice adds least (tightest among
  equals). The mix is the workers of the pool's running and pending jobs (``policy_for``), so a pool asked
  for 8-GPU gangs keeps whole nodes whole where it can and one asked for 4-GPU workers keeps 4-GPU holes.
On equal terms binpack and spread take the node that entered its index bucket first (pool order at first).
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Collection, Iterable, Sequence
from typing import TYPE_CHECKING, Protocol, cast

from mypy_extensions import mypyc_attr

from quotas.scheduler.placement.fragmentation import FULL, PodMix, Shape, TypicalPods
from quotas.scheduler.types import BINPACK, FRAGMENTATION, PLACEMENTS, SPREAD, PendingJob, PoolState, RunningJob

# Fragmentation scores kept; past this the cache starts again (a long simulation sees many states).
SCORE_CACHE_LIMIT = 200_000

if TYPE_CHECKING:  # occupancy imports this module
    from quotas.scheduler.placement.occupancy import Occupancy, State


class PlacementPolicy(Protocol):
    """What ``Occupancy`` asks of a policy, for one worker: a node (whole GPUs, no GPU) or a (node, GPU) pair
    (a fraction) that it fits, or None."""

    def whole(
        self, occupancy: Occupancy, count: int, cpu: float, mem: float, models: Collection[str] = ...
    ) -> str | None: ...

    def fraction(
        self, occupancy: Occupancy, amount: int, cpu: float, mem: float, models: Collection[str] = ...
    ) -> tuple[str, int] | None: ...

    def no_gpu(self, occupancy: Occupancy, cpu: float, mem: float) -> str | None: ...


class Binpack:
    name = BINPACK

    def whole(
        self, occupancy: Occupancy, count: int, cpu: float, mem: float, models: Collection[str] = ()
    ) -> str | None:
        by_free = occupancy.by_free
        for free in range(count, occupancy.most + 1):
            if by_free[free]:
                node = occupancy.first_fitting(by_free[free], cpu, mem, models)
                if node is not None:
                    return node
        return None

    def fraction(
        self, occupancy: Occupancy, amount: int, cpu: float, mem: float, models: Collection[str] = ()
    ) -> tuple[str, int] | None:
        levels, shared = occupancy.levels, occupancy.shared
        for position in range(bisect_right(levels, FULL - amount) - 1, -1, -1):
            key = occupancy.first_fitting_gpu(shared[levels[position]], cpu, mem, models)
            if key is not None:
                return key
        node = self.whole(occupancy, 1, cpu, mem, models)
        return None if node is None else (node, min(occupancy.whole_free[node]))

    def no_gpu(self, occupancy: Occupancy, cpu: float, mem: float) -> str | None:
        return self.whole(occupancy, 0, cpu, mem)


class Spread:
    name = SPREAD

    def whole(
        self, occupancy: Occupancy, count: int, cpu: float, mem: float, models: Collection[str] = ()
    ) -> str | None:
        by_free = occupancy.by_free
        for free in range(occupancy.most, count - 1, -1):
            if by_free[free]:
                node = occupancy.first_fitting(by_free[free], cpu, mem, models)
                if node is not None:
                    return node
        return None

    def fraction(
        self, occupancy: Occupancy, amount: int, cpu: float, mem: float, models: Collection[str] = ()
    ) -> tuple[str, int] | None:
        node = self.whole(occupancy, 1, cpu, mem, models)
        if node is not None:
            return node, min(occupancy.whole_free[node])
        levels, shared = occupancy.levels, occupancy.shared
        for position in range(bisect_right(levels, FULL - amount)):
            key = occupancy.first_fitting_gpu(shared[levels[position]], cpu, mem, models)
            if key is not None:
                return key
        return None

    def no_gpu(self, occupancy: Occupancy, cpu: float, mem: float) -> str | None:
        return self.whole(occupancy, 0, cpu, mem)


@mypyc_attr(allow_interpreted_subclasses=True)  # bench.placement_baselines scores its own way
class Fragmentation:
    """Scores node *states* (``Occupancy.states()``), not nodes: nodes in one state score the same, and a
    portal pool has few states however many nodes it has. Scores are kept per (state, worker shape) until
    the mix changes (``use``)."""

    name = FRAGMENTATION

    def __init__(self, typical: TypicalPods | None = None):
        self.use(typical if typical is not None else TypicalPods([]))

    def use(self, typical: TypicalPods) -> None:
        """Score against this mix from now on."""
        self.typical = typical
        # (state, GPUs, milli, CPU) -> (key, GPU free milli to slice, for a fraction)
        self.scores: dict[tuple[State, int, int, float], tuple[tuple[float, ...], int | None]] = {}

    def measure(self, model: str, cpu_free: float, free: Sequence[int]) -> float:
        return self.typical.portal(model, cpu_free, free)

    def key(self, delta: float, free_after: int, cpu_after: float) -> tuple[float, ...]:
        """Lower is better; the node index breaks what ties remain."""
        return round(delta, 6), free_after, cpu_after

    def whole(
        self, occupancy: Occupancy, count: int, cpu: float, mem: float, models: Collection[str] = ()
    ) -> str | None:
        best = self._best(occupancy, count, FULL, cpu, mem, models)
        return None if best is None else occupancy.nodes[best[0]]

    def fraction(
        self, occupancy: Occupancy, amount: int, cpu: float, mem: float, models: Collection[str] = ()
    ) -> tuple[str, int] | None:
        best = self._best(occupancy, 1, amount, cpu, mem, models)
        if best is None:
            return None
        i, slice_of = best
        # slice_of is None only for a share that rounds to FULL (units: 0.9995 and up); index(None) then raises
        # ValueError, as it always has -- the cast changes nothing at run time.
        return occupancy.nodes[i], occupancy.gpu_free[i].index(cast(int, slice_of))  # the lowest-index GPU that free

    def no_gpu(self, occupancy: Occupancy, cpu: float, mem: float) -> str | None:
        best = self._best(occupancy, 0, 0, cpu, mem, ())
        return None if best is None else occupancy.nodes[best[0]]

    def _best(
        self, occupancy: Occupancy, gpus: int, milli: int, cpu: float, mem: float, models: Collection[str]
    ) -> tuple[int, int | None] | None:
        """(node index, GPU free milli to slice, for a fraction) of the best placement, or None if none fits."""
        scores = self.scores
        if len(scores) > SCORE_CACHE_LIMIT:
            scores.clear()
        best_key: tuple[float, ...] | None = None
        best_states: list[tuple[State, int | None]] = []
        for state in occupancy.states():
            model, cpu_free, mem_free, pods_free, free = state
            if cpu > cpu_free or mem > mem_free or pods_free < 1:
                continue
            if gpus and ((models and model not in models) or len(free) < gpus or free[-gpus] < milli):
                continue  # free is sorted: its last ``gpus`` entries are the freest GPUs
            scored = scores.get((state, gpus, milli, cpu))
            if scored is None:
                scored = scores[(state, gpus, milli, cpu)] = self._score(state, gpus, milli, cpu)
            if best_key is None or scored[0] < best_key:
                best_key, best_states = scored[0], [(state, scored[1])]
            elif scored[0] == best_key:
                best_states.append((state, scored[1]))
        if best_key is None:
            return None
        return min((occupancy.first_in_state(state), choice) for state, choice in best_states)

    def _score(self, state: State, gpus: int, milli: int, cpu: float) -> tuple[tuple[float, ...], int | None]:
        model, cpu_free, _, _, free = state
        measure, cpu_after = self.measure, cpu_free - cpu
        before = measure(model, cpu_free, free)
        choice = None
        if gpus == 1 and milli < FULL:
            options = []
            for slice_of in sorted(set(g for g in free if g >= milli)):
                after_free = list(free)
                after_free[after_free.index(slice_of)] -= milli
                options.append((measure(model, cpu_after, after_free), slice_of))
            after, choice = min(options)
        else:
            after_free = list(free)
            for position in range(len(free) - gpus, len(free)):
                after_free[position] = 0
            after = measure(model, cpu_after, after_free)
        return self.key(after - before, sum(free) - gpus * milli, cpu_after), choice


def make_policy(name: str, typical: TypicalPods | None = None) -> Binpack | Spread | Fragmentation:
    """The policy called ``name`` (``PLACEMENTS``); ``typical``: the mix the fragmentation policy scores."""
    if name == BINPACK:
        return Binpack()
    if name == SPREAD:
        return Spread()
    if name == FRAGMENTATION:
        return Fragmentation(typical)
    raise ValueError(f"unknown placement policy {name!r}; expected one of {', '.join(PLACEMENTS)}")


def worker_shape(gpus: float) -> Shape:
    """A portal worker as a fragmentation shape: no CPU, whole GPUs or one share in milli."""
    if gpus >= 1:
        return Shape(0, int(gpus), FULL)
    return Shape(0, 1, max(1, round(gpus * FULL))) if gpus > 0 else Shape(0, 0, 0)


def policy_for(
    pool: PoolState, pending: Iterable[PendingJob] = (), running: Iterable[RunningJob] = ()
) -> Binpack | Spread | Fragmentation:
    """The policy of ``pool`` for one cycle; the fragmentation one scores against the workers of the pool's
    running and pending jobs (every worker counts once; coverage 100%, so rare small shapes that fill
    leftovers count)."""
    if pool.placement != FRAGMENTATION:
        return make_policy(pool.placement)
    mix = PodMix(coverage=1.0)
    for job in pending:
        mix.add(worker_shape(job.gpus_per_worker), job.workers)
    for running_job in running:
        for slot in running_job.slots:
            mix.add(
                worker_shape(slot.fraction) if slot.fraction else Shape(0, len(slot.gpus), FULL if slot.gpus else 0)
            )
    return Fragmentation(mix.typical())
