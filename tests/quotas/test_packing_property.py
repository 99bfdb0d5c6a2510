"""Work that cannot be preempted is kept together (quotas.scheduler.moves.find_packing), as a property over random
pools of 1- to 4-GPU work (hypothesis): whatever one cycle decides for one new 1- to 4-GPU job that cannot be
preempted,

- it goes to a node that already holds such work whenever one has the free GPUs for it, and evicts nothing;
- where it moves work instead, the work moved is preemptible, all on one node that holds work that cannot be
  preempted, and once it has stopped the job fits on that node while every moved workload fits again elsewhere,
  all at the same time (nothing guaranteed is moved into nowhere);
- it never waits while the pool has room for it and nothing could be moved for it (where no node has room for it,
  it is a guaranteed job like any other: quotas.scheduler.moves.find_moves may clear a node for it).
"""

from hypothesis import event, given, settings
from hypothesis import strategies as st

from quotas.scheduler.placement import Occupancy
from tests.quotas.scheduling import NOW, cycle, pending, pool, quota, running

NODES = 4
work = st.tuples(
    st.integers(0, NODES - 1),  # node
    st.sampled_from([1, 2, 2, 3, 4]),  # GPUs
    st.booleans(),  # preemptible
    st.integers(0, 7200),  # seconds since it started
)


def lay_out(draws, holes):
    """Running work from the draws, each on the lowest free GPUs of its node where it fits (the rest dropped), then
    one preemptible workload filling each node but for its ``holes`` GPUs: a busy pool."""
    free = {f"n{i}": list(range(8)) for i in range(NODES)}
    runs = []
    for job_id, (node, gpus, preemptible, age) in enumerate(draws, start=10):
        node = f"n{node}"
        if len(free[node]) < gpus:
            continue
        taken, free[node] = free[node][:gpus], free[node][gpus:]
        runs.append(running(job_id, "nlp", [taken], node=node, preemptible=preemptible, started=NOW - age))
    for i, hole in enumerate(holes):
        node = f"n{i}"
        if len(free[node]) > hole:
            runs.append(running(100 + i, "nlp", [free[node][hole:]], node=node, started=NOW - 60 * i))
    return runs


@settings(max_examples=300, deadline=None)
@given(
    st.lists(work, min_size=1, max_size=12),
    st.lists(st.sampled_from([0, 0, 1, 2, 8]), min_size=NODES, max_size=NODES),
    st.sampled_from([1, 2, 4]),
)
def test_work_that_cannot_be_preempted_is_kept_together_and_moves_nothing_into_nowhere(draws, holes, gpus):
    runs = lay_out(draws, holes)
    quotas = (quota("vision", 8), quota("nlp", 8 * NODES))  # nlp is within its nominal: its work is guaranteed
    job = pending(1, "vision", gpus=gpus, preemptible=False, priority=1000)
    d = cycle([job], runs, quotas=quotas, pool={"nodes": NODES})
    pinned = {slot.node for r in runs if not r.preemptible for slot in r.slots}
    occupancy = Occupancy(pool(nodes=NODES, running=runs))
    roomy = [n for n in sorted(pinned) if len(occupancy.whole_free[n]) >= gpus]

    if roomy:
        event("room beside such work")
        assert d.preemptions == [] and {s.node for a in d.admissions for s in a.slots} <= pinned
        return
    if not d.preemptions:
        event("placed at once" if d.admissions else "fits nowhere")
        fits = occupancy.fits(1, float(gpus))
        assert (d.admissions != []) == fits  # placed at once wherever it fits; waits only where it fits nowhere
        return
    if not any("goes beside work of that kind" in p.message for p in d.preemptions):
        event("fits on no node: moves as for any guaranteed job")
        assert not occupancy.fits(1, float(gpus))
        return
    event("moved work for it")
    by_id = {r.job_id: r for r in runs}
    victims = [by_id[p.job_id] for p in d.preemptions]
    assert all(p.reason == "move" and p.for_job == 1 and "goes beside" in p.message for p in d.preemptions)
    assert all(v.preemptible for v in victims)
    nodes = {slot.node for v in victims for slot in v.slots}
    assert len(nodes) == 1 and nodes <= pinned
    (node,) = nodes
    for victim in victims:
        occupancy.release(victim.slots)
    assert len(occupancy.whole_free[node]) >= gpus
    slots = occupancy.place(1, float(gpus), prefer=(node,))
    assert slots is not None and slots[0].node == node
    for victim in sorted(victims, key=lambda v: -v.gpus):
        assert occupancy.place(1, victim.gpus) is not None, "a moved workload fits nowhere"
