"""What the scheduler sees (a snapshot of one moment) and what it decides.

Units: GPUs (floats, so that a fraction of a shared GPU counts), seconds since
the epoch for times. Nothing here knows about Django.
"""

from __future__ import annotations

from dataclasses import dataclass, field

STRICT_FIFO = "strict"
BEST_EFFORT_FIFO = "best_effort"
GREEDY = "greedy"  # any job that fits may pass a blocked one (plain backfill, no reservation): a baseline

# Placement policies of a pool (quotas.scheduler.placement.policies says what each does).
BINPACK = "binpack"
SPREAD = "spread"
FRAGMENTATION = "fragmentation"
PLACEMENTS = (BINPACK, SPREAD, FRAGMENTATION)


@dataclass(init=False, unsafe_hash=True)
class Slot:
    """Where one worker runs: a node and GPU indices on it, or one GPU shared by ``fraction``.

    Never changed once made, like every type here; this one and the other decisions (``Admission``,
    ``Preemption``, ``Waiting``) are not ``frozen`` only because a cycle makes thousands of them and a frozen
    dataclass's ``__init__`` is interpreted Python even in the compiled core (quotas.scheduler.compiled), about 7x
    the cost of this written-out one."""

    worker: int
    node: str
    gpus: tuple[int, ...]
    fraction: float | None

    def __init__(self, worker: int, node: str, gpus: tuple[int, ...] = (), fraction: float | None = None) -> None:
        self.worker, self.node, self.gpus, self.fraction = worker, node, gpus, fraction


@dataclass(frozen=True)
class PoolState:
    pool_id: int
    name: str  # e.g. "local/sim", used in messages
    nodes: tuple[str, ...]
    gpus_per_node: int
    shareable: bool
    # (node, gpu index) -> share of that GPU in use (1.0 = the whole GPU)
    used: dict[tuple[str, int], float] = field(default_factory=dict)
    min_runtime_seconds: float = 0  # a workload may not be preempted before it ran this long
    # Fair share weighs recent usage this much: a department's share is
    # (GPUs in use + usage_weight x recent_usage) / nominal. 0 = only what runs now counts.
    usage_weight: float = 0.0
    placement: str = BINPACK  # where workers go: one of PLACEMENTS

    @property
    def total(self) -> int:
        return len(self.nodes) * self.gpus_per_node


@dataclass(frozen=True)
class QuotaState:
    """A department's quota in one pool (Kueue: a ClusterQueue's flavor quota)."""

    department: str
    pool_id: int
    nominal: float
    borrowing_limit: float | None = None  # None: may borrow any idle GPU
    lending_limit: float | None = None  # None: lends all of its unused nominal
    recent_usage: float = 0.0  # GPUs used on average recently, decayed (see PoolState.usage_weight)
    # How much of the nominal work that cannot be preempted may fill; None: all of it. Less while the department
    # borrows nominal by a quota loan (quotas.models.QuotaLoan): what it must give back at the loan's end has to
    # be reclaimable.
    fixed_nominal: float | None = None


@dataclass(frozen=True)
class RunningJob:
    job_id: int
    pool_id: int
    department: str
    priority: int
    preemptible: bool
    gpus: float  # the whole gang
    slots: tuple[Slot, ...]
    started_at: float  # admission time
    deadline: float | None = None  # when its max runtime ends it; None if unbounded
    terminating: bool = False  # already asked to stop (preemption or cancel in its grace period)
    attained: float = 0.0  # GPU-seconds of service in earlier runs (before it was last preempted)
    # It saves a checkpoint this often (seconds from its start), as the job declares; None: unknown,
    # so everything it did in this run is lost if it is preempted.
    checkpoint_every: float | None = None
    # When it likely gives its GPUs back, from how long jobs like it ran (jobs.runtimes); None: at ``deadline``.
    # Only estimates read it ("likely 14:20"); decisions keep the deadline, the latest it can hold them.
    expected_end: float | None = None

    def service(self, now: float) -> float:
        """GPU-seconds of service so far, this run included."""
        return self.attained + self.gpus * max(0.0, now - self.started_at)

    def unsaved(self, now: float) -> float:
        """Seconds of work a preemption now would lose: since its last checkpoint, or since it started."""
        ran = max(0.0, now - self.started_at)
        return ran % self.checkpoint_every if self.checkpoint_every else ran


@dataclass(frozen=True)
class PendingJob:
    job_id: int
    pool_id: int
    department: str
    priority: int
    submitted_at: float  # keeps its place across preemptions
    workers: int
    gpus_per_worker: float
    preemptible: bool = False
    max_runtime: float | None = None
    # Evictions were started for this job in an earlier cycle: it goes first, so that no other job
    # takes the GPUs being freed for it (which would start the evictions over and over).
    nominated: bool = False
    attained: float = 0.0  # GPU-seconds of service in earlier runs (it was preempted)
    # How long it likely runs, from how long jobs like it ran (jobs.runtimes); None: ``max_runtime``. Only
    # estimates read it, like RunningJob.expected_end.
    expected_runtime: float | None = None

    @property
    def gpus(self) -> float:
        return self.workers * self.gpus_per_worker


@dataclass(frozen=True)
class ServicePolicy:
    """Least-attained-service sharing of borrowed GPUs (Tiresias' 2D-LAS, inside quotas).

    A waiting job may evict a preemptible workload of no higher priority that has had at least
    ``factor`` times its own service (and at least ``quantum`` GPU-seconds), has run at least
    ``min_run_seconds`` since it last started, and whose department stays at or above its nominal
    quota without it (or is the waiting job's own department), and, if it declares checkpoints, saved
    one at most ``max_unsaved_seconds`` ago. Within a department, jobs that have
    had ``quantum`` GPU-seconds of service already wait behind fresh ones of the same priority.
    ``enabled=False`` turns both off (priority order, then submit time, and only reclaim and
    priority preemption).
    """

    enabled: bool = True
    quantum: float = 4 * 3600.0
    factor: float = 2.0
    min_run_seconds: float = 1800.0
    # A workload that declares its checkpoints is only evicted for service soon after one, losing at most this.
    max_unsaved_seconds: float = 300.0


@dataclass(frozen=True)
class Snapshot:
    pools: dict[int, PoolState]
    pending: tuple[PendingJob, ...]
    running: tuple[RunningJob, ...] = ()
    quotas: tuple[QuotaState, ...] = ()
    fifo: dict[str, str] = field(default_factory=dict)  # department -> strict | best_effort (default)
    service: ServicePolicy = ServicePolicy()
    explain: bool = True  # False: decisions only, no messages or estimated starts (simulations)


@dataclass(init=False, unsafe_hash=True)
class Admission:  # never changed once made (Slot says why it is not frozen)
    job_id: int
    slots: tuple[Slot, ...]
    borrowed: float  # GPUs of this job beyond its department's nominal

    def __init__(self, job_id: int, slots: tuple[Slot, ...], borrowed: float = 0) -> None:
        self.job_id, self.slots, self.borrowed = job_id, slots, borrowed


@dataclass(init=False, unsafe_hash=True)
class Preemption:  # never changed once made (Slot says why it is not frozen)
    job_id: int
    reason: str  # reclaim | priority | service
    message: str
    for_job: int

    def __init__(self, job_id: int, reason: str, message: str, for_job: int) -> None:
        self.job_id, self.reason, self.message, self.for_job = job_id, reason, message, for_job


@dataclass(init=False, unsafe_hash=True)
class Waiting:  # never changed once made (Slot says why it is not frozen)
    job_id: int
    reason: str  # quota_exhausted, borrowing_limit, no_capacity, gang_does_not_fit, lower_in_queue, preemption_in_progress ...
    message: str
    position: int  # 1-based place in its pool's queue (admission order)
    estimated_start: float | None

    def __init__(
        self, job_id: int, reason: str, message: str, position: int, estimated_start: float | None = None
    ) -> None:
        self.job_id, self.reason, self.message, self.position = job_id, reason, message, position
        self.estimated_start = estimated_start


@dataclass
class Decisions:
    admissions: list[Admission] = field(default_factory=list)
    preemptions: list[Preemption] = field(default_factory=list)
    waiting: list[Waiting] = field(default_factory=list)
