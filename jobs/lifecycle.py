"""The job state machine (docs/architecture.md "Job lifecycle"). Pure: no Django, no I/O.

queued -> admitted -> starting -> running -> succeeded | failed | cancelled
admitted | starting | running -> preempted -> queued   (automatic re-queue)
queued -> cancelled
A job can also fail or be cancelled before it runs (a launch or clone failure,
a cancel during setup).
"""

from __future__ import annotations

QUEUED = "queued"
ADMITTED = "admitted"
STARTING = "starting"
RUNNING = "running"
SUCCEEDED = "succeeded"
FAILED = "failed"
CANCELLED = "cancelled"
PREEMPTED = "preempted"

STATUSES = (QUEUED, ADMITTED, STARTING, RUNNING, SUCCEEDED, FAILED, CANCELLED, PREEMPTED)
FINAL = frozenset({SUCCEEDED, FAILED, CANCELLED})
HOLDS_GPUS = frozenset({ADMITTED, STARTING, RUNNING})

TRANSITIONS: dict[str, frozenset[str]] = {
    QUEUED: frozenset({ADMITTED, CANCELLED}),
    ADMITTED: frozenset({STARTING, FAILED, CANCELLED, PREEMPTED}),
    STARTING: frozenset({RUNNING, FAILED, CANCELLED, PREEMPTED}),
    RUNNING: frozenset({SUCCEEDED, FAILED, CANCELLED, PREEMPTED}),
    PREEMPTED: frozenset({QUEUED}),
    SUCCEEDED: frozenset(),
    FAILED: frozenset(),
    CANCELLED: frozenset(),
}

# The forward road a job travels; used to fill in steps an observer missed
# (a job that finished between two polls still passed through "running").
_ROAD = (ADMITTED, STARTING, RUNNING)


class IllegalTransition(Exception):
    def __init__(self, current: str, target: str):
        super().__init__(f"A {current} job cannot become {target}.")
        self.current = current
        self.target = target


def check(current: str, target: str) -> str:
    """``target`` if a job in ``current`` may move there; raises IllegalTransition otherwise."""
    if target not in TRANSITIONS.get(current, frozenset()):
        raise IllegalTransition(current, target)
    return target


def path(current: str, target: str) -> list[str]:
    """The statuses a job passes through from ``current`` to ``target``, ``target`` last.

    Fills in skipped forward steps: starting -> succeeded is [running, succeeded].
    Raises IllegalTransition when no legal road exists.
    """
    if target in TRANSITIONS.get(current, frozenset()):
        return [target]
    if current in _ROAD:
        hops = []
        for step in _ROAD[_ROAD.index(current) + 1 :]:
            hops.append(step)
            if target in TRANSITIONS[step]:
                return [*hops, target]
    raise IllegalTransition(current, target)


def is_final(status: str) -> bool:
    return status in FINAL
