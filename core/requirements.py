"""What a job may ask its environment builder for: the rules for pip requirement lines.

Owns one check, ``requirement_problems``, used where a job is submitted (jobs.submission) and again by the
local executor on the lines of a repository's own requirements.txt, so that both are held to the same rules:
- a line is a PEP 508 requirement by name (``torch>=2``, ``numpy==2.4.6``, ``pkg[extra]; python_version<'4'``);
- no direct references (``pkg @ https://...``, ``pkg @ file:///...``) and no bare paths or URLs: a build
  from an arbitrary archive runs a stranger's build code against whatever the URL serves next time. A
  ``file://`` reference is allowed only where the cluster lets jobs read code from the portal's disk
  (``allow_local_code``, the trusted single-team setting);
- no installer options (``-r``, ``-c``, ``-e``, ``--index-url``, ``--extra-index-url``, ``--trusted-host``,
  ``--find-links`` ...), except ``--index-url``/``--extra-index-url`` naming an index the cluster allows.
No Django: plain strings in, messages for a person out.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from urllib.parse import urlsplit

from packaging.requirements import InvalidRequirement, Requirement

INDEX_OPTIONS = ("--index-url", "--extra-index-url", "-i")


def requirement_problems(
    lines: Iterable[str],
    *,
    allow_local_files: bool = False,
    allowed_indexes: Iterable[str] = (),
    where: str = "",
) -> list[str]:
    """One message per line that breaks a rule; [] when every line may be installed."""
    allowed = {index.rstrip("/") for index in allowed_indexes}
    problems = []
    for number, raw in enumerate(lines, start=1):
        line = raw.strip()
        label = f"{where}line {number} ({line!r})" if where else f"Item {number} ({line!r})"
        problem = _line_problem(line, allow_local_files=allow_local_files, allowed=allowed)
        if problem:
            problems.append(f"{label} {problem}")
    return problems


def _line_problem(line: str, *, allow_local_files: bool, allowed: set[str]) -> str:
    if line.startswith("-"):
        option, _, value = line.replace("=", " ", 1).partition(" ")
        if option in INDEX_OPTIONS:
            if value.strip().rstrip("/") in allowed:
                return ""
            names = ", ".join(sorted(allowed)) or "none"
            return f"installs from an index this cluster does not allow (allowed indexes: {names})."
        return (
            f"is an installer option ({option}), which is not accepted; list each package by name "
            "(e.g. numpy==2.4.6) in the job's requirements or the repository's requirements.txt."
        )
    try:
        requirement = Requirement(line)
    except InvalidRequirement as exc:
        if "/" in line or "\\" in line or "://" in line:
            return "is a path or URL, which cannot be installed; name the package instead (e.g. numpy==2.4.6)."
        return f"is not a valid pip requirement: {exc}."
    if requirement.url:
        scheme = urlsplit(requirement.url).scheme.lower()
        if scheme == "file" and allow_local_files:
            return ""
        return (
            f"is a direct reference to {requirement.url}, which is not accepted; ask for "
            f"{requirement.name} by name and version from the package index."
        )
    return ""


MAX_REQUIREMENTS = 200


def pip_requirements(
    items: Sequence[str],
    fail: Callable[[str, str], object],
    *,
    field: str = "requirements",
    limit: int = MAX_REQUIREMENTS,
    too_many: str = "; put more in the repository's requirements.txt",
    allow_local_files: bool = False,
    allowed_indexes: tuple[str, ...] = (),
) -> list[str]:
    """Each item a requirement by name (core.requirements' rules), at most ``limit`` of them; problems
    reported with ``fail``."""
    if len(items) > limit:
        fail(field, f"List at most {limit} {field.replace('_', ' ')}{too_many}.")
        return []
    clean = []
    for index, item in enumerate(items):
        text = item.strip()
        problems = requirement_problems([text], allow_local_files=allow_local_files, allowed_indexes=allowed_indexes)
        if problems:
            fail(field, problems[0].replace("Item 1 ", f"Item {index + 1} ", 1))
            continue
        clean.append(text)
    return clean
