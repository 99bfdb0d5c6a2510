"""The scheduler's pure core: ``schedule(snapshot, now=...) -> Decisions``. No Django, no I/O."""

from quotas.scheduler import compiled

compiled.use(__path__)  # the compiled core where it was built for these very sources (quotas.scheduler.compiled)

from quotas.scheduler.core import schedule  # noqa: E402
from quotas.scheduler.types import (  # noqa: E402
    BEST_EFFORT_FIFO,
    BINPACK,
    FRAGMENTATION,
    GREEDY,
    PLACEMENTS,
    SPREAD,
    STRICT_FIFO,
    Admission,
    Decisions,
    PendingJob,
    PoolState,
    Preemption,
    QuotaState,
    RunningJob,
    ServicePolicy,
    Slot,
    Snapshot,
    Waiting,
)

__all__ = [
    "BEST_EFFORT_FIFO",
    "BINPACK",
    "FRAGMENTATION",
    "GREEDY",
    "PLACEMENTS",
    "SPREAD",
    "STRICT_FIFO",
    "Admission",
    "Decisions",
    "PendingJob",
    "PoolState",
    "Preemption",
    "QuotaState",
    "RunningJob",
    "ServicePolicy",
    "Slot",
    "Snapshot",
    "Waiting",
    "schedule",
]
