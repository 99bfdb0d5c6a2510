"""The scheduler's pure core: ``schedule(snapshot, now=...) -> Decisions``. No Django, no I/O."""

from quotas.scheduler.core import schedule
from quotas.scheduler.types import (
    BEST_EFFORT_FIFO, BINPACK, FRAGMENTATION, GREEDY, PLACEMENTS, SPREAD, STRICT_FIFO, Admission, Decisions,
    PendingJob, PoolState, Preemption, QuotaState, RunningJob, ServicePolicy, Slot, Snapshot, Waiting,
)

__all__ = [
    "BEST_EFFORT_FIFO", "BINPACK", "FRAGMENTATION", "GREEDY", "PLACEMENTS", "SPREAD", "STRICT_FIFO", "Admission",
    "Decisions", "PendingJob", "PoolState", "Preemption", "QuotaState", "RunningJob", "ServicePolicy", "Slot",
    "Snapshot", "Waiting", "schedule",
]
