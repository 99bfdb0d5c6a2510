"""What the scheduler sees (a snapshot) and what it decides."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Slot:
    """Where one worker runs: a node and GPU indices on it, or one GPU shared by ``fraction``."""

    worker: int
    node: str
    gpus: tuple[int, ...] = ()
    fraction: float | None = None


@dataclass(frozen=True)
class PoolState:
    pool_id: int
    name: str  # e.g. "local/sim", used in messages
    nodes: tuple[str, ...]
    gpus_per_node: int
    shareable: bool
    # (node, gpu index) -> share of that GPU in use (1.0 = the whole GPU)
    used: dict[tuple[str, int], float] = field(default_factory=dict)

    @property
    def total(self) -> int:
        return len(self.nodes) * self.gpus_per_node

    @property
    def free(self) -> float:
        return self.total - sum(self.used.values())


@dataclass(frozen=True)
class PendingJob:
    job_id: int
    pool_id: int
    department: str
    priority: int
    submitted_at: float  # epoch seconds; keeps its place across preemptions
    workers: int
    gpus_per_worker: float


@dataclass(frozen=True)
class Snapshot:
    pools: dict[int, PoolState]
    pending: tuple[PendingJob, ...]


@dataclass(frozen=True)
class Admission:
    job_id: int
    slots: tuple[Slot, ...]


@dataclass(frozen=True)
class Waiting:
    job_id: int
    reason: str  # no_capacity, gang_does_not_fit, lower_in_queue ...
    message: str
    position: int  # 1-based place in its pool's queue


@dataclass
class Decisions:
    admissions: list[Admission] = field(default_factory=list)
    waiting: list[Waiting] = field(default_factory=list)
