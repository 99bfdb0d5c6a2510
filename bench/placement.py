"""GPU placement under "workload inflation" (the FGD protocol on the openb trace, PROTOCOL.md).

    python -m bench.placement --pods PODS.csv --nodes NODES.csv --arrived-pct 100 --seeds 42-51 \\
        --policy portal|fragmentation|binpack|spread|bestfit|random|fgd --json OUT.json

Per seed: pods sorted by name and shuffled, then clones drawn with replacement until the next one would
push the arrived GPU request past 1.3 x capacity; nodes get a random tie-break rank; each pod is placed
at once or fails (no queue, nothing departs). After every arrival the used and arrived GPU milli are
recorded as % of capacity; "allocation at X% arrived" is the mean used % over the arrivals whose arrived
% rounds half-to-even to X, and the figure is the mean (sample std) over seeds. ``--arrived-pct`` takes
one value or a list (80,90,100,110,130); ``--seeds`` a range (42-51) or a list. JSON keys:
gpu_alloc_pct_mean, gpu_alloc_pct_std, per_seed -- per percentage ({"100": {...}}) when several are given.
The published baselines (published/fgd_alloc_summary_default.csv next to the pods file) are printed beside.

What is measured is the live placement code, ``quotas.scheduler.placement``: each pod is one worker placed
by ``Occupancy.place`` (the call the scheduling cycle makes) on an occupancy of the trace's nodes, which
track CPU, memory and pod slots as well as GPUs. ``fragmentation``, ``binpack`` and ``spread`` are the
pools' policies; ``portal`` is ``fragmentation`` (its name here before it was the live one). The
fragmentation policy scores against the shapes of the pods arrived so far -- in the portal it is the
workers of the pool's running and pending jobs, the same thing here, where nothing departs and a pod that
does not fit would wait -- refrozen after 16, 32, 64, ... pods rather than at every pod. ``bestfit``,
``random`` and ``fgd`` are the protocol's baselines (``bench.placement_baselines``), choosing nodes on the
same occupancy.
"""

from __future__ import annotations

import argparse
import csv
import json
import multiprocessing
import os
import random
import statistics
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from bench.placement_baselines import BestFitPlacement, FgdPlacement, RandomPlacement
from quotas.scheduler.placement import FULL, Fragmentation, NodeSpec, Occupancy, PodMix, make_policy

LIVE = {"portal": "fragmentation", "fragmentation": "fragmentation", "binpack": "binpack", "spread": "spread"}
POLICIES = (*LIVE, "bestfit", "random", "fgd")
GROWTH = 1.3  # clones are appended up to this multiple of the GPU capacity
MAX_PODS = 1001  # per node (PROTOCOL.md item 1)
FIRST_REFRESH = 16  # the learnt mix is refrozen after 16, 32, 64, ... pods
_DATA: dict = {}


@dataclass(frozen=True, slots=True)
class Pod:
    """One trace pod: CPU milli, memory MiB, ``num_gpu`` whole GPUs (``gpu_milli`` 1000) or one GPU's
    ``gpu_milli``; ``gpu_spec``: the GPU models it may use (empty: any)."""

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
        if self.num_gpu > 1 and self.gpu_milli < FULL:
            raise ValueError(f"{self}: a worker of several partial GPUs is not something the portal places")

    @property
    def gpu_request(self) -> int:
        """GPU milli requested in total."""
        return self.num_gpu * self.gpu_milli

    @property
    def gpus(self) -> float:
        """As the scheduler asks for it: whole GPUs, or a share of one."""
        return self.gpu_milli / FULL if self.num_gpu == 1 else float(self.num_gpu)


def load_nodes(path: Path) -> list[tuple]:
    with open(path, newline="") as f:
        return [
            (r["sn"], int(r["cpu_milli"]), int(r["memory_mib"]), int(r["gpu"]), r["model"]) for r in csv.DictReader(f)
        ]


def load_pods(path: Path) -> list[tuple[str, Pod]]:
    with open(path, newline="") as f:
        rows = [
            (
                r["name"],
                Pod(
                    int(r["cpu_milli"]),
                    int(r["memory_mib"]),
                    int(r["num_gpu"] or 0),
                    int(r["gpu_milli"] or 0),
                    frozenset(m for m in (r.get("gpu_spec") or "").split("|") if m),
                ),
            )
            for r in csv.DictReader(f)
        ]
    return sorted(rows, key=lambda row: row[0])


def parse_seeds(text: str) -> list[int]:
    seeds = []
    for part in text.split(","):
        first, _, last = part.strip().partition("-")
        seeds.extend(range(int(first), int(last) + 1) if last else [int(first)])
    return seeds


def parse_pcts(text: str) -> list[int]:
    return [int(p) for p in text.split(",") if p.strip()]


def round_half_even(numerator: int, denominator: int) -> int:
    """round(numerator / denominator) with ties to even, exactly (no float)."""
    q, r = divmod(numerator, denominator)
    return q + (1 if 2 * r > denominator or (2 * r == denominator and q % 2) else 0)


def arrivals(pods: list[Pod], capacity: int, rng: random.Random) -> list[Pod]:
    order = list(pods)
    rng.shuffle(order)
    total, limit = sum(p.gpu_request for p in order), GROWTH * capacity
    while True:
        clone = rng.choice(pods)
        if total + clone.gpu_request > limit:
            return order
        order.append(clone)
        total += clone.gpu_request


class LearntMix:
    """Feeds the fragmentation policy the shapes of the pods arrived so far (see the module's docstring)."""

    def __init__(self, policy: Fragmentation):
        self.policy, self.mix, self.next = policy, PodMix(coverage=1.0), FIRST_REFRESH

    def observe(self, pod: Pod) -> None:
        self.mix.observe(pod)
        if self.mix.seen >= self.next:
            self.policy.use(self.mix.typical())
            self.next = max(FIRST_REFRESH, 2 * self.mix.seen)


def make_bench_policy(name: str, nodes: list[NodeSpec], pods: list[Pod], *, seed: int, trace_order: list[int]):
    """(policy, learner or None) for the occupancy of ``nodes`` (in rank order)."""
    if name in LIVE:
        policy = make_policy(LIVE[name])
        return policy, LearntMix(policy) if isinstance(policy, Fragmentation) else None
    if name == "random":
        return RandomPlacement(seed, trace_order), None
    if name == "bestfit":
        return BestFitPlacement(nodes), None
    if name == "fgd":  # FGD is given the trace's mix up front
        return FgdPlacement(PodMix.from_pods(pods, 0.95).typical()), None
    raise ValueError(f"unknown policy {name!r}; expected one of {', '.join(POLICIES)}")


def run_seed(seed: int, policy_name: str, pcts: list[int]) -> dict[int, float | None]:
    """Allocation % at each arrived % for one seed."""
    node_rows, pods = _DATA["nodes"], _DATA["pods"]
    rng = random.Random(seed)
    capacity = sum(row[3] for row in node_rows) * FULL
    order = arrivals(pods, capacity, rng)
    ranks = list(range(len(node_rows)))  # ranks[i]: node i's rank, and its index in the occupancy
    rng.shuffle(ranks)
    by_rank = sorted(range(len(node_rows)), key=ranks.__getitem__)
    nodes = [
        NodeSpec(name, gpus, model, cpu, mem, MAX_PODS)
        for name, cpu, mem, gpus, model in (node_rows[i] for i in by_rank)
    ]
    policy, learner = make_bench_policy(policy_name, nodes, pods, seed=rng.getrandbits(64), trace_order=ranks)
    occupancy = Occupancy.from_nodes(nodes, policy)
    sums, counts = dict.fromkeys(pcts, 0.0), dict.fromkeys(pcts, 0)
    used = arrived = 0
    for pod in order:
        arrived += pod.gpu_request
        if learner is not None:
            learner.observe(pod)
        if occupancy.place(1, pod.gpus, cpu=pod.cpu, mem=pod.mem, models=pod.gpu_spec) is not None:
            used += pod.gpu_request
        pct = round_half_even(arrived * 100, capacity)
        if pct in sums:
            sums[pct] += used * 100 / capacity
            counts[pct] += 1
    return {x: (sums[x] / counts[x] if counts[x] else None) for x in pcts}


def _init(nodes, pods) -> None:
    _DATA["nodes"], _DATA["pods"] = nodes, pods


def _run(args) -> dict:
    return run_seed(*args)


def published(pods_path: Path) -> dict[str, dict[int, tuple[float, float]]] | None:
    path = pods_path.parent / "published" / "fgd_alloc_summary_default.csv"
    if not path.is_file():
        return None
    table: dict = {}
    with open(path, newline="") as f:
        for row in csv.DictReader(f):
            for key, value in row.items():
                if key.startswith("gpu_alloc_pct_at_") and key.endswith("pct_arrived_mean"):
                    pct = int(key.removeprefix("gpu_alloc_pct_at_").removesuffix("pct_arrived_mean"))
                    std = row.get(key.replace("_mean", "_std")) or "nan"
                    table.setdefault(row["policy"], {})[pct] = (float(value), float(std))
    return table


def summarise(seeds: list[int], results: list[dict], pcts: list[int]) -> dict:
    out = {}
    for x in pcts:
        per_seed = {str(s): (round(r[x], 4) if r[x] is not None else None) for s, r in zip(seeds, results)}
        values = [v for v in per_seed.values() if v is not None]
        out[str(x)] = {
            "gpu_alloc_pct_mean": round(statistics.fmean(values), 4) if values else None,
            "gpu_alloc_pct_std": round(statistics.stdev(values), 4) if len(values) > 1 else (0.0 if values else None),
            "per_seed": per_seed,
        }
    return out[str(pcts[0])] if len(pcts) == 1 else out


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pods", type=Path, required=True)
    parser.add_argument("--nodes", type=Path, required=True)
    parser.add_argument("--arrived-pct", type=parse_pcts, default=[100])
    parser.add_argument("--seeds", type=parse_seeds, default=parse_seeds("42-51"))
    parser.add_argument("--policy", choices=POLICIES, default="portal")
    parser.add_argument("--json", type=Path)
    parser.add_argument("--workers", type=int, default=min(2, os.cpu_count() or 1), help="processes (default 2)")
    args = parser.parse_args(argv)
    started = time.perf_counter()
    nodes, pods = load_nodes(args.nodes), [pod for _, pod in load_pods(args.pods)]
    jobs = [(seed, args.policy, args.arrived_pct) for seed in args.seeds]
    workers = max(1, min(args.workers, len(jobs)))
    if workers == 1:
        _init(nodes, pods)
        results = [_run(job) for job in jobs]
    else:
        with multiprocessing.get_context("fork").Pool(workers, _init, (nodes, pods)) as pool:
            results = pool.map(_run, jobs, chunksize=1)
    summary = summarise(args.seeds, results, args.arrived_pct)
    wall = time.perf_counter() - started
    report(args, summary, published(args.pods), wall)
    if args.json:
        args.json.write_text(json.dumps(summary, indent=2) + "\n")
    return summary


def measured(policy: str) -> str:
    """Which placement code a figure measures."""
    if policy in LIVE:
        alias = f" ('{policy}' is its name in this benchmark)" if policy != LIVE[policy] else ""
        learnt = "; pod mix learnt from the pods arrived so far" if LIVE[policy] == "fragmentation" else ""
        return (
            f"the live quotas.scheduler placement policy '{LIVE[policy]}'{alias} "
            f"(quotas.scheduler.placement.Occupancy.place{learnt})"
        )
    return (
        f"the protocol baseline '{policy}' (bench.placement_baselines), choosing nodes on the live "
        "quotas.scheduler.placement occupancy and fit rules"
    )


def report(args, summary: dict, baselines, wall: float) -> None:
    multi = len(args.arrived_pct) > 1
    print(
        f"placement: policy={args.policy} seeds={len(args.seeds)} nodes={args.nodes.name} pods={args.pods.name} "
        f"wall={wall:.1f}s"
    )
    print(f"  measures: {measured(args.policy)}")
    for x in args.arrived_pct:
        s = summary[str(x)] if multi else summary
        mean, std = s["gpu_alloc_pct_mean"], s["gpu_alloc_pct_std"]
        figure = f"{mean:.2f} +- {std:.2f}" if mean is not None else "no arrival at this %"
        print(f"  GPU allocated at {x}% arrived: {figure}")
        if baselines is None:
            print("    baseline not found")
            continue
        for name, by_pct in baselines.items():
            if x in by_pct:
                print(f"    published {name:<16} {by_pct[x][0]:6.2f} +- {by_pct[x][1]:.2f}")
            else:
                print(f"    published {name:<16} baseline not found at {x}%")


if __name__ == "__main__":
    main(sys.argv[1:])
