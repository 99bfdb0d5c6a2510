"""The ``portal`` placement policy: least increase of expected GPU fragmentation, then packing tie-breaks.

Owns the choice of node and GPU for ``packing.make_policy("portal", ...)`` (and of the paper's ``fgd``
policy, kept for comparison). The measures and the pod mix are ``quotas.scheduler.fragmentation``.

portal: the pod mix is every shape seen so far (coverage 100%, so rare small slices that fill leftovers
count), learnt online and refreshed at doubling counts -- or a fixed ``mix`` with ``learn=False``. A node's
score is the exact increase of ``TypicalPods.portal`` (FGD's one-pod measure plus the fill-with-copies
measure) caused by the placement; ties go to the node left with less free GPU, then less free CPU, then
the lowest rank. A fractional pod goes on the GPU of that node whose slice increases fragmentation least
(tightest fit, then lowest index, among equals). Whole-GPU pods take the lowest-index free GPUs.
fgd: FGD's measure over the 95% most frequent shapes, its integer sigmoid score, ties by rank.
Scores are cached on each node until ``packing.commit``/``release``/``Node.touch`` changes it.
"""

from __future__ import annotations

import math

from quotas.scheduler.fragmentation import PodMix
from quotas.scheduler.packing import Placement, fits

FIRST_REFRESH = 16  # the learnt mix is refrozen after 16, 32, 64, ... pods


class PortalPolicy:
    def __init__(self, nodes, *, ranks=None, mix: PodMix | None = None, learn: bool = True, fgd: bool = False):
        self.ranks = list(ranks) if ranks is not None else list(range(len(nodes)))
        self.fgd = fgd
        self.mix = mix if mix is not None else PodMix(coverage=0.95 if fgd else 1.0)
        self.learn = learn
        self._refresh()

    def _refresh(self) -> None:
        self.typical = self.mix.typical()
        self._measure = self.typical.fgd if self.fgd else self.typical.portal
        self._next = max(FIRST_REFRESH, 2 * self.mix.seen)
        self._shapes: dict = {}

    def observe(self, pod) -> None:
        if self.learn:
            self.mix.observe(pod)
            if self.mix.seen >= self._next:
                self._refresh()

    def choose(self, nodes, pod) -> Placement | None:
        shape = (pod.cpu, pod.num_gpu, pod.gpu_milli, pod.gpu_spec)
        sid = self._shapes.get(shape)
        if sid is None:  # unique per (frozen mix, shape): node caches never mix two measures
            sid = self._shapes[shape] = (id(self.typical), len(self._shapes))
        best = best_key = None
        ranks = self.ranks
        for i, node in enumerate(nodes):
            if not fits(node, pod):
                continue
            scored = node.cache.get(sid)
            if scored is None:
                scored = node.cache[sid] = self._score(node, pod)
            key = (scored[0], ranks[i])
            if best_key is None or key < best_key:
                best, best_key = i, key
        if best is None:
            return None
        return Placement(best, nodes[best].cache[sid][1], pod.gpu_milli if pod.num_gpu else 0)

    def _score(self, node, pod):
        """(sort key, GPU indices) of placing ``pod`` on ``node``; lower key is better."""
        frag, model, free = self._measure, node.model, node.gpu_free
        cpu_after = node.cpu_free - pod.cpu
        before = frag(model, node.cpu_free, free)
        if pod.fractional:
            options = []
            for g in sorted(set(x for x in free if x >= pod.gpu_milli)):
                index = free.index(g)
                after_free = list(free)
                after_free[index] -= pod.gpu_milli
                options.append((frag(model, cpu_after, after_free), g, index))
            after, _, index = min(options)
            gpus = (index,)
        else:
            gpus = tuple(i for i, g in enumerate(free) if g >= pod.gpu_milli)[: pod.num_gpu] if pod.num_gpu else ()
            after_free = list(free)
            for index in gpus:
                after_free[index] -= pod.gpu_milli
            after = frag(model, cpu_after, after_free)
        delta = after - before
        if self.fgd:
            return (-int(100 / (1 + math.exp(delta / 1000))),), gpus
        return (round(delta, 6), sum(free) - pod.gpu_request, cpu_after), gpus
