"""What portalctl prints: aligned tables and `label: value` blocks for people, the API's JSON for scripts."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Sequence
from datetime import UTC, datetime

Column = tuple[str, Callable[[dict], object]]


def print_json(data) -> None:
    print(json.dumps(data, indent=2, ensure_ascii=False))


def table(rows: Sequence[dict], columns: Sequence[Column], *, empty: str = "Nothing to show.") -> None:
    if not rows:
        print(empty, file=sys.stderr)
        return
    cells = [[header for header, _ in columns]] + [[text(get(row)) for _, get in columns] for row in rows]
    widths = [max(len(line[i]) for line in cells) for i in range(len(columns))]
    for line in cells:
        print("  ".join(cell.ljust(width) for cell, width in zip(line, widths, strict=True)).rstrip())


def fields(pairs: Sequence[tuple[str, object]]) -> None:
    """`Label:  value` lines, aligned; pairs whose value is None are left out."""
    shown = [(label, text(value)) for label, value in pairs if value is not None]
    width = max((len(label) for label, _ in shown), default=0) + 1
    for label, value in shown:
        print(f"{label + ':':<{width}}  {value}")


def text(value) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def when(iso: str | None) -> str | None:
    """An API time (ISO 8601 UTC) as `2025-06-01 12:00:03 UTC`."""
    if not iso:
        return None
    moment = _parse(iso)
    return moment.strftime("%Y-%m-%d %H:%M:%S UTC") if moment else iso


def age(iso: str | None, *, now: datetime | None = None) -> str:
    """How long ago, the way kubectl shows it: 45s, 12m, 3h, 5d."""
    moment = _parse(iso) if iso else None
    if moment is None:
        return "-"
    seconds = max(0, int(((now or datetime.now(UTC)) - moment).total_seconds()))
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{seconds // size}{unit}"
    return f"{seconds}s"


def _parse(iso: str) -> datetime | None:
    try:
        moment = datetime.fromisoformat(iso.replace("Z", "+00:00"))
    except ValueError:
        return None
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


def error_lines(errors, prefix: str = "") -> list[str]:
    """The API's error body as `field: message` lines, nested fields as `mounts[0].path`."""
    if isinstance(errors, dict):
        lines = []
        for key, value in errors.items():
            name = "" if key in ("detail", "non_field_errors") else key
            lines += error_lines(value, f"{prefix}.{name}" if prefix and name else prefix or name)
        return lines
    if isinstance(errors, list):
        if all(isinstance(item, str) for item in errors):
            return [f"{prefix}: {item}" if prefix else item for item in errors]
        lines = []
        for index, item in enumerate(errors):
            lines += error_lines(item, f"{prefix}[{index}]")
        return lines
    return [f"{prefix}: {errors}" if prefix else str(errors)]
