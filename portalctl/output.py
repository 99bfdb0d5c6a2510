"""What portalctl prints: aligned tables and `label: value` blocks for people, the API's JSON for scripts.

Text a job or a user wrote (logs, names, reasons, messages) reaches the terminal with its control characters
made visible: a job printing ESC [ 2 J, OSC 0 ; title BEL or a bidi override must not clear, retitle or rewrite
the screen of whoever reads its log. ESC and the other C0 controls and DEL show as \\x1b, \\x07, \\x7f; C1
controls and the bidi controls as \\u009b, \\u202e; bytes that are not UTF-8 as \\xff. Logs keep their
newlines and tabs; a carriage return (a progress bar redrawing its line) ends the line instead of going back
over it, and CR LF is one line end. Backslashes are printed as they are. In table cells and one-line
messages newlines and tabs are shown as \\n and \\t too. `portalctl logs --raw` writes the bytes as the
portal sent them.
"""

from __future__ import annotations

import codecs
import json
import re
import sys
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from typing import TextIO

Column = tuple[str, Callable[[dict], object]]

# Never shown as themselves: C0 but newline and tab, DEL, C1, and the bidi controls (Trojan Source).
_BIDI = "\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069"
_HIDDEN_IN_TEXT = re.compile(f"[\x00-\x08\x0b-\x1f\x7f-\x9f{_BIDI}]")
_HIDDEN_IN_LINE = re.compile(f"[\x00-\x1f\x7f-\x9f{_BIDI}]")
_NAMED = {"\n": "\\n", "\t": "\\t", "\r": "\\r"}
# What JSON (ensure_ascii=False) leaves as it is but a terminal would obey; only ever inside JSON strings.
_HIDDEN_IN_JSON = re.compile(f"[\x7f-\x9f{_BIDI}]")


def _shown(match: re.Match) -> str:
    char = match.group()
    code = ord(char)
    return _NAMED.get(char) or (f"\\x{code:02x}" if code < 0x80 else f"\\u{code:04x}")


def visible(text: str) -> str:
    """Text of several lines, safe for a terminal: newlines and tabs kept, CR (LF) a line end, other controls shown."""
    return _HIDDEN_IN_TEXT.sub(_shown, text.replace("\r\n", "\n").replace("\r", "\n"))


def visible_line(text: str) -> str:
    """One line, safe for a terminal and for a table: newlines, tabs and every other control shown."""
    return _HIDDEN_IN_LINE.sub(_shown, text)


def say(message: str, *, file: TextIO | None = None) -> None:
    """print() for a message that carries text from the portal (a job's name, reason, message)."""
    print(visible(message), file=file or sys.stdout)


class LogText:
    """A log arriving in chunks of bytes, as visible() text: UTF-8 and CR LF pairs split across chunks are joined.

    feed() returns what can be shown so far, end() the rest.
    """

    def __init__(self) -> None:
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="backslashreplace")
        self._cr = False  # the last chunk ended with a CR: an LF opening the next one belongs to it

    def feed(self, chunk: bytes, *, final: bool = False) -> str:
        text = self._decoder.decode(chunk, final)
        if self._cr:
            text = "\r" + text
        self._cr = text.endswith("\r") and not final
        if self._cr:
            text = text[:-1]
        return visible(text)

    def end(self) -> str:
        return self.feed(b"", final=True)


def write_log(chunks, *, raw: bool = False, out=None) -> None:
    """A job's log to stdout as it arrives, each chunk flushed (`logs -f` shows lines as the job prints them)."""
    out = out or sys.stdout.buffer
    encoding = sys.stdout.encoding or "utf-8"
    log = LogText()
    for chunk in chunks:
        out.write(chunk if raw else log.feed(chunk).encode(encoding, "backslashreplace"))
        out.flush()
    if not raw:
        out.write(log.end().encode(encoding, "backslashreplace"))
        out.flush()


def print_json(data) -> None:
    print(_HIDDEN_IN_JSON.sub(lambda m: f"\\u{ord(m.group()):04x}", json.dumps(data, indent=2, ensure_ascii=False)))


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
    return visible_line(str(value))


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
