"""Where portalctl finds the portal and its token: flags, then PORTAL_URL / PORTAL_TOKEN, then the config file.

The file is TOML (`url = "..."`, `token = "..."`) at $PORTALCTL_CONFIG, else
$XDG_CONFIG_HOME/portalctl/config.toml (~/.config/portalctl/config.toml). It holds a secret, so it is
written with mode 0600 in a 0700 folder.
"""

from __future__ import annotations

import json
import os
import tomllib
from dataclasses import dataclass
from pathlib import Path


class ConfigError(Exception):
    """The configuration is missing or unreadable; the message says what to do."""


@dataclass(frozen=True)
class Settings:
    url: str
    token: str


def config_path() -> Path:
    if os.environ.get("PORTALCTL_CONFIG"):
        return Path(os.environ["PORTALCTL_CONFIG"]).expanduser()
    base = os.environ.get("XDG_CONFIG_HOME") or Path.home() / ".config"
    return Path(base) / "portalctl" / "config.toml"


def read_file(path: Path | None = None) -> dict:
    path = path or config_path()
    try:
        with open(path, "rb") as file:
            data = tomllib.load(file)
    except FileNotFoundError:
        return {}
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise ConfigError(f"cannot read the config file {path}: {exc}") from exc
    return {key: value for key, value in data.items() if key in ("url", "token") and isinstance(value, str)}


def write_file(url: str, token: str, path: Path | None = None) -> Path:
    """Store url and token, readable by the owner only (also when the file existed with looser bits)."""
    path = path or config_path()
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    # JSON string escapes are valid TOML basic-string escapes, and tomllib reads the file back.
    text = f"url = {json.dumps(url)}\ntoken = {json.dumps(token)}\n"
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(descriptor, "w") as file:
        os.fchmod(file.fileno(), 0o600)
        file.write(text)
    return path


def normalize_url(url: str) -> str:
    """The portal's base URL, also when someone pastes the API root."""
    url = url.strip().rstrip("/")
    for suffix in ("/api/v1", "/api"):
        url = url.removesuffix(suffix)
    return url


def resolve(*, url: str | None = None, token: str | None = None, need_token: bool = True) -> Settings:
    """Flags win over the environment, which wins over the config file."""
    stored = read_file() if not (url and token) else {}
    url = url or os.environ.get("PORTAL_URL") or stored.get("url")
    token = token or os.environ.get("PORTAL_TOKEN") or stored.get("token")
    if not url:
        raise ConfigError(
            "no portal URL: give --url, set PORTAL_URL, or run `portalctl login --url URL --username NAME`"
        )
    if need_token and not token:
        raise ConfigError("no API token: give --token, set PORTAL_TOKEN, or run `portalctl login`")
    return Settings(url=normalize_url(url), token=token or "")
