"""Making room on nodes for a guaranteed job when plain reclaim cannot: evict and move.

A job within its department's nominal quota must start, but its workers need
whole GPUs on one node (or whole nodes, for gangs of full-node workers), and the
free GPUs may be scattered over nodes that also hold other departments'
guaranteed work. Reclaim alone then frees GPUs in the wrong places. Here we
pick the nodes that are cheapest to clear (fewest GPUs held by work that would
have to go, none of it non-preemptible or too young), evict what is there, and
accept the plan only if every evicted workload that stays guaranteed (its
department within nominal without it) can be placed again elsewhere at once:
such a workload is *moved* (it loses the work since its last checkpoint, and
starts again in the next cycle), a borrowed one is reclaimed.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

from quotas.scheduler.ledger import Ledger
from quotas.scheduler.placement import Occupancy
from quotas.scheduler.types import PendingJob, RunningJob, Slot

NODES_TRIED = 8  # candidate node sets per waiting job and cycle
EXTRA_RECLAIMS = 8  # per worker of the job: borrowers' workloads one plan may reclaim for the workloads it moves
MOVE_DEPTH = 2  # smaller work moved aside for a moved workload, and aside again for that (_make_way)
# Consolidation is a convenience, not a guarantee: it moves only work that loses at most this much (seconds since its
# last declared checkpoint, or since it started where it declares none).
CONSOLIDATION_MAX_LOSS = 1800.0


def find_moves(
    job: PendingJob,
    ledger: Ledger,
    occupancy: Occupancy,
    on_node: dict[str, list[RunningJob]],
    movable: set[int],
    evictable: Sequence[RunningJob] = (),
) -> list[tuple[RunningJob, str]] | None:
    """(victim, "reclaim" | "move") pairs that let ``job`` in with every guaranteed victim placed again, or None.

    ``on_node``: node -> the workloads holding GPUs there; ``movable``: ids of those that may be evicted;
    ``evictable``: those workloads in eviction order, where a moved one that fits nowhere may have room reclaimed
    for it from departments that borrow (EXTRA_RECLAIMS per worker of ``job`` at most: each node cleared for a worker
    may hold a node's worth of guaranteed work to place again).
    """
    if job.gpus_per_worker < 1 or not ledger.within_nominal(job.department, job.gpus):
        return None
    need = int(job.gpus_per_worker)
    # The most whole GPUs free on one node: a guaranteed victim's worker needing more can go nowhere (unless
    # borrowers are reclaimed for it), so nodes held by such workers are tried last, not first. Ordered by the GPUs
    # to evict alone, a pool full of 8-GPU jobs spent every try on nodes whose one job could not move, and the
    # nodes of 1-GPU jobs that could were never tried (ITP cluster 04 on 384 GPUs: 254 violations).
    largest = max((len(free) for free in occupancy.whole_free.values()), default=0)
    options = []  # (stuck victims, GPUs to place again, GPUs to evict, node, victims) for nodes that can be cleared
    for node in occupancy.nodes:
        free = len(occupancy.whole_free[node])
        if free >= need:
            continue  # already usable: the problem is elsewhere (other workers, or quota)
        holders = sorted(
            (r for r in on_node.get(node, ()) if r.job_id in movable), key=lambda r: (r.gpus, -r.started_at)
        )
        victims, gained = _gather(holders, node, free, need)
        if gained >= need:
            guaranteed = [v for v in victims if ledger.borrowed(v.department) <= 1e-9]  # to be placed again
            stuck = sum(1 for v in guaranteed if v.gpus / max(1, len(v.slots)) > largest)  # bigger than any room
            # Reclaiming borrowed work is what a guaranteed job may do; moving guaranteed work is the exception (it
            # must fit again elsewhere): nodes of borrowed work first. Ordered by the GPUs to evict alone, a gang of
            # 8 whole nodes chose nodes of a few guaranteed 1-GPU jobs that the nearly full pool could not place
            # again, over nodes a borrower held whole (ITP 01-05 on 1024 GPUs, seed 2: 969 s waiting).
            options.append((stuck, sum(v.gpus for v in guaranteed), sum(v.gpus for v in victims), node, victims))
    if not options:
        return None
    options.sort(key=lambda option: option[:3])
    nodes_needed = job.workers - sum(1 for node in occupancy.nodes if len(occupancy.whole_free[node]) >= need)
    for start in range(min(NODES_TRIED, len(options))):
        chosen: dict[int, RunningJob] = {}
        for *_, victims in options[start : start + max(1, nodes_needed)]:
            chosen.update((v.job_id, v) for v in victims)
        plan = _feasible(job, ledger, occupancy, list(chosen.values()), evictable, on_node, movable)
        if plan is not None:
            return plan
    return None


def _feasible(
    job: PendingJob,
    ledger: Ledger,
    occupancy: Occupancy,
    victims: list[RunningJob],
    evictable: Sequence[RunningJob] = (),
    on_node: dict[str, list[RunningJob]] | None = None,
    movable: set[int] | None = None,
) -> list[tuple[RunningJob, str]] | None:
    """The plan if ``job`` fits once ``victims`` stop and every guaranteed victim is placed again (on room reclaimed
    from borrowers if need be, or on a node cleared by moving smaller work: ``_make_way``); state restored."""
    victims = list(victims)
    gone = {id(victim) for victim in victims}  # by identity: comparing frozen dataclasses is slow
    for victim in victims:
        occupancy.release(victim.slots)
        ledger.remove(victim.department, victim.gpus)
    placed, taken = [], []  # what to undo: slots placed, (department, GPUs) added
    extra: list[RunningJob] = []  # borrowers reclaimed to make room for a moved victim
    try:
        slots = occupancy.place(job.workers, job.gpus_per_worker)
        if slots is None or ledger.refusal(job.department, job.gpus, may_borrow=job.preemptible) is not None:
            return None
        placed.append(slots)
        ledger.add(job.department, job.gpus, fixed=not job.preemptible)
        taken.append((job.department, job.gpus, not job.preemptible))
        plan = []
        for victim in sorted(victims, key=lambda v: -v.gpus):
            if ledger.borrowed(victim.department) > 1e-9 or not ledger.within_nominal(victim.department, victim.gpus):
                plan.append((victim, "reclaim"))  # its department still borrows: it waits like any borrower
                continue
            workers = len(victim.slots)
            again = occupancy.place(workers, victim.gpus / workers)
            candidates = _borrowing_others(evictable, victim, ledger, gone)
            while again is None and len(extra) < EXTRA_RECLAIMS * job.workers:
                borrower = next(candidates, None)
                if borrower is None or ledger.borrowed(borrower.department) <= 1e-9:
                    break
                occupancy.release(borrower.slots)
                ledger.remove(borrower.department, borrower.gpus)
                victims.append(borrower)  # given back with the others at the end
                gone.add(id(borrower))
                extra.append(borrower)
                plan.append((borrower, "reclaim"))
                again = occupancy.place(workers, victim.gpus / workers)
            if again is None and on_node is not None and movable is not None:
                again = _make_way(victim, occupancy, ledger, on_node, movable, gone, victims, placed, taken, plan)
            if again is None:
                return None
            placed.append(again)
            ledger.add(victim.department, victim.gpus)
            taken.append((victim.department, victim.gpus, False))
            plan.append((victim, "move"))
        return plan
    finally:
        for slots in placed:
            occupancy.release(slots)
        for department, gpus, fixed in taken:
            ledger.remove(department, gpus, fixed=fixed)
        for victim in victims:
            occupancy.retake(victim.slots)
            ledger.add(victim.department, victim.gpus)


def _borrowing_others(
    evictable: Sequence[RunningJob], victim: RunningJob, ledger: Ledger, gone: set[int]
) -> Iterator[RunningJob]:
    """Other departments' evictable workloads while their department borrows, judged lazily (each when reached:
    the reclaims before it change who still borrows)."""
    for run in evictable:
        if run.department != victim.department and ledger.borrowed(run.department) > 1e-9 and id(run) not in gone:
            yield run


def _make_way(
    victim: RunningJob,
    occupancy: Occupancy,
    ledger: Ledger,
    on_node: dict[str, list[RunningJob]],
    movable: set[int],
    gone: set[int],
    victims: list[RunningJob],
    placed: list[list[Slot]],
    taken: list[tuple[str, float, bool]],
    plan: list[tuple[RunningJob, str]],
    depth: int | None = None,
) -> list[Slot] | None:
    """Slots for a moved one-worker ``victim`` that fits nowhere as things stand, on the node where moving the least
    smaller work frees enough whole GPUs; that smaller work is placed again the same way (``depth`` levels). The
    free GPUs of a busy pool are scattered in ones and twos: a 4-GPU job moved off the node an 8-GPU job needs fits
    only where some 1-GPU jobs move aside too. What it evicts and places is added to ``victims``, ``placed`` and
    ``taken`` (``_feasible`` undoes all of it) and to ``plan``; None if no such node, with the plan then dropped."""
    depth = MOVE_DEPTH if depth is None else depth
    if depth <= 0 or len(victim.slots) != 1 or victim.slots[0].fraction:
        return None
    need = len(victim.slots[0].gpus)
    best = None  # (GPUs moved, node, the work moved)
    for node in occupancy.nodes:
        free = len(occupancy.whole_free[node])
        holders = sorted(
            (
                r
                for r in on_node.get(node, ())
                if r.job_id in movable
                and id(r) not in gone
                and len(r.slots) == 1
                and not r.slots[0].fraction
                and r.gpus < need
            ),
            key=lambda r: r.gpus,
        )
        aside, gained = _gather(holders, node, free, need)
        if gained >= need and aside and (best is None or sum(r.gpus for r in aside) < best[0]):
            best = (sum(r.gpus for r in aside), node, aside)
    if best is None:
        return None
    for run in best[2]:
        occupancy.release(run.slots)
        ledger.remove(run.department, run.gpus)
        victims.append(run)  # given back with the others at the end
        gone.add(id(run))
    again = occupancy.place(1, float(need))
    if again is None:
        return None
    for run in sorted(best[2], key=lambda r: -r.gpus):
        moved = occupancy.place(1, run.gpus)
        if moved is None:
            moved = _make_way(run, occupancy, ledger, on_node, movable, gone, victims, placed, taken, plan, depth - 1)
            if moved is None:
                occupancy.release(again)
                return None
        placed.append(moved)
        ledger.add(run.department, run.gpus)
        taken.append((run.department, run.gpus, False))
        plan.append((run, "move"))
    return again


def find_packing(
    job: PendingJob,
    ledger: Ledger,
    occupancy: Occupancy,
    on_node: dict[str, list[RunningJob]],
    movable: set[int],
    pinned: set[str],
    now: float,
) -> list[tuple[RunningJob, str]] | None:
    """Room for a one-worker job that cannot be preempted, on a node already holding such work, by moving preemptible
    work off it: (victim, "reclaim" | "move") pairs, or None where no pinned node can be so cleared enough.

    Work that cannot be preempted blocks its node for every guaranteed gang of whole nodes until it ends. Placed
    wherever a GPU is free, a trickle of 1-GPU jobs of that kind ends up on a node each, and a department within
    its nominal then has its room in ones and twos on nodes nothing may clear (ITP cluster 04 on 384 GPUs: every
    free GPU on four such nodes, one 1-GPU job of that kind on each). Kept together, they block as few nodes as
    their GPUs fill. The node chosen is the one where the least work moves (least unsaved work among equals), and
    every moved workload that stays guaranteed must be placed again at once elsewhere; a borrowed one is reclaimed.
    """
    if job.workers != 1 or job.gpus_per_worker < 1:
        return None
    need = int(job.gpus_per_worker)
    best = None  # (GPUs moved, work lost, node, victims)
    for node in sorted(pinned, key=occupancy.index.__getitem__):  # in pool order: the same answer every run
        free = len(occupancy.whole_free[node])
        if free >= need:
            return None  # it fits on a pinned node as things stand: nothing to move
        holders = sorted(
            (r for r in on_node.get(node, ()) if r.job_id in movable and len(r.slots) == 1 and not r.slots[0].fraction),
            key=lambda r: (r.gpus, r.unsaved(now)),
        )
        victims, gained = _gather(holders, node, free, need)
        if gained >= need:
            cost = (sum(v.gpus for v in victims), sum(v.unsaved(now) * v.gpus for v in victims))
            if best is None or cost < best[:2]:
                best = (*cost, node, victims)
    if best is None:
        return None
    *_, node, victims = best
    for victim in victims:
        occupancy.release(victim.slots)
        ledger.remove(victim.department, victim.gpus)
    placed: list[list[Slot]] = []
    taken: list[tuple[str, float, bool]] = []  # (department, GPUs, fixed) added to the ledger, to undo
    try:
        slots = occupancy.place(1, job.gpus_per_worker, prefer=(node,))
        if slots is None or slots[0].node != node:
            return None
        placed.append(slots)
        ledger.add(job.department, job.gpus, fixed=True)
        taken.append((job.department, job.gpus, True))
        plan = []
        for victim in sorted(victims, key=lambda v: -v.gpus):
            if ledger.borrowed(victim.department) > 1e-9 or not ledger.within_nominal(victim.department, victim.gpus):
                plan.append((victim, "reclaim"))
                continue
            again = occupancy.place(1, victim.gpus)
            if again is None:
                return None
            placed.append(again)
            ledger.add(victim.department, victim.gpus)
            taken.append((victim.department, victim.gpus, False))
            plan.append((victim, "move"))
        return plan
    finally:
        for slots in placed:
            occupancy.release(slots)
        for department, gpus, fixed in taken:
            ledger.remove(department, gpus, fixed=fixed)
        for victim in victims:
            occupancy.retake(victim.slots)
            ledger.add(victim.department, victim.gpus)


def _gather(holders: Sequence[RunningJob], node: str, free: int, need: int) -> tuple[list[RunningJob], int]:
    """The first of ``holders`` (in the order given) whose whole GPUs on ``node``, with its ``free`` ones, make
    ``need``; and the whole GPUs that gives (less than ``need`` where all of them do not suffice)."""
    chosen, gained = [], free
    for run in holders:
        if gained >= need:
            break
        chosen.append(run)
        gained += sum(len(slot.gpus) for slot in run.slots if slot.node == node and not slot.fraction)
    return chosen, gained


def find_consolidation(
    job: PendingJob,
    ledger: Ledger,
    occupancy: Occupancy,
    on_node: dict[str, list[RunningJob]],
    movable: set[int],
    now: float,
) -> list[tuple[RunningJob, str]] | None:
    """(victim, "move") pairs that gather the scattered free GPUs into nodes whole enough for ``job``'s workers, or
    None: the job may start (its quota allows it, enough GPUs are free in the pool) but no node has enough whole GPUs
    free for a worker. Only guaranteed one-worker work moves (its department within nominal without it, so it starts
    again first) that loses at most ``CONSOLIDATION_MAX_LOSS``, only where every moved workload is placed again at
    once on GPUs free now, and from the nodes where the fewest GPUs move (least unsaved work among equals).

    Without it a busy pool's free GPUs sit in ones and twos on many nodes while 8-GPU jobs wait for a node to empty
    by itself (ITP 01-05 on 832 GPUs: cluster 03's 8-GPU jobs above its nominal were three quarters of all queueing,
    with 10-50 GPUs free and no node whole). Run:ai calls this consolidation.
    """
    if job.gpus_per_worker < 1:
        return None
    need = int(job.gpus_per_worker)
    nodes_needed = job.workers - sum(1 for node in occupancy.nodes if len(occupancy.whole_free[node]) >= need)
    if nodes_needed <= 0:
        return None
    options = []  # (GPUs moved, work lost, node, victims)
    guaranteed: dict[str, bool] = {}  # department -> within nominal (nothing in the ledger changes in this loop)
    for node in occupancy.nodes:
        free = len(occupancy.whole_free[node])
        if free >= need:
            continue
        holders, most = [], free  # the work that may move, and the whole GPUs moving all of it would give
        for r in on_node.get(node, ()):
            if r.job_id not in movable or len(r.slots) != 1 or r.slots[0].fraction:
                continue
            if r.unsaved(now) > CONSOLIDATION_MAX_LOSS:
                continue
            within = guaranteed.get(r.department)
            if within is None:
                within = guaranteed[r.department] = ledger.borrowed(r.department) <= 1e-9
            if within:
                holders.append(r)
                most += len(r.slots[0].gpus)
        if most < need:
            continue  # this loop runs for every node of the pool: most nodes stop here, unsorted
        holders.sort(key=lambda r: (r.gpus, r.unsaved(now)))
        victims, gained = _gather(holders, node, free, need)
        if gained >= need:
            cost = sum(v.gpus for v in victims), sum(v.unsaved(now) * v.gpus for v in victims)
            options.append((*cost, occupancy.index[node], victims))
    if len(options) < nodes_needed:
        return None
    options.sort(key=lambda option: option[:3])
    for start in range(min(NODES_TRIED, len(options) - nodes_needed + 1)):
        plan = _gathered(job, occupancy, [v for *_, chosen in options[start : start + nodes_needed] for v in chosen])
        if plan is not None:
            return plan
    return None


def _gathered(job: PendingJob, occupancy: Occupancy, victims: list[RunningJob]) -> list[tuple[RunningJob, str]] | None:
    """The plan if ``job`` fits once ``victims`` stop while every one of them is placed again at once on GPUs free
    now; the occupancy restored."""
    for victim in victims:
        occupancy.release(victim.slots)
    placed: list[list[Slot]] = []
    try:
        slots = occupancy.place(job.workers, job.gpus_per_worker)
        if slots is None:
            return None
        placed.append(slots)
        plan = []
        for victim in sorted(victims, key=lambda v: -v.gpus):
            again = occupancy.place(1, victim.gpus)
            if again is None:
                return None
            placed.append(again)
            plan.append((victim, "move"))
        return plan
    finally:
        for slots in placed:
            occupancy.release(slots)
        for victim in victims:
            occupancy.retake(victim.slots)
