"""Strict readers for settings that come from the environment.

Every setting of the portal is read through one of these helpers, so that a
malformed value stops the process at start-up with a message naming the
variable, instead of turning into a silent default somewhere later. A secret
may also be given as ``<NAME>_FILE``: the path of a file holding the value
(Kubernetes and Docker secrets are mounted that way).

Pure module: no Django imports, so it can be used before settings exist.
"""

from __future__ import annotations

import builtins
import os
import re
from collections.abc import Mapping
from pathlib import Path

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off"}


class EnvError(ValueError):
    """A setting in the environment is malformed; the message names it."""


class Env:
    def __init__(self, environ: Mapping[str, str] | None = None):
        self.environ = os.environ if environ is None else environ

    def raw(self, name: str) -> str | None:
        value = self.environ.get(name)
        if value is not None:
            return value
        path = self.environ.get(f"{name}_FILE")
        if path:
            try:
                return Path(path).read_text().strip()
            except OSError as exc:
                raise EnvError(f"{name}_FILE={path!r} cannot be read: {exc.strerror}") from exc
        return None

    def str(self, name: str, default: str | None = None) -> str | None:
        value = self.raw(name)
        if value is None or value == "":
            return default
        return value

    def bool(self, name: builtins.str, default: builtins.bool) -> builtins.bool:
        value = self.str(name)
        if value is None:
            return default
        lowered = value.strip().lower()
        if lowered in _TRUE:
            return True
        if lowered in _FALSE:
            return False
        raise EnvError(f"{name}={value!r} is not a boolean: use one of true/false, 1/0, yes/no, on/off")

    def int(
        self,
        name: builtins.str,
        default: builtins.int,
        *,
        minimum: builtins.int | None = None,
        maximum: builtins.int | None = None,
    ) -> builtins.int:
        value = self.str(name)
        if value is None:
            return default
        try:
            number = int(value.strip())
        except ValueError:
            raise EnvError(f"{name}={value!r} is not a whole number") from None
        if minimum is not None and number < minimum:
            raise EnvError(f"{name}={number} is below the minimum of {minimum}")
        if maximum is not None and number > maximum:
            raise EnvError(f"{name}={number} is above the maximum of {maximum}")
        return number

    def list(self, name: builtins.str, default: builtins.list[builtins.str]) -> builtins.list[builtins.str]:
        value = self.str(name)
        if value is None:
            return list(default)
        items = [item.strip() for item in value.split(",")]
        if any(not item for item in items):
            raise EnvError(f"{name}={value!r} has an empty item: separate values with single commas")
        return items

    def rate(self, name: builtins.str, default: builtins.str) -> builtins.str:
        """A throttle rate such as ``100/min`` (DRF's format)."""
        value = self.str(name) or default
        if not re.fullmatch(r"\d+/(s|sec|second|m|min|minute|h|hour|d|day)", value):
            raise EnvError(
                f"{name}={value!r} is not a rate: write it as <count>/<second|minute|hour|day>, e.g. 100/minute"
            )
        return value

    def url(
        self, name: builtins.str, default: builtins.str | None, *, schemes: tuple[builtins.str, ...]
    ) -> builtins.str | None:
        value = self.str(name, default)
        if value is None:
            return None
        scheme = value.split("://", 1)[0] if "://" in value else ""
        if scheme not in schemes:
            raise EnvError(
                f"{name}={_redact(value)!r} must be a URL starting with one of: "
                + ", ".join(f"{s}://" for s in schemes)
            )
        return value


def _redact(url: str) -> str:
    """Hide a password in a URL before it goes into an error message."""
    return re.sub(r"(://[^:/@]+:)[^@]*@", r"\1***@", url)
