"""The scheduler's pure core: ``schedule(snapshot, now=...) -> Decisions``. No Django, no I/O."""

from quotas.scheduler.core import schedule
from quotas.scheduler.types import Admission, Decisions, PendingJob, PoolState, Slot, Snapshot, Waiting

__all__ = ["Admission", "Decisions", "PendingJob", "PoolState", "Slot", "Snapshot", "Waiting", "schedule"]
