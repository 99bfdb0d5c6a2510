"""How much disk a local job's writable folders hold, measured at a bounded cost. No Django.

Why a measure and not a filesystem with a size: the folders a job writes (its code checkout, output, /tmp,
checkpoint and TensorBoard folders) are plain folders of the data root's filesystem. A size-limited filesystem
would need privileges the portal does not have (a loop device, XFS project quotas) or memory (a tmpfs
``size=`` holds its files in RAM), and RLIMIT_FSIZE caps one file, not a job. So the runner, which lives
outside the sandbox as the portal's user, walks those folders now and then (``DiskWatch``) and fails the job
over PORTAL_JOB_DISK_MAX_BYTES. It counts allocated blocks (``st_blocks``: a sparse file counts what it holds,
``fallocate`` what it reserved), each inode once (hard links), and never follows a link.

The cost is bounded: after a walk that took t seconds the next one waits at least ``spacing`` x t (and at
least ``every`` seconds), so a job with millions of small files makes the measure rarer, never the runner
busier than 1/spacing of a core. A job can write faster than it is measured: it is stopped at the next
measure, so the limit holds to within what it writes in one interval.
"""

from __future__ import annotations

import os
import stat
import time
from collections.abc import Callable, Iterable
from pathlib import Path

EVERY_SECONDS = 5.0
SPACING = 10.0


def disk_usage(folders: Iterable[Path]) -> int:
    """Bytes allocated to the files under ``folders`` (each inode once; links not followed)."""
    seen: set[tuple[int, int]] = set()
    total = 0
    stack = [str(folder) for folder in folders]
    while stack:
        folder = stack.pop()
        try:
            entries = os.scandir(folder)
        except OSError:  # gone, or not readable: nothing the job can use to hide bytes from root
            continue
        with entries:
            for entry in entries:
                try:
                    info = entry.stat(follow_symlinks=False)
                except OSError:
                    continue
                if stat.S_ISDIR(info.st_mode):
                    stack.append(entry.path)
                key = (info.st_dev, info.st_ino)
                if key in seen:
                    continue
                seen.add(key)
                total += info.st_blocks * 512
    return total


def size_text(count: float) -> str:
    """1536 -> '1.5 KiB', 21.3 * 2**30 -> '21.3 GiB'."""
    for unit in ("bytes", "KiB", "MiB", "GiB", "TiB"):
        if count < 1024 or unit == "TiB":
            return f"{count:,.0f} bytes" if unit == "bytes" else f"{count:.1f} {unit}"
        count /= 1024
    raise AssertionError("unreachable")


class DiskWatch:
    """``check()`` in the runner's loop: the message to fail the job with once it holds more than ``limit``."""

    def __init__(
        self,
        folders: Iterable[Path],
        limit: int | None,
        *,
        every: float = EVERY_SECONDS,
        spacing: float = SPACING,
        clock: Callable[[], float] = time.monotonic,
    ):
        self.folders = tuple(folders)
        self.limit = limit
        self.every, self.spacing, self.clock = every, spacing, clock
        self.next_at = clock()
        self.last: int | None = None

    def check(self) -> str | None:
        if self.limit is None or self.clock() < self.next_at:
            return None
        began = self.clock()
        self.last = disk_usage(self.folders)
        took = self.clock() - began
        self.next_at = self.clock() + max(self.every, self.spacing * took)
        if self.last <= self.limit:
            return None
        return (
            f"The job wrote {size_text(self.last)}, over the {size_text(self.limit)} limit "
            f"(PORTAL_JOB_DISK_MAX_BYTES) for its folders (code, output, /tmp, checkpoints, TensorBoard), "
            f"and was stopped. Write less, or keep large data on a storage volume."
        )
