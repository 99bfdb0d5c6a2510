"""Quota accounting of one pool during one cycle: nominal, borrowing and lending (Kueue's cohort rules).

A department may use its ``nominal`` GPUs at any time. Beyond that it borrows
idle GPUs, at most ``borrowing_limit`` of them, and only what the others do not
use or keep back: a department keeps back the part of its unused nominal that
it does not lend (``nominal - lending_limit``). GPUs no department is promised
are free for anyone to borrow.
"""

from __future__ import annotations

from collections import defaultdict

from quotas.scheduler.types import PoolState, QuotaState

EPSILON = 1e-9


class Ledger:
    def __init__(
        self, pool: PoolState, quotas: list[QuotaState], usage: dict[str, float], fixed: dict[str, float] | None = None
    ):
        self.pool = pool
        self.capacity = float(pool.total)
        self.quota = {q.department: q for q in quotas}
        self.usage: dict[str, float] = defaultdict(float, usage)
        # The part of each department's usage that cannot be preempted: it must fit in the nominal quota, so
        # that whatever the department borrows can always be reclaimed from its preemptible work.
        self.fixed: dict[str, float] = defaultdict(float, fixed or {})
        # Sum of every department's kept-back GPUs, maintained on add/remove so a check costs O(1).
        self.kept_total = sum(self._kept_back(d) for d in set(self.quota) | set(self.usage))

    def copy(self) -> Ledger:
        clone = Ledger(self.pool, [], {})  # then filled with this ledger's state
        clone.pool, clone.capacity, clone.quota, clone.kept_total = (
            self.pool,
            self.capacity,
            self.quota,
            self.kept_total,
        )
        clone.usage, clone.fixed = defaultdict(float, self.usage), defaultdict(float, self.fixed)
        return clone

    def nominal(self, department: str) -> float:
        quota = self.quota.get(department)
        return quota.nominal if quota else 0.0

    def borrowed(self, department: str) -> float:
        return max(0.0, self.usage[department] - self.nominal(department))

    def share(self, department: str) -> float:
        """Used fraction of nominal (plus weighted recent usage): who is furthest below its guarantee goes first."""
        nominal = self.nominal(department)
        used = self.usage[department]
        if self.pool.usage_weight:
            quota = self.quota.get(department)
            used += self.pool.usage_weight * (quota.recent_usage if quota else 0.0)
        if nominal <= 0:
            return float("inf") if used > 0 else 1e9
        return used / nominal

    def fixed_nominal(self, department: str) -> float:
        """What of the nominal non-preemptible work may fill (QuotaState.fixed_nominal)."""
        quota = self.quota.get(department)
        if quota is None:
            return 0.0
        return quota.nominal if quota.fixed_nominal is None else min(quota.fixed_nominal, quota.nominal)

    def within_nominal(self, department: str, gpus: float) -> bool:
        return self.usage[department] + gpus <= self.nominal(department) + EPSILON

    def _kept_back(self, department: str) -> float:
        quota = self.quota.get(department)
        if quota is None:
            return self.usage[department]
        lendable = quota.nominal if quota.lending_limit is None else min(quota.lending_limit, quota.nominal)
        return max(self.usage[department], quota.nominal - lendable)

    def refusal(self, department: str, gpus: float, *, may_borrow: bool = True) -> str | None:
        """None if the department may take ``gpus`` more now, else the reason code (cheap: no message).

        A job that may not be preempted (``may_borrow=False``) must fit in the nominal quota together with
        the department's other work that cannot be preempted; beyond the nominal, the department's
        preemptible work is what borrows, and stays reclaimable.
        """
        # Before the nominal test: while a loan raises the nominal, its GPUs take only preemptible work.
        if not may_borrow and self.fixed[department] + gpus > self.fixed_nominal(department) + EPSILON:
            return "quota_exhausted"
        if self.within_nominal(department, gpus):
            return None
        nominal, after = self.nominal(department), self.usage[department] + gpus
        quota = self.quota.get(department)
        if (
            quota is not None
            and quota.borrowing_limit is not None
            and after - nominal > quota.borrowing_limit + EPSILON
        ):
            return "borrowing_limit"
        if after + self.kept_total - self._kept_back(department) > self.capacity + EPSILON:
            return "quota_exhausted"
        return None

    def check(self, department: str, gpus: float, *, may_borrow: bool = True) -> tuple[str, str] | None:
        """None if the department may take ``gpus`` more now, else (reason, message with the numbers)."""
        reason = self.refusal(department, gpus, may_borrow=may_borrow)
        if reason is None:
            return None
        nominal, used = self.nominal(department), self.usage[department]
        quota = self.quota.get(department)
        fixed_limit = self.fixed_nominal(department)
        if not may_borrow and self.fixed[department] + gpus > fixed_limit + EPSILON:
            loaned = (
                f" ({nominal - fixed_limit:g} of its nominal are lent to it by a quota loan and go back when it ends)"
                if fixed_limit < nominal - EPSILON
                else ""
            )
            return "quota_exhausted", (
                f"{department} runs {self.fixed[department]:g}/{fixed_limit:g} {self.pool.name} GPUs of work that cannot "
                f"be preempted and this job needs {gpus:g} more; a job that cannot be preempted runs only within its "
                f"department's nominal quota{loaned} (borrowed GPUs must stay reclaimable)."
            )
        if reason == "borrowing_limit":
            assert quota is not None and quota.borrowing_limit is not None  # refusal() says so only then
            return "borrowing_limit", (
                f"{department} uses {used:g}/{nominal:g} {self.pool.name} GPUs; this job needs {gpus:g} more, and its "
                f"borrowing limit of {quota.borrowing_limit:g} allows at most {nominal + quota.borrowing_limit:g} in use."
            )
        idle = max(0.0, self.capacity - (self.kept_total - self._kept_back(department)) - used)
        others = {d: self._kept_back(d) for d in set(self.quota) | set(self.usage) if d != department}
        holders = ", ".join(
            f"{d} {v:g}" for d, v in sorted(others.items(), key=lambda kv: (-kv[1], kv[0]))[:5] if v > 0
        )
        borrowed = f" ({used - nominal:g} borrowed)" if used > nominal else ""
        return "quota_exhausted", (
            f"{department} uses {used:g}/{nominal:g} {self.pool.name} GPUs{borrowed}; this job needs {gpus:g} more "
            f"and only {idle:g} idle GPUs can be borrowed" + (f" (others use or keep: {holders})." if holders else ".")
        )

    def add(self, department: str, gpus: float, *, fixed: bool = False) -> None:
        self.kept_total -= self._kept_back(department)
        self.usage[department] += gpus
        self.kept_total += self._kept_back(department)
        if fixed:
            self.fixed[department] += gpus

    def remove(self, department: str, gpus: float, *, fixed: bool = False) -> None:
        self.add(department, -gpus, fixed=fixed)
