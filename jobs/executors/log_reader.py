"""Reading a job's log at a cost that does not depend on how long its lines are. Pure: a file in, lines out.

A log is a file of bytes that a job may have filled with anything, a 50 MB line with no newline included. Every
read here touches a bounded number of bytes: a line longer than ``line_max`` is shown as its first ``line_max``
bytes and a mark saying how long it was (``… [line cut: 52,428,800 bytes]``); what lies past that is skipped
by looking for its end at most ``scan`` bytes further per read, never by holding it.

- ``forward`` reads from a cursor (a byte offset, and whether it stands inside a cut line): following a log
  and downloading it page by page. It reads at most ``budget`` bytes and returns where the next read starts.
- ``tail`` finds the start of the last N lines by reading backwards, at most ``line_max + scan`` bytes per line:
  a line too long to find its start that way is shown as a mark only (``… [line cut: more than … bytes]``).

Lines are decoded as UTF-8 with replacement. Each line handed out ends with a newline, except the last line of
a log whose job has ended (``final``): nothing more will be written, so an unfinished last line is complete.
"""

from __future__ import annotations

import dataclasses
from typing import BinaryIO

LINE_MAX_BYTES = 16 * 1024  # PORTAL_LOG_LINE_MAX_BYTES' default
SCAN_BYTES = 256 * 1024  # how far past its shown part a long line's end is looked for, per read
FOLLOW_BUDGET = 4 * 1024 * 1024  # the most bytes one read of a follower touches
BLOCK = 64 * 1024


@dataclasses.dataclass(frozen=True)
class Cursor:
    """Where the next forward read starts: a byte offset and, inside a cut line whose head was shown already,
    where that line began (``cut_from`` >= 0), or ``-1 - p`` for a line known only to have begun before byte p.
    Opaque to callers: pass back what a read returned."""

    offset: int = 0
    cut_from: int | None = None


@dataclasses.dataclass(frozen=True)
class LogRead:
    lines: list[str]
    cursor: Cursor
    bytes_read: int = 0  # what the read touched (for people measuring it)


def mark(length: int, how: str = "") -> str:
    """The end of a cut line: ``how`` is "", "more than " (its start was not looked for), " so far", " in all"."""
    if how.startswith(" "):
        return f"… [line cut: {length:,} bytes{how}]\n"
    return f"… [line cut: {how}{length:,} bytes]\n"


def _decode(data: bytes | bytearray) -> str:
    return bytes(data).decode("utf-8", "replace")


def _end_of_cut(cut_from: int, at: int) -> str:
    return mark(at - cut_from, " in all") if cut_from >= 0 else mark(at - (-1 - cut_from), "more than ")


def forward(
    log: BinaryIO,
    cursor: Cursor,
    *,
    end: int,
    final: bool,
    line_max: int = LINE_MAX_BYTES,
    budget: int = FOLLOW_BUDGET,
) -> LogRead:
    """Lines from ``cursor`` up to byte ``end``, reading at most ``budget`` bytes (and at least one line's worth)."""
    budget = max(budget, line_max + 1)
    lines: list[str] = []
    pos, cut_from = cursor.offset, cursor.cut_from
    line_start, head = pos, bytearray()  # the line being read and its first bytes (at most line_max kept)
    fresh = False  # inside a line cut during this read: its head is not handed out yet
    touched = 0
    while pos < end and touched < budget:
        log.seek(pos)
        block = log.read(min(BLOCK, end - pos, budget - touched))
        if not block:
            break
        touched += len(block)
        at = 0
        while at < len(block):
            newline = block.find(b"\n", at)
            if cut_from is not None:  # skipping the rest of a cut line
                if newline < 0:
                    break
                if fresh:
                    lines.append(_decode(head) + mark(pos + newline - cut_from))
                else:
                    lines.append(_end_of_cut(cut_from, pos + newline))
                cut_from, fresh, at = None, False, newline + 1
                line_start, head = pos + at, bytearray()
                continue
            stop = len(block) if newline < 0 else newline
            take = min(stop, at + line_max + 1 - len(head))
            head += block[at:take]
            at = take
            if len(head) > line_max:  # too long: keep its first line_max bytes, look for its end
                del head[line_max:]
                cut_from, fresh = line_start, True
            elif newline >= 0 and at == newline:
                lines.append(_decode(head) + "\n")
                at = newline + 1
                line_start, head = pos + at, bytearray()
        pos += len(block)
    over = pos >= end and final  # nothing more will be written
    if cut_from is not None:
        if fresh:  # its head now; its end (a mark) when a later read finds it
            lines.append(_decode(head) + mark(pos - line_start, "" if over else " so far"))
        elif over:
            lines.append(_end_of_cut(cut_from, pos))
        return LogRead(lines, Cursor(pos, None if over else cut_from), touched)
    if head and over:
        lines.append(_decode(head))
        return LogRead(lines, Cursor(pos), touched)
    return LogRead(lines, Cursor(line_start), touched)  # an unfinished short line is read again next time


def tail(
    log: BinaryIO,
    count: int,
    *,
    end: int,
    final: bool,
    line_max: int = LINE_MAX_BYTES,
    scan: int = SCAN_BYTES,
) -> LogRead:
    """The last ``count`` lines before byte ``end``, and the cursor after them (to follow on from there)."""
    start, touched, headless = _tail_start(log, count, end=end, per_line=line_max + scan)
    cursor = Cursor(start, cut_from=-1 - start if headless else None)
    lines: list[str] = []
    while True:
        read = forward(log, cursor, end=end, final=final, line_max=line_max)
        lines += read.lines
        touched += read.bytes_read
        if len(lines) > count:
            del lines[: len(lines) - count]
        if read.cursor == cursor or read.cursor.offset >= end:
            return LogRead(lines, read.cursor, touched)
        cursor = read.cursor


def _tail_start(log: BinaryIO, count: int, *, end: int, per_line: int) -> tuple[int, int, bool]:
    """Where the last ``count`` lines start, the bytes read to find it, and whether that is inside a line
    whose start lies more than ``per_line`` bytes back (so it was not looked for)."""
    pos, touched, seen, line_end = end, 0, 0, end
    log.seek(max(0, end - 1))
    if end and log.read(1) == b"\n":  # the newline ending the last line is not a line of its own
        pos, line_end = end - 1, end - 1
    while pos > 0:
        size = min(BLOCK, pos)
        log.seek(pos - size)
        block = log.read(size)
        touched += size
        at = len(block)
        while True:
            newline = block.rfind(b"\n", 0, at)
            if newline < 0:
                break
            seen += 1
            if seen >= count:
                return pos - size + newline + 1, touched, False
            line_end, at = pos - size + newline, newline
        pos -= size
        if line_end - pos > per_line:
            return pos, touched, True
    return 0, touched, False
