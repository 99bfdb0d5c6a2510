"""Copying an artifact out of a folder that hostile code owns: regular files only, within a size limit.

A job's output folder belongs to the job's uid, and jobs of the same department keep running while the
portal copies: anything in it may be a symbolic link, a hard link to someone else's file, a FIFO, a device,
a file that grows, or a file swapped for a link between any check and the copy. So the tree is walked by
file descriptors, never by path: every directory is opened relative to its parent's descriptor with
O_NOFOLLOW, every file with O_NOFOLLOW | O_NONBLOCK, and the decision is taken on fstat() of the descriptor
actually opened. What is refused is named by its path inside the folder.

No Django here: callers pass the folder, the limit and the target, and turn ``CopyRefused`` into their error.
"""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Callable
from pathlib import Path, PurePosixPath

CHUNK = 1 << 20
MAX_DEPTH = 64  # deeper trees are refused rather than exhausting file descriptors or the stack
DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
# O_NONBLOCK: opening a FIFO for reading must not wait for a writer; it does nothing to regular files.
FILE_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC
KINDS = {
    stat.S_IFIFO: "named pipe (FIFO)",
    stat.S_IFSOCK: "socket",
    stat.S_IFCHR: "character device",
    stat.S_IFBLK: "block device",
    stat.S_IFLNK: "symbolic link",
}


class CopyRefused(ValueError):
    """The artifact cannot be copied safely; the message names the path and says why."""


def gib(size: int) -> str:
    return f"{size / (1 << 30):.2f} GiB"


class _Copy:
    def __init__(self, *, max_bytes: int, before_open: Callable[[str], None] | None):
        self.max_bytes = max_bytes
        self.copied = 0
        self.before_open = before_open

    def too_large(self, size: int, shown: str, *, grew: bool) -> CopyRefused:
        how = f"{shown!r} grew while it was being copied: " if grew else ""
        return CopyRefused(
            f"{how}the artifact is larger than the limit: at least {size} bytes ({gib(size)}), and "
            f"the limit is {self.max_bytes} bytes ({gib(self.max_bytes)}, PORTAL_ARTIFACT_MAX_BYTES)."
        )

    def entry(self, parent_fd: int, name: str, target: Path, shown: str, depth: int) -> None:
        """Copy ``name`` (in the directory ``parent_fd``) to ``target``: a folder walked, or a file copied."""
        try:
            # Looked at before opening, so that no device or socket is ever opened; the decision that
            # counts is taken again on the opened descriptor.
            seen = os.stat(name, dir_fd=parent_fd, follow_symlinks=False)
        except OSError as exc:
            raise CopyRefused(f"{shown!r} could not be read: {exc.strerror}.") from exc
        refuse_special(seen.st_mode, shown)
        if stat.S_ISDIR(seen.st_mode):
            self.folder(parent_fd, name, target, shown, depth)
        else:
            self.file(parent_fd, name, target, shown)

    def folder(self, parent_fd: int, name: str, target: Path, shown: str, depth: int) -> None:
        if depth > MAX_DEPTH:
            raise CopyRefused(f"{shown!r} is more than {MAX_DEPTH} folders deep: flatten the artifact.")
        fd = open_at(parent_fd, name, DIR_FLAGS, shown)
        try:
            target.mkdir(mode=0o755)
            for child in sorted(os.listdir(fd)):
                self.entry(fd, child, target / child, f"{shown}/{child}", depth + 1)
        finally:
            os.close(fd)

    def file(self, parent_fd: int, name: str, target: Path, shown: str) -> None:
        if self.before_open is not None:
            self.before_open(shown)
        fd = open_at(parent_fd, name, FILE_FLAGS, shown)
        try:
            opened = os.fstat(fd)
            refuse_special(opened.st_mode, shown)
            if not stat.S_ISREG(opened.st_mode):
                raise CopyRefused(f"{shown!r} changed into a folder while it was being copied; register it again.")
            # A hard link is the same file under a second name, which may lie outside the output folder
            # (another job's output, a file the job's uid could read on the host). From here the other names
            # cannot be found, and fs.protected_hardlinks may be off, so a file with more than one name is
            # refused, even if both names are inside: the simplest rule that is never wrong.
            if opened.st_nlink != 1:
                raise CopyRefused(
                    f"{shown!r} is a hard link ({opened.st_nlink} names for one file): the artifact "
                    "store copies only files with a single name; copy the file instead of linking it."
                )
            if self.copied + opened.st_size > self.max_bytes:
                raise self.too_large(self.copied + opened.st_size, shown, grew=False)
            self.stream(fd, target, shown)
        finally:
            os.close(fd)

    def stream(self, fd: int, target: Path, shown: str) -> None:
        out = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
        try:
            while chunk := os.read(fd, CHUNK):
                self.copied += len(chunk)
                if self.copied > self.max_bytes:  # counted as read: a file that grows is caught too
                    raise self.too_large(self.copied, shown, grew=True)
                view = memoryview(chunk)
                while view:
                    view = view[os.write(out, view) :]
        except OSError as exc:
            raise CopyRefused(f"{shown!r} could not be copied: {exc.strerror}.") from exc
        finally:
            os.close(out)


def refuse_special(mode: int, shown: str) -> None:
    kind = KINDS.get(stat.S_IFMT(mode))
    if kind == "symbolic link":
        raise CopyRefused(
            f"{shown!r} is a symbolic link: the artifact store copies regular files and folders only; "
            "put the file itself in the output folder."
        )
    if kind is not None:
        raise CopyRefused(
            f"{shown!r} is a {kind}, not a regular file: the artifact store copies regular files and folders only."
        )


def open_at(parent_fd: int | None, name: str, flags: int, shown: str) -> int:
    try:
        return os.open(name, flags, dir_fd=parent_fd)
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENOTDIR, errno.ENXIO):
            # O_NOFOLLOW refused a link (ELOOP, or ENOTDIR with O_DIRECTORY), or the entry is a socket or
            # no longer a folder: say which, from what is there now.
            try:
                now = os.stat(name, dir_fd=parent_fd, follow_symlinks=False)
            except OSError:
                now = None
            if now is not None:
                refuse_special(now.st_mode, shown)
        if exc.errno in (errno.ENOTDIR, errno.ENOENT, errno.ELOOP):
            raise CopyRefused(
                f"{shown!r} changed while it was being copied (it is not what it was a moment "
                "before); register it again once the output folder is left alone."
            ) from exc
        raise CopyRefused(f"{shown!r} could not be read: {exc.strerror}.") from exc


def copy_artifact(
    base: Path, relative: str, target: Path, *, max_bytes: int, before_open: Callable[[str], None] | None = None
) -> int:
    """Copy ``base/relative`` (a file or a folder) to ``target`` (which must not exist); the bytes copied.

    ``base`` itself may not be a symbolic link; each part of ``relative`` is opened relative to the one
    before it, so no link anywhere below ``base`` is followed. ``before_open`` (tests only) is called with
    the shown path just before each file is opened: the moment a swap would have to happen.
    """
    parts = PurePosixPath(relative).parts
    if not parts or any(part in ("", ".", "..", "/") for part in parts):
        raise CopyRefused(f"{relative!r} is not a path inside the folder.")
    copy = _Copy(max_bytes=max_bytes, before_open=before_open)
    fd = open_at(None, str(base), DIR_FLAGS, base.name)
    try:
        for depth, part in enumerate(parts[:-1]):
            shown = "/".join(parts[: depth + 1])
            inner = open_at(fd, part, DIR_FLAGS, shown)
            os.close(fd)
            fd = inner
        copy.entry(fd, parts[-1], target, relative, depth=len(parts) - 1)
    finally:
        os.close(fd)
    return copy.copied
