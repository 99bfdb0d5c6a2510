"""Compile the scheduler's pure core with mypyc: ``python -m quotas.scheduler.build`` (``make install`` runs it).

quotas.scheduler.compiled says what is compiled, where it goes and when it is used. Nothing happens where the
build is up to date, ``PORTAL_COMPILED_SCHEDULER=0`` is set, or mypy or a C compiler is missing (the core then
runs as Python and says so here).
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import sysconfig
import tempfile
from pathlib import Path

from quotas.scheduler.compiled import BUILD, MANIFEST, MODULES, PACKAGE, ROOT, SWITCH, python_tag, source_hashes, usable


def build(out: Path = BUILD) -> None:
    """Compile ``MODULES`` into ``out`` (replacing what is there only once the build succeeded)."""
    from mypyc.build import mypycify  # a build-time dependency (mypy), imported only here
    from setuptools import Distribution

    out.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=out.parent, prefix=".scheduler-build-") as tmp:
        work = Path(tmp)
        config = work / "mypy.ini"
        config.write_text("[mypy]\npython_version = 3.11\n")  # not pyproject's: its Django plugin is not needed here
        target = work / "lib"
        cwd = os.getcwd()
        os.chdir(ROOT)  # mypyc names the modules by their paths from here
        try:
            extensions = mypycify(
                [f"--config-file={config}", *(str(PACKAGE.relative_to(ROOT) / name) for name in MODULES)],
                opt_level="3",
                multi_file=True,
                target_dir=str(work / "c"),
            )
            distribution = Distribution({"name": "portal-scheduler-core", "ext_modules": extensions})
            command = distribution.get_command_obj("build_ext")
            command.build_lib, command.build_temp, command.parallel = str(target), str(work / "temp"), os.cpu_count()
            distribution.run_command("build_ext")
        finally:
            os.chdir(cwd)
        (target / MANIFEST).write_text(
            json.dumps({"tag": python_tag(), "sources": source_hashes()}, indent=1, sort_keys=True)
        )
        old = work / "old"
        if out.exists():
            out.rename(old)
        target.rename(out)


def main() -> None:
    if os.environ.get(SWITCH, "1") == "0":
        print(f"{SWITCH}=0: the scheduler core is not compiled; it runs as Python.")
        return
    if usable(quiet=True):
        (BUILD / MANIFEST).touch()  # for make: newer than the sources it was checked against
        print(f"The compiled scheduler core in {BUILD} is up to date.")
        return
    try:
        import mypyc.build  # noqa: F401  (mypy, a pinned requirement)
    except ImportError:
        print("mypyc is not installed (mypy, in requirements.txt): the scheduler core runs as Python.", file=sys.stderr)
        return
    if shutil.which(str(sysconfig.get_config_var("CC") or "cc").split()[0]) is None:
        print(
            "No C compiler: the scheduler core runs as Python, at about half the speed. Install gcc (Debian: "
            "apt-get install gcc) and run make install again to compile it.",
            file=sys.stderr,
        )
        return
    build()
    print(f"Compiled the scheduler core into {BUILD}.")


if __name__ == "__main__":
    main()
