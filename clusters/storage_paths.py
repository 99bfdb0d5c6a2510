"""Which host directories a local storage volume may point at.

Jobs get a local volume's directory mounted read-write (or read-only) into their sandbox, so a volume must
not hand them the portal itself (its data root, its checkout, its Python), nor the host's system
directories. Paths are compared after resolving symlinks on both sides, and a volume is refused when it
is one of those directories, lies inside one, or contains one (``/work`` holds a checkout at /work/main).

Plain Python without Django, so that an executor can repeat the check when it mounts a volume (a symlink
can be changed after the volume was saved).
"""

from __future__ import annotations

import glob
import os
from collections.abc import Sequence
from dataclasses import dataclass

# The host's own directories; /lib* is expanded on the host (lib32, lib64, libx32 ...).
SYSTEM_DIRECTORIES = (
    "/",
    "/etc",
    "/proc",
    "/sys",
    "/dev",
    "/usr",
    "/bin",
    "/sbin",
    "/lib",
    "/lib32",
    "/lib64",
    "/libx32",
    "/boot",
    "/root",
    "/run",
    "/var/run",
    "/var/lib/postgresql",
    "/var/lib/redis",
    "/var/lib/docker",
    "/var/lib/containerd",
    "/var/lib/kubelet",
)


@dataclass(frozen=True)
class Protected:
    """A directory no volume may be, lie in or contain; ``what`` names it in the message."""

    path: str
    what: str
    system: bool = False


def system_directories() -> list[Protected]:
    found = set(SYSTEM_DIRECTORIES) | {path for path in glob.glob("/lib*") if os.path.isdir(path)}
    return [Protected(path, "a system directory", system=True) for path in sorted(found)]


def plain_form(path: str) -> str:
    """The path without '.', empty parts or a trailing '/' ("/data//x/" -> "/data/x")."""
    parts = [part for part in path.split("/") if part not in ("", ".")]
    return "/" + "/".join(parts)


def local_path_problems(path: str, *, protected: Sequence[Protected], allowed_inside: Sequence[str] = ()) -> list[str]:
    """Every reason ``path`` cannot be a local volume, as messages for the person who typed it ([] = fine).

    ``allowed_inside``: directories whose sub-directories are fine even though a protected directory
    contains them (the portal's own storage area under its data root). System directories stay refused.
    """
    if not path:
        return ["Local storage needs the absolute path of a directory on the cluster's hosts, e.g. /data/vision."]
    if not _printable(path):
        return ["Give a path of printable characters (no control characters), e.g. /data/vision."]
    if not path.startswith("/") or ".." in path.split("/"):
        return ["Give an absolute path without '..', e.g. /data/vision."]
    if plain_form(path) != path:
        return [f"Write the path without '.', '//' or a trailing '/': {plain_form(path)}."]
    real = os.path.realpath(path)
    forms = {path, real}
    exempt = any(_inside(real, os.path.realpath(area)) for area in allowed_inside)
    shown = path if real == path else f"{path} (which is {real})"
    relations = [
        (_relation(forms, {item.path, os.path.realpath(item.path)}), index, item)
        for index, item in enumerate(protected)
        if item.system or not exempt
    ]
    # One reason is enough, the closest: being a protected directory, then lying in one, then holding one.
    found = min((r for r in relations if r[0] is not None), default=None, key=lambda r: (r[0], r[1]))
    problems = []
    if found is not None:
        relation, _, item = found
        problems.append(
            [
                f"{shown} is {item.what}; jobs may not mount it. Choose a directory made for the data.",
                f"{shown} lies inside {item.what} ({item.path}); jobs may not mount it. Choose a directory outside it.",
                f"{shown} contains {item.what} ({item.path}); jobs would see it. Choose a directory that holds only the data.",
            ][relation]
        )
    if not problems:
        if not os.path.exists(real):
            problems.append(
                f"There is no directory {path} on this host; create it first "
                "(the portal does not create storage directories)."
            )
        elif not os.path.isdir(real):
            problems.append(f"{path} is a file, not a directory.")
    return problems


def _printable(path: str) -> bool:
    try:
        os.fsencode(path)  # a lone surrogate from JSON cannot name a file
    except UnicodeEncodeError:
        return False
    return path.isprintable()


def _relation(forms: set[str], roots: set[str]) -> int | None:
    """0: one of the roots, 1: inside one, 2: contains one, None: apart."""
    if forms & roots:
        return 0
    if any(_inside(f, root) for f in forms for root in roots):
        return 1
    if any(_inside(root, f) for f in forms for root in roots):
        return 2
    return None


def _inside(path: str, root: str) -> bool:
    """``path`` is below ``root`` (not equal to it); nothing counts as inside "/", which is refused only as itself."""
    return root != "/" and path.startswith(root + "/")
