"""Expected GPU fragmentation of a node under a mix of workload shapes (FGD's measure and a "fill" measure).

Owns the "typical pods" and the fragmentation number the ``fragmentation`` placement policy minimises
(``quotas.scheduler.placement.policies``). A pod here is one worker: CPU (milli), a GPU count, milli per GPU.

- ``PodMix`` counts shapes as they are seen (``add`` / ``observe``) or from a provided list (``from_pods``)
  and freezes them into ``TypicalPods``: the most frequent shapes covering ``coverage`` (95%) of the pods,
  with renormalised frequencies. Nothing here knows the future arrival order.
- ``TypicalPods.fragmentation(model, cpu_free, gpus)`` is the frequency-weighted sum, over typical GPU
  pods, of the free GPU milli such a pod could not use on a node in that state: all of it when the pod
  does not fit at all (CPU, GPU model or GPU count), else the free milli of GPUs too small for it.
  CPU-only shapes add the same amount on every node, so they are left out of the sum (they still count
  in the frequencies). Results are memoised per (model, cpu_free, sorted free milli).

Pure Python, no I/O, no framework.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Protocol

FULL = 1000  # milli of one whole GPU

# (model, free CPU, sorted free milli, their sum) -> fragmentation
Measure = Callable[[str, float, tuple[int, ...], int], float]


@dataclass(frozen=True, slots=True)
class Shape:
    """What matters of a pod for fragmentation: CPU, GPU count, milli per GPU, allowed models."""

    cpu: int
    num_gpu: int
    gpu_milli: int
    gpu_spec: frozenset[str] = frozenset()


class PodLike(Protocol):
    """What ``PodMix.observe`` reads of a pod."""

    @property
    def cpu(self) -> int: ...
    @property
    def num_gpu(self) -> int: ...
    @property
    def gpu_milli(self) -> int: ...
    @property
    def gpu_spec(self) -> frozenset[str]: ...


class TypicalPods:
    """A frozen pod mix: ``items`` are (shape, frequency) with frequencies summing to 1."""

    def __init__(self, items: list[tuple[Shape, float]]):
        self.items = tuple(items)
        self._gpu_items = tuple(
            (s.cpu, s.num_gpu, s.gpu_milli, s.gpu_spec, f) for s, f in self.items if s.num_gpu and s.gpu_milli
        )
        self._memo: dict[tuple[int, str, float, tuple[int, ...]], float] = {}

    def __bool__(self) -> bool:
        return bool(self._gpu_items)

    def _memoized(self, kind: int, model: str, cpu_free: float, gpus: Iterable[int], measure: Measure) -> float:
        key = (kind, model, cpu_free, tuple(sorted(gpus)))
        hit = self._memo.get(key)
        if hit is None:
            free = key[3]
            total = sum(free)
            hit = self._memo[key] = measure(model, cpu_free, free, total) if total else 0.0
        return hit

    def fgd(self, model: str, cpu_free: float, gpus: Iterable[int]) -> float:
        """FGD's measure: expected free GPU milli a typical pod could not use on a node in this state."""
        return self._memoized(0, model, cpu_free, gpus, self._fgd)

    def _fgd(self, model: str, cpu_free: float, free: tuple[int, ...], total: int) -> float:
        frag = 0.0
        for cpu, num, milli, spec, freq in self._gpu_items:
            if cpu_free < cpu or (spec and model not in spec):
                frag += freq * total
                continue
            usable = below = 0
            for g in free:
                if g >= milli:
                    usable += 1
                else:
                    below += g
            frag += freq * (below if usable >= num else total)
        return frag

    def fill(self, model: str, cpu_free: float, gpus: Iterable[int]) -> float:
        """Expected free GPU milli left unused if the node were filled with copies of one typical pod.

        Unlike ``fgd`` it sees what one pod cannot: two 470-milli slices leave 60 of a GPU, and 60 free
        cores next to 8 free GPUs serve only five 12-core pods."""
        return self._memoized(1, model, cpu_free, gpus, self._fill)

    def _fill(self, model: str, cpu_free: float, free: tuple[int, ...], total: int) -> float:
        frag = 0.0
        for cpu, num, milli, spec, freq in self._gpu_items:
            if spec and model not in spec:
                frag += freq * total
                continue
            slots = 0
            for g in free:
                slots += g // milli
            copies = slots // num
            if cpu and cpu_free < cpu * copies:  # (a node that does not track CPU has cpu_free = inf)
                copies = int(cpu_free // cpu)
            frag += freq * (total - copies * num * milli)
        return frag

    def portal(self, model: str, cpu_free: float, gpus: Iterable[int]) -> float:
        """The measure the ``fragmentation`` policy minimises: ``fgd + fill``."""
        return self.fgd(model, cpu_free, gpus) + self.fill(model, cpu_free, gpus)


class PodMix:
    """Counts of pod shapes; ``typical()`` freezes the shapes covering ``coverage`` of the pods."""

    def __init__(self, coverage: float = 0.95):
        self.coverage = coverage
        self.counts: Counter[Shape] = Counter()
        self.seen = 0

    @classmethod
    def from_pods(cls, pods: Iterable[PodLike], coverage: float = 0.95) -> PodMix:
        mix = cls(coverage)
        for pod in pods:
            mix.observe(pod)
        return mix

    def observe(self, pod: PodLike) -> None:
        """Count one pod: anything with ``cpu``, ``num_gpu``, ``gpu_milli`` and ``gpu_spec``."""
        self.add(Shape(pod.cpu, pod.num_gpu, pod.gpu_milli, pod.gpu_spec))

    def add(self, shape: Shape, count: int = 1) -> None:
        self.counts[shape] += count
        self.seen += count

    def typical(self) -> TypicalPods:
        if not self.seen:
            return TypicalPods([])
        # Most frequent first; equal counts in a stable order so a run is reproducible.
        ranked = sorted(
            self.counts.items(),
            key=lambda kv: (-kv[1], kv[0].cpu, kv[0].num_gpu, kv[0].gpu_milli, sorted(kv[0].gpu_spec)),
        )
        chosen: list[tuple[Shape, int]] = []
        covered = 0
        for shape, count in ranked:
            if covered >= self.coverage * self.seen:
                break
            chosen.append((shape, count))
            covered += count
        return TypicalPods([(shape, count / covered) for shape, count in chosen])
