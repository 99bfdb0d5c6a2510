"""The scheduler's pure core compiled to C with mypyc (the compiler mypy's own releases are built with).

The core is plain typed Python and stays the source of truth: compiling it changes no decision, only its
speed (a full cycle 1.7-2.5x faster). ``python -m quotas.scheduler.build`` (run by ``make install``)
compiles ``MODULES`` into ``BUILD`` (``.build/scheduler`` at the repository root, never committed) with a
manifest of the sources' hashes. At import, ``quotas.scheduler`` and ``quotas.scheduler.placement`` put that
folder before their own on ``__path__`` (``use``), so the compiled modules load instead of the sources, but
only when the manifest matches the sources exactly: a core edited since the build runs as Python (and says so
in the log) until the next ``make install``; ``PORTAL_COMPILED_SCHEDULER=0`` always runs it as Python.

What compiling asks of the core's code (mypyc compiles classes into C structs): no ``object.__new__`` and no
``__dict__`` (``Occupancy.copy`` and ``Ledger.copy`` copy their fields), no ``functools.cached_property``
(``CycleState``'s lazily made orders are properties over plain fields), written-out ``__init__``s for the types a
cycle makes by the thousand (a dataclass's generated one runs interpreted), and no monkeypatching of a compiled
function or class from outside: tests that switch a protection off that way are marked ``pure_core`` and run
in ``make test``'s second, uncompiled pass.

This module (the loader) and quotas.scheduler.build are never compiled.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import sys
import sysconfig
from pathlib import Path

log = logging.getLogger(__name__)

PACKAGE = Path(__file__).resolve().parent  # quotas/scheduler
ROOT = PACKAGE.parent.parent  # the repository root
BUILD = ROOT / ".build" / "scheduler"
MANIFEST = "manifest.json"
MODULES = (
    "core.py",
    "eta.py",
    "incremental.py",
    "ledger.py",
    "moves.py",
    "preemption.py",
    "room.py",
    "state.py",
    "types.py",
    "placement/fragmentation.py",
    "placement/occupancy.py",
    "placement/policies.py",
)
SWITCH = "PORTAL_COMPILED_SCHEDULER"  # "0": always the Python sources

_state: dict[str, bool] = {}


def source_hashes() -> dict[str, str]:
    return {name: hashlib.sha256((PACKAGE / name).read_bytes()).hexdigest() for name in MODULES}


def python_tag() -> str:
    return f"{sys.implementation.cache_tag} {sysconfig.get_config_var('EXT_SUFFIX')}"


def active() -> bool:
    """Whether this process runs the compiled core: a build whose manifest matches the sources and this Python,
    not switched off. Decided once per process (the first ``use``)."""
    if "active" not in _state:
        _state["active"] = usable()
    return _state["active"]


def usable(*, quiet: bool = False) -> bool:
    """Whether the build in ``BUILD`` may be used now (``active`` decides it once per process); ``quiet``: without
    logging why not."""
    if os.environ.get(SWITCH, "1") == "0":
        return False
    try:
        manifest = json.loads((BUILD / MANIFEST).read_text())
    except (OSError, ValueError):
        return False  # never built here (no compiler, or a checkout without `make install`): the sources run
    if manifest.get("tag") != python_tag():
        if not quiet:
            log.warning("The compiled scheduler core in %s was built for another Python; running the sources.", BUILD)
        return False
    changed = sorted(
        name for name, digest in source_hashes().items() if manifest.get("sources", {}).get(name) != digest
    )
    if changed:
        if not quiet:
            log.warning(
                "The scheduler core changed since it was compiled (%s); running the sources until `make install` "
                "compiles it again.",
                ", ".join(changed),
            )
        return False
    return True


def use(path: list[str], subpackage: str = "") -> None:
    """Called first thing by ``quotas.scheduler`` (and ``.placement``) with their ``__path__``: where the compiled
    build is active, its folder for that package goes first (and the build's shared library on ``sys.path``)."""
    if not active():
        return
    folder = BUILD / "quotas" / "scheduler" / subpackage
    if str(folder) not in path:
        path.insert(0, str(folder))
    if str(BUILD) not in sys.path:
        sys.path.append(str(BUILD))  # the modules' shared library: a top-level module of a unique name
