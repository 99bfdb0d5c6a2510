"""Placing one pod on one node of a pool: fit rules, GPU choice and three policies. Pure, no I/O.

Owns the node/pod model used for GPU placement and the policies ``random``, ``bestfit`` (PROTOCOL.md
items 8-9 of the openb trace) and ``portal`` (fragmentation-aware; the measure is in
``quotas.scheduler.fragmentation``).

Model
    ``Node(name, cpu, mem, gpus, model, max_pods=...)``: capacity in CPU milli, memory MiB, ``gpus`` whole
    GPUs of type ``model``; state ``cpu_free``, ``mem_free``, ``pods_free`` and ``gpu_free`` (free milli
    per GPU, 1000 = a whole free GPU).
    ``Pod(cpu, mem, num_gpu=0, gpu_milli=0, gpu_spec=frozenset())``: ``num_gpu == 1`` with
    ``gpu_milli < 1000`` is a fractional pod that shares one GPU and never spans two; ``num_gpu = n`` with
    ``gpu_milli == 1000`` takes n completely free GPUs on one node (in general: n GPUs of one node with
    ``gpu_milli`` free each). ``gpu_spec`` lists the allowed GPU models (empty = any).

API
    ``policy = make_policy("portal" | "bestfit" | "random", nodes, seed=..., ranks=..., mix=...)``
    ``policy.observe(pod)``            -- tell the policy a pod arrived (portal learns its pod mix online)
    ``placement = policy.choose(nodes, pod)`` -> ``Placement(node, gpus, milli)`` or None (no node fits)
    ``commit(nodes, pod, placement)``  -- apply it (raises ValueError if it does not fit)
    ``release(nodes, pod, placement)`` -- undo it (a pod finished)
    ``fits(node, pod)`` / ``eligible_gpus(node, pod)`` -- the fit rules on their own.
    Change node state only through ``commit``/``release`` (or call ``node.touch()``): the portal policy
    caches per-node scores until the node changes. ``ranks[i]`` breaks ties (lowest wins); default: index.
"""

from __future__ import annotations

import random as _random
from dataclasses import dataclass, field
from typing import NamedTuple

from quotas.scheduler.fragmentation import FULL, PodMix, TypicalPods

DEFAULT_MAX_PODS = 1001
POLICIES = ("random", "bestfit", "portal", "fgd")


@dataclass(frozen=True, slots=True)
class Pod:
    cpu: int
    mem: int
    num_gpu: int = 0
    gpu_milli: int = 0
    gpu_spec: frozenset = field(default_factory=frozenset)

    def __post_init__(self):
        if self.num_gpu < 0 or not 0 <= self.gpu_milli <= FULL or self.cpu < 0 or self.mem < 0:
            raise ValueError(f"bad pod request {self}")
        if not self.gpu_milli and self.num_gpu:  # a GPU count with no milli asks for no GPU
            object.__setattr__(self, "num_gpu", 0)

    @property
    def gpu_request(self) -> int:
        """GPU milli requested in total."""
        return self.num_gpu * self.gpu_milli

    @property
    def fractional(self) -> bool:
        return self.num_gpu == 1 and self.gpu_milli < FULL


class Node:
    __slots__ = ("name", "model", "cpu", "mem", "max_pods", "cpu_free", "mem_free", "pods_free", "gpu_free",
                 "cache")

    def __init__(self, name: str, cpu: int, mem: int, gpus: int, model: str = "", max_pods: int = DEFAULT_MAX_PODS):
        self.name, self.model, self.cpu, self.mem, self.max_pods = name, model, cpu, mem, max_pods
        self.cpu_free, self.mem_free, self.pods_free = cpu, mem, max_pods
        self.gpu_free = [FULL] * gpus
        self.cache: dict = {}

    def touch(self) -> None:
        """Forget cached scores (call after changing the state by hand)."""
        self.cache = {}

    @property
    def gpu_used(self) -> int:
        return FULL * len(self.gpu_free) - sum(self.gpu_free)

    def __repr__(self) -> str:
        return f"Node({self.name!r}, cpu_free={self.cpu_free}, mem_free={self.mem_free}, gpu_free={self.gpu_free})"


class Placement(NamedTuple):
    node: int
    gpus: tuple = ()
    milli: int = 0


def fits(node: Node, pod: Pod) -> bool:
    """CPU, memory, pod count, GPU model and GPUs (fractional on one GPU, whole GPUs on this node)."""
    if pod.cpu > node.cpu_free or pod.mem > node.mem_free or node.pods_free <= 0:
        return False
    if not pod.num_gpu:
        return True
    if pod.gpu_spec and node.model not in pod.gpu_spec:
        return False
    milli = pod.gpu_milli
    if pod.num_gpu == 1:
        return bool(node.gpu_free) and max(node.gpu_free) >= milli
    if milli == FULL:
        return node.gpu_free.count(FULL) >= pod.num_gpu
    return sum(1 for g in node.gpu_free if g >= milli) >= pod.num_gpu


def eligible_gpus(node: Node, pod: Pod) -> list[int]:
    """Indices of the GPUs of ``node`` with room for one slice of ``pod`` (empty for CPU-only pods)."""
    if not pod.num_gpu:
        return []
    return [i for i, g in enumerate(node.gpu_free) if g >= pod.gpu_milli]


def lowest_gpus(node: Node, pod: Pod) -> tuple:
    """The default GPU choice: the lowest-index eligible GPUs."""
    return tuple(eligible_gpus(node, pod)[: pod.num_gpu])


def commit(nodes, pod: Pod, placement: Placement) -> None:
    node = nodes[placement.node]
    if not fits(node, pod) or len(set(placement.gpus)) != pod.num_gpu or placement.milli != pod.gpu_milli * bool(pod.num_gpu):
        raise ValueError(f"{pod} does not fit {node} as {placement}")
    if any(node.gpu_free[g] < pod.gpu_milli for g in placement.gpus):
        raise ValueError(f"{pod} does not fit GPUs {placement.gpus} of {node}")
    node.cpu_free -= pod.cpu
    node.mem_free -= pod.mem
    node.pods_free -= 1
    for g in placement.gpus:
        node.gpu_free[g] -= placement.milli
    node.cache = {}


def release(nodes, pod: Pod, placement: Placement) -> None:
    node = nodes[placement.node]
    node.cpu_free += pod.cpu
    node.mem_free += pod.mem
    node.pods_free += 1
    for g in placement.gpus:
        node.gpu_free[g] += placement.milli
    if node.cpu_free > node.cpu or node.mem_free > node.mem or max(node.gpu_free, default=0) > FULL:
        raise ValueError(f"released more than was committed on {node}")
    node.cache = {}


class RandomPolicy:
    """A uniformly random feasible node; a random eligible GPU for a fractional pod."""

    def __init__(self, seed=None):
        self.rng = _random.Random(seed)

    def observe(self, pod: Pod) -> None:
        pass

    def choose(self, nodes, pod: Pod) -> Placement | None:
        feasible = [i for i, node in enumerate(nodes) if fits(node, pod)]
        if not feasible:
            return None
        index = self.rng.choice(feasible)
        node = nodes[index]
        if pod.fractional:
            return Placement(index, (self.rng.choice(eligible_gpus(node, pod)),), pod.gpu_milli)
        return Placement(index, lowest_gpus(node, pod), pod.gpu_milli if pod.num_gpu else 0)


class BestFitPolicy:
    """Highest int(100 x (1 - weighted leftover CPU and GPU share)); tightest GPU for fractional pods."""

    def __init__(self, nodes, ranks=None):
        self.ranks = list(ranks) if ranks is not None else list(range(len(nodes)))
        self.max_cpu = max((n.cpu for n in nodes), default=1) or 1
        self.max_gpu = FULL * max((len(n.gpu_free) for n in nodes), default=1) or FULL

    def observe(self, pod: Pod) -> None:
        pass

    def choose(self, nodes, pod: Pod) -> Placement | None:
        best, best_key = None, None
        request, max_cpu, max_gpu, ranks = pod.gpu_request, self.max_cpu, self.max_gpu, self.ranks
        for i, node in enumerate(nodes):
            if not fits(node, pod):
                continue
            left = (node.cpu_free - pod.cpu) / max_cpu * 0.5 + (sum(node.gpu_free) - request) / max_gpu * 0.5
            key = (-int((1.0 - left) * 100), ranks[i])
            if best_key is None or key < best_key:
                best, best_key = i, key
        if best is None:
            return None
        node = nodes[best]
        if pod.fractional:
            gpu = min(eligible_gpus(node, pod), key=lambda g: (node.gpu_free[g], g))
            return Placement(best, (gpu,), pod.gpu_milli)
        return Placement(best, lowest_gpus(node, pod), pod.gpu_milli if pod.num_gpu else 0)


def make_policy(name: str, nodes, *, seed=None, ranks=None, mix: PodMix | None = None, learn: bool = True):
    if name == "random":
        return RandomPolicy(seed)
    if name == "bestfit":
        return BestFitPolicy(nodes, ranks)
    if name == "portal":
        from quotas.scheduler.portal_policy import PortalPolicy

        return PortalPolicy(nodes, ranks=ranks, mix=mix, learn=learn)
    if name == "fgd":  # the paper's policy (quantised score, rank tie-break), for comparison
        from quotas.scheduler.portal_policy import PortalPolicy

        return PortalPolicy(nodes, ranks=ranks, mix=mix, learn=mix is None, fgd=True)
    raise ValueError(f"unknown policy {name!r}; expected one of {', '.join(POLICIES)}")


__all__ = ["DEFAULT_MAX_PODS", "FULL", "POLICIES", "BestFitPolicy", "Node", "Placement", "Pod", "PodMix",
           "RandomPolicy", "TypicalPods", "commit", "eligible_gpus", "fits", "make_policy", "release"]
