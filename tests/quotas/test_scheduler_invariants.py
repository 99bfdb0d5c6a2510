"""Invariants of the scheduling cycle that must always hold, on random queues and pools (hypothesis)."""

from hypothesis import given, settings
from hypothesis import strategies as st

from tests.quotas.scheduling import admitted, cycle, pending, pool, quota, reasons, running

jobs_strategy = st.lists(
    st.tuples(
        st.sampled_from(["vision", "nlp", "audio"]),
        st.sampled_from([0.25, 0.5, 1, 2, 4, 8]),
        st.integers(1, 3),
        st.sampled_from([100, 500, 1000]),
    ),
    max_size=25,
)
running_strategy = st.lists(
    st.tuples(
        st.sampled_from(["vision", "nlp", "audio"]), st.integers(1, 4), st.booleans(), st.sampled_from([100, 500, 1000])
    ),
    max_size=6,
)


@settings(max_examples=150, deadline=None)
@given(
    jobs=jobs_strategy,
    runs=running_strategy,
    nominals=st.tuples(st.integers(0, 8), st.integers(0, 8), st.integers(0, 8)),
    limits=st.tuples(st.none() | st.integers(0, 8), st.none() | st.integers(0, 8)),
)
def test_capacity_quota_limits_gangs_and_non_preemptibility_always_hold(jobs, runs, nominals, limits):
    # running jobs occupy whole GPUs from the left of a 2x8 pool
    live, next_gpu = [], 0
    for index, (dept, gpus, preemptible, priority) in enumerate(runs):
        if next_gpu + gpus > 16:
            break
        node, first = divmod(next_gpu, 8)
        if first + gpus > 8:
            continue
        live.append(
            running(
                100 + index,
                dept,
                [list(range(first, first + gpus))],
                node=f"n{node}",
                preemptible=preemptible,
                priority=priority,
            )
        )
        next_gpu += gpus
    quotas = (
        quota("vision", nominals[0], borrowing=limits[0]),
        quota("nlp", nominals[1], lending=limits[1]),
        quota("audio", nominals[2]),
    )
    waiting = [
        pending(i + 1, dept, gpus=g if g < 1 else g, workers=w if g >= 1 else 1, priority=p)
        for i, (dept, g, w, p) in enumerate(jobs)
    ]
    d = cycle(waiting, live, quotas=quotas, pool={"nodes": 2, "gpus": 8})
    by_id = {j.job_id: j for j in waiting}
    # gang atomicity: every admitted job has exactly one slot per worker; nobody both admitted and waiting
    for a in d.admissions:
        assert len(a.slots) == by_id[a.job_id].workers
    assert not set(admitted(d)) & set(reasons(d))
    assert len(d.admissions) + len(d.waiting) == len(waiting)
    # capacity: no GPU share above 1 after admissions (preempted jobs still hold theirs until they stop)
    used = dict(pool(nodes=2, gpus=8, running=live).used)
    for a in d.admissions:
        for slot in a.slots:
            for gpu in slot.gpus:
                used[(slot.node, gpu)] = used.get((slot.node, gpu), 0) + (slot.fraction or 1.0)
                assert used[(slot.node, gpu)] <= 1 + 1e-9
            assert slot.fraction is None or len(slot.gpus) == 1
    # never a non-preemptible victim, and victims only for jobs that waited
    preemptible = {r.job_id for r in live if r.preemptible}
    for p in d.preemptions:
        assert p.job_id in preemptible and p.for_job in reasons(d)
    # borrowing limit: vision never goes past nominal + limit through this cycle's admissions
    if limits[0] is not None:
        vision = sum(r.gpus for r in live if r.department == "vision")
        vision_new = sum(by_id[a.job_id].gpus for a in d.admissions if by_id[a.job_id].department == "vision")
        assert vision_new == 0 or vision + vision_new <= nominals[0] + limits[0] + 1e-9


@settings(max_examples=100, deadline=None)
@given(jobs=jobs_strategy)
def test_a_job_within_its_nominal_on_an_idle_pool_of_its_own_is_always_admitted(jobs):
    """Guarantee: with nobody else running, a department's jobs fit up to its nominal."""
    first = [pending(1, "vision", gpus=1, workers=1)]
    d = cycle(
        first + [pending(i + 2, "nlp", gpus=1) for i in range(len(jobs))], quotas=(quota("vision", 4), quota("nlp", 4))
    )
    assert 1 in admitted(d)


@settings(max_examples=150, deadline=None)
@given(
    runs=st.lists(
        st.tuples(st.sampled_from(["vision", "nlp", "audio"]), st.integers(1, 3), st.booleans()), max_size=12
    ),
    nominals=st.tuples(st.integers(1, 6), st.integers(0, 6), st.integers(0, 4)),
    want=st.integers(1, 4),
)
def test_a_guaranteed_job_is_admitted_or_evictions_start_for_it(runs, nominals, want):
    """Guarantee: with nominals that fit the pool, a job within its department's nominal (workers of one GPU)
    never just waits: it starts, or others' borrowed work is being evicted for it."""
    quotas = (quota("vision", nominals[0]), quota("nlp", nominals[1]), quota("audio", nominals[2]))
    nominal = {q.department: q.nominal for q in quotas}
    live, usage, fixed, next_gpu = [], {"vision": 0, "nlp": 0, "audio": 0}, {"vision": 0, "nlp": 0, "audio": 0}, 0
    for index, (dept, gpus, preemptible) in enumerate(runs):
        node, first = divmod(next_gpu, 8)
        if node > 1 or first + gpus > 8:
            continue
        if not preemptible and fixed[dept] + gpus > nominal[dept]:
            continue  # the scheduler never lets work that cannot be preempted past its nominal
        if dept == "vision" and usage["vision"] + gpus + want > nominal["vision"]:
            continue  # keep vision's room for the job
        live.append(
            running(100 + index, dept, [list(range(first, first + gpus))], node=f"n{node}", preemptible=preemptible)
        )
        usage[dept] += gpus
        fixed[dept] += 0 if preemptible else gpus
        next_gpu += gpus
    if usage["vision"] + want > nominal["vision"]:
        return
    d = cycle([pending(1, "vision", gpus=1, workers=want)], live, quotas=quotas, pool={"nodes": 2, "gpus": 8})
    assert admitted(d) == [1] or reasons(d) == {1: "preemption_in_progress"}, (reasons(d), d.waiting)
