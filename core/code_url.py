"""TODO docstring: moved from jobs.submission."""

from __future__ import annotations
import re


# A git ref that cannot be read as a command-line option or a revision range.
GIT_REF = re.compile(r"^(?!-)(?!.*\.\.)(?!.*//)[A-Za-z0-9._/@+-]{1,200}(?<!\.lock)(?<![./])$")


SCP_LIKE = re.compile(r"^[A-Za-z0-9._-]+@[A-Za-z0-9.-]+:[^\s]+$")  # git@host:team/repo.git


REMOTE_SCHEMES = ("https", "ssh", "git")
