"""Making room for a job that does not fit (a cycle's step after admit): waiting for stopping jobs, or evicting.

Owns the choice between waiting for jobs already stopping (kept as a second occupancy and ledger as they
will be once those are gone), evicting (preemption.find_victims: reclaiming borrowed GPUs, lower priority,
long-served work) and moving guaranteed work off nodes (moves.find_moves), with a cheap bound that skips
searches that cannot help; and the eviction itself, kept in step with the cycle's state.
"""

from __future__ import annotations

from collections import defaultdict

from quotas.scheduler.moves import find_consolidation, find_moves
from quotas.scheduler.preemption import find_victims
from quotas.scheduler.state import CycleState
from quotas.scheduler.types import PendingJob, Preemption, RunningJob, Slot


class RoomMaker(CycleState):
    """The part of a cycle that frees GPUs for a job that did not fit: _make_room, and what it keeps in step."""

    def _make_room(self, job: PendingJob, reason: str, message: str) -> tuple[str, str]:
        if self.stopping and self._fits_once_stopped(job):
            # Booked only for a job whose own evictions these are (nominated): several others may count on the
            # same GPUs; the next cycle gives them to the first in line (nominated, guaranteed first) and the others
            # make room then. Booking for every such job made later jobs evict more at once, and the ITP replay had
            # more guarantee violations (75 against 20).
            if job.nominated:
                self._book(job)
            if not self.snapshot.explain:
                return "preemption_in_progress", ""
            if self._stopping_ids[0] != len(self.stopping):  # the list only grows within a cycle
                self._stopping_ids = (len(self.stopping), ", ".join(f"#{r.job_id}" for r in self.stopping))
            ids = self._stopping_ids[1]
            return "preemption_in_progress", f"Waiting for {ids} to stop (grace period); then it starts. {message}"
        victims = None
        if self.searches_left > 0 and self._eviction_could_help(job):
            self.searches_left -= 1
            floor = self.policy.factor * max(job.attained, self.policy.quantum)
            victims = find_victims(job, self.ledger, self.occupancy, self.evictable, self.by_service, floor)
        if (
            not victims
            and self.moves_left > 0
            and job.gpus_per_worker >= 1
            and self.ledger.within_nominal(job.department, job.gpus)
            and self.occupancy.free + self._reclaimable() + 1e-9 >= job.gpus
        ):
            # Guaranteed, and enough GPUs are free or borrowed, but scattered over nodes that hold others'
            # guaranteed work: clear some nodes, moving what is guaranteed elsewhere.
            self.moves_left -= 1
            victims = find_moves(
                job, self.ledger, self.occupancy, self._on_node(), {r.job_id for r in self.evictable}, self.evictable
            )
        consolidating = False
        if not victims and reason == "gang_does_not_fit" and self.moves_left > 0 and job.gpus_per_worker >= 1:
            # Its quota lets it start and enough GPUs are free, but scattered: gather them into whole nodes by
            # moving guaranteed work that fits again at once elsewhere.
            self.moves_left -= 1
            victims = find_consolidation(
                job, self.ledger, self.occupancy, self._on_node(), self._evictable_ids(), self.now
            )
            consolidating = bool(victims)
        if not victims:
            return reason, message
        names = []
        for victim, why in victims:
            self._evict(victim, why, job, consolidating=consolidating)
            names.append(f"#{victim.job_id} ({victim.department}, {why})")
        self._book(job)
        if consolidating:
            return "preemption_in_progress", (
                f"{message} Moving {', '.join(names)} to other free GPUs so that its workers get whole nodes; it "
                "starts when they stop."
                if self.snapshot.explain
                else ""
            )
        return "preemption_in_progress", f"Preempting {', '.join(names)} to make room; it starts when they stop."

    def _book(self, job: PendingJob) -> None:
        """Hold the room ``job`` evicted for (or waits for) until the end of this cycle, so that no later job of the
        cycle takes it: its quota in the ledger, and, where it will run once the stopping jobs are gone, the GPUs
        that are free now. Without this, a job of its own department admitted in the same cycle took the free part
        of that room, the next cycle evicted that job for it again, and so on for ever (a livelock the guarantee
        never got out of). Given back at the end of the cycle (``_unbook``): the next cycle admits the job first, as
        a nominated one, or books again."""
        if not self._fits_once_stopped(job):
            return
        assert self.after_stop is not None and self.after_stop_ledger is not None  # made by _fits_once_stopped
        slots = self.after_stop.place(job.workers, job.gpus_per_worker, prefer=self.pinned if self._pins(job) else ())
        if slots is None:
            return
        self.after_stop_ledger.add(job.department, job.gpus, fixed=not job.preemptible)
        self.ledger.add(job.department, job.gpus, fixed=not job.preemptible)
        held = []
        for slot in slots:
            if slot.fraction:
                continue  # a share of a GPU others hold too: not worth holding
            free = tuple(gpu for gpu in slot.gpus if gpu in self.occupancy.whole_free[slot.node])
            if free:
                held.append(Slot(worker=slot.worker, node=slot.node, gpus=free))
        self.occupancy.retake(held)
        self.booked.append((job, held))
        self.booked_ids.add(job.job_id)

    def _pins(self, job: PendingJob) -> bool:
        """Work that cannot be preempted and leaves part of a node free: it goes where such work is already."""
        return not job.preemptible and 1 <= job.gpus_per_worker < self.pool.gpus_per_node

    def _unbook(self) -> None:
        """Give back the GPUs ``_book`` held (the ledgers and after_stop are the cycle's own; the occupancy may be
        an incremental scheduler's, kept between cycles)."""
        for _, held in reversed(self.booked):
            self.occupancy.release(held)
        self.booked.clear()
        self.booked_ids.clear()

    def _on_node(self) -> dict[str, list[RunningJob]]:
        """node -> the running (not stopping) workloads with a worker there; made once, kept up to date."""
        if self.on_node is None:
            self.on_node = defaultdict(list)
            for run in self.running:
                for node in {slot.node for slot in run.slots}:
                    self.on_node[node].append(run)
        return self.on_node

    def _evict(
        self, victim: RunningJob, why: str, job: PendingJob, *, packing: bool = False, consolidating: bool = False
    ) -> None:
        if consolidating:
            what = (
                f"#{job.job_id} needs whole GPUs on the node this job holds, and the pool's free GPUs are scattered; "
                "this job starts again at once on free GPUs elsewhere, from its last checkpoint"
            )
        elif packing and why == "move":
            what = (
                f"#{job.job_id} cannot be preempted and goes beside work of that kind on the node this job holds, so "
                "that no other node is blocked by it; this job starts again at once on other GPUs, from its last "
                "checkpoint"
            )
        elif why == "reclaim":
            what = f"{victim.department} borrows GPUs that {job.department}'s nominal guarantees"
        elif why == "priority":
            what = f"it has lower priority than #{job.job_id}"
        elif why == "move":
            what = (
                f"#{job.job_id} is within {job.department}'s nominal and needs whole GPUs on the node this job "
                "holds; it starts again at once on other GPUs, from its last checkpoint"
            )
        else:
            what = (
                f"it has had {victim.service(self.now) / 3600:.1f} GPU-hours of service and #{job.job_id} "
                f"{job.attained / 3600:.1f}; borrowed GPUs go to the less served job first"
            )
        self.decisions.preemptions.append(
            Preemption(
                job_id=victim.job_id,
                reason=why,
                for_job=job.job_id,
                message=f"Preempted for job #{job.job_id}: {what}.",
            )
        )
        # made (if they are not yet) from the eviction order before this victim leaves it
        by_service, _ = self.by_service, self.service_gpus
        # by identity: comparing frozen dataclasses field by field made this the slowest step of a cycle
        self._evictable = [r for r in self.evictable if r is not victim]
        self.running = [r for r in self.running if r is not victim]
        if self.on_node is not None:
            for node in {slot.node for slot in victim.slots}:
                self.on_node[node] = [r for r in self.on_node[node] if r is not victim]
        self.evictable_gpus[victim.department] -= victim.gpus
        remaining = [pair for pair in by_service if pair[1] is not victim]
        if len(remaining) < len(by_service):
            self._by_service = remaining
            if victim.service(self.now) >= self.policy.factor * self.policy.quantum:
                self._service_gpus = self.service_gpus - victim.gpus
        self.stopping.append(victim)
        if self.after_stop is not None:
            self.after_stop.release(victim.slots)
            assert self.after_stop_ledger is not None  # made together with after_stop
            self.after_stop_ledger.remove(victim.department, victim.gpus, fixed=not victim.preemptible)

    def _fits_once_stopped(self, job: PendingJob) -> bool:
        """Would ``job`` fit once the stopping jobs are gone? Kept as a second occupancy and ledger, made when
        first asked and then kept in step with admissions and evictions."""
        if self.after_stop is None:
            self.after_stop, self.after_stop_ledger = self.occupancy.copy(), self.ledger.copy()
            for stopping in self.stopping:
                self.after_stop.release(stopping.slots)
                self.after_stop_ledger.remove(stopping.department, stopping.gpus, fixed=not stopping.preemptible)
        assert self.after_stop_ledger is not None  # made together with after_stop
        if job.gpus > self.after_stop.free + 1e-9:
            return False
        if self.after_stop_ledger.refusal(job.department, job.gpus, may_borrow=job.preemptible) is not None:
            return False
        # the same shape asked again with nothing admitted, evicted or booked meanwhile gets the same answer
        key = (job.workers, job.gpus_per_worker, len(self.decisions.admissions), len(self.stopping), len(self.booked))
        if key not in self._once_stopped:
            self._once_stopped[key] = self.after_stop.fits(job.workers, job.gpus_per_worker)
        return self._once_stopped[key]

    def _reclaimable(self) -> float:
        return sum(min(gpus, self.ledger.borrowed(department)) for department, gpus in self.evictable_gpus.items())

    def _eviction_could_help(self, job: PendingJob) -> bool:
        """A cheap upper bound: could evicting every candidate free enough GPUs at all?"""
        gain = (
            self.evictable_gpus[job.department] + self.service_gpus
        )  # own lower-priority work, long-served work (over-estimates)
        if self.ledger.within_nominal(job.department, job.gpus):
            gain += sum(
                gpus
                for department, gpus in self.evictable_gpus.items()
                if department != job.department and self.ledger.borrowed(department) > 0
            )
        return gain > 0 and self.occupancy.free + sum(r.gpus for r in self.stopping) + gain + 1e-9 >= job.gpus
