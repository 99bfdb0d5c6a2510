"""What every command gets: the API client, the output format, and the caller's identity when it needs it."""

from __future__ import annotations

from functools import cached_property

from portalctl.client import Client


class UsageError(Exception):
    """The command line cannot be turned into a request (exit code 2)."""


class Context:
    def __init__(self, client: Client, output: str):
        self.client = client
        self.output = output

    @cached_property
    def _me(self) -> dict:
        return self.client.get("/api/v1/me/")

    def me(self) -> dict:
        return self._me

    def default_department(self) -> str:
        """The caller's department when there is exactly one; otherwise the caller has to choose."""
        slugs = [d["slug"] for d in self.me()["departments"]]
        if len(slugs) == 1:
            return slugs[0]
        if not slugs:
            raise UsageError("you are a member of no department: give --department")
        raise UsageError(f"you are in several departments ({', '.join(slugs)}): give --department")


def parse_pair(text: str, flag: str, separator: str = "=") -> tuple[str, str]:
    key, found, value = text.partition(separator)
    if not found or not key:
        raise UsageError(f"{flag} {text!r}: write it as KEY{separator}VALUE")
    return key, value
