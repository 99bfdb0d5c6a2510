"""Log reads cost the same whatever a line's length (jobs/executors/log_reader.py): counted bytes, no clocks."""

from __future__ import annotations

import io

from jobs.executors import log_reader
from jobs.executors.log_reader import Cursor, forward, tail

MB50 = 50 * 1024 * 1024


class Counting(io.BytesIO):
    """A file that counts the bytes read from it."""

    def __init__(self, data: bytes):
        super().__init__(data)
        self.bytes_read = 0

    def read(self, size=-1):
        data = super().read(size)
        self.bytes_read += len(data)
        return data


def follow_all(data: bytes, *, final=True, **options):
    log, cursor, lines = Counting(data), Cursor(), []
    while True:
        read = forward(log, cursor, end=len(data), final=final, **options)
        lines += read.lines
        if read.cursor == cursor:
            return lines, log.bytes_read
        cursor = read.cursor


def test_a_50_mb_line_is_cut_and_marked_reading_a_bounded_number_of_bytes():
    log = Counting(b"x" * MB50)
    read = tail(log, 100_000, end=MB50, final=True)
    [line] = read.lines
    assert line.startswith("… [line cut: more than ") and line.endswith(" bytes]\n")
    assert log.bytes_read <= 4 * (log_reader.LINE_MAX_BYTES + log_reader.SCAN_BYTES), log.bytes_read


def test_the_lines_around_a_long_line_are_shown_and_the_read_stays_bounded():
    data = b"before\n" + b"x" * MB50 + b"\nafter 1\nafter 2\n"
    log = Counting(data)
    read = tail(log, 1000, end=len(data), final=True)
    assert read.lines[1:] == ["after 1\n", "after 2\n"]
    assert read.lines[0].startswith("… [line cut: more than ")
    assert log.bytes_read < 2 * 1024 * 1024
    assert read.cursor == Cursor(len(data))  # a follower goes on from the end


def test_a_line_over_the_limit_shows_its_head_and_its_length():
    data = b"short\n" + b"y" * 100_000 + b"\nlast"
    lines = tail(io.BytesIO(data), 10, end=len(data), final=True, line_max=1000).lines
    assert lines == ["short\n", "y" * 1000 + "… [line cut: 100,000 bytes]\n", "last"]
    assert follow_all(data, line_max=1000)[0] == lines


def test_following_a_long_line_reads_it_a_budget_at_a_time_and_says_how_long_it_was():
    data = b"y" * 3_000_000 + b"\nnext\n"
    log, cursor, reads = Counting(data), Cursor(), []
    while True:
        before = log.bytes_read
        read = forward(log, cursor, end=len(data), final=True, line_max=100, budget=1_000_000)
        assert log.bytes_read - before <= 1_000_000
        reads.append(read.lines)
        if read.cursor == cursor:
            break
        cursor = read.cursor
    lines = [line for chunk in reads for line in chunk]
    assert lines == [
        "y" * 100 + "… [line cut: 1,000,000 bytes so far]\n",
        "… [line cut: 3,000,000 bytes in all]\n",
        "next\n",
    ]


def test_a_running_job_s_unfinished_line_waits_unless_it_is_already_too_long():
    assert follow_all(b"one\ntw", final=False)[0] == ["one\n"]
    assert follow_all(b"one\ntw", final=True)[0] == ["one\n", "tw"]
    lines, _ = follow_all(b"z" * 5000, final=False, line_max=100)
    assert lines == ["z" * 100 + "… [line cut: 5,000 bytes so far]\n"]


def test_tail_counts_lines_from_the_end_and_reads_only_them():
    data = b"".join(b"line %d\n" % i for i in range(100_000))
    log = Counting(data)
    read = tail(log, 3, end=len(data), final=True)
    assert read.lines == ["line 99997\n", "line 99998\n", "line 99999\n"]
    assert log.bytes_read < 2 * log_reader.BLOCK
    assert tail(io.BytesIO(b""), 5, end=0, final=True).lines == []


def test_utf8_is_decoded_with_replacement_and_short_lines_are_kept_whole():
    data = "héllo\n".encode() + b"\xff\n"
    assert follow_all(data)[0] == ["héllo\n", "\ufffd\n"]
