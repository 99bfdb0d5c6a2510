"""What a job prints cannot take over the terminal of whoever reads it with portalctl (issue 16, item 10).

A job's log may hold escape sequences: OSC 0 retitles the terminal, CSI 2J clears it, CSI 8m hides what
follows, C1 controls do the same in one character, a bidi override reorders a line, a carriage return lets
the next text overwrite the line before it. `portalctl logs`, `logs -f` and every table or message that
carries text from a job show these characters (\\x1b, \\u009b, ...) instead; `--raw` writes the bytes as the
job wrote them. The log tests run a real job (its train.py writes the bytes) and portalctl as a process.
"""

from __future__ import annotations

import json
import re
import subprocess

import pytest

from jobs import running
from jobs.models import Job, JobEvent
from portalctl import output
from tests.jobs.test_job_flow import make_repo
from tests.portalctl.cli_harness import REMOTE, ROOT, finished

HOSTILE = (
    b"epoch 1 loss 0.5\r\n"
    b"\x1b]0;you have been pwned\x07"  # OSC 0: the terminal's title
    b"\x1b[2J\x1b[H"  # clear the screen, cursor home
    b"\x1b[8msecret\x1b[0m "  # hidden text
    b"\xc2\x9b31m "  # U+009B, CSI as one C1 character
    b"\xe2\x80\xaeevil\xe2\x80\xac "  # RIGHT-TO-LEFT OVERRIDE ... POP DIRECTIONAL FORMATTING
    b"del\x7f nul\x00 bell\x07 \xff\xfe\n"  # DEL, NUL, BEL, bytes that are not UTF-8
    b"progress 10%\rprogress 100%\n"  # a carriage return that would overwrite the line
    b"tab\tkept caf\xc3\xa9\n"
)
SHOWN = (
    "epoch 1 loss 0.5\n"
    "\\x1b]0;you have been pwned\\x07"
    "\\x1b[2J\\x1b[H"
    "\\x1b[8msecret\\x1b[0m "
    "\\u009b31m "
    "\\u202eevil\\u202c "
    "del\\x7f nul\\x00 bell\\x07 \\xff\\xfe\n"
    "progress 10%\nprogress 100%\n"
    "tab\tkept caf\u00e9\n"
)
# What a terminal would obey: C0 but newline and tab, DEL, C1 (UTF-8 encoded), and the bidi controls.
OBEYED = re.compile(rb"[\x00-\x08\x0b-\x1f\x7f]|\xc2[\x80-\x9f]|\xe2\x80[\x8e\x8f\xaa-\xae]|\xe2\x81[\xa6-\xa9]")


def shown(data: bytes, *, chunk: int | None = None) -> str:
    log = output.LogText()
    pieces = [data[i : i + chunk] for i in range(0, len(data), chunk)] if chunk else [data]
    return "".join(log.feed(piece) for piece in pieces) + log.end()


def test_a_logs_control_characters_are_shown_not_obeyed():
    assert shown(HOSTILE) == SHOWN
    assert not OBEYED.search(SHOWN.encode())
    assert OBEYED.search(HOSTILE), "the log really holds what a terminal obeys"


@pytest.mark.parametrize("chunk", [1, 2, 3, 7])
def test_chunks_split_anywhere_show_the_same(chunk):
    # UTF-8 characters and CR LF pairs cut in two by the network are joined again, not shown as two things.
    assert shown(HOSTILE, chunk=chunk) == SHOWN
    assert shown(b"a\r", chunk=1) == "a\n" and shown(b"a\r\r\nb", chunk=1) == "a\n\nb"


def test_cells_and_messages_are_one_line_and_json_stays_the_apis_data(capsys):
    hostile = "lost\x1b]0;pwned\x07\nfake line\u009b\u202e\x7f"
    output.table(
        [{"name": "job", "message": hostile}], [("NAME", lambda r: r["name"]), ("MESSAGE", lambda r: r["message"])]
    )
    output.fields([("Message", hostile)])
    output.say(f"job 1 failed: {hostile}")
    output.print_json({"message": hostile})
    printed = capsys.readouterr().out
    assert printed.splitlines()[1] == "job   lost\\x1b]0;pwned\\x07\\nfake line\\u009b\\u202e\\x7f"
    assert printed.splitlines()[2] == "Message:  lost\\x1b]0;pwned\\x07\\nfake line\\u009b\\u202e\\x7f"
    assert "job 1 failed: lost\\x1b]0;pwned\\x07\nfake line\\u009b\\u202e\\x7f" in printed
    assert json.loads(printed[printed.index("{") :]) == {"message": hostile}
    assert not OBEYED.search(printed.encode())


def printed_by_the_job(log: bytes) -> bytes:
    """The log less the portal's own first lines (`[portal] fetching ...`, `[portal] environment ... ready`)."""
    lines = log.splitlines(keepends=True)
    while lines and lines[0].startswith(b"[portal] "):
        lines.pop(0)
    return b"".join(lines)


def run_bytes(cli, *args) -> subprocess.CompletedProcess:
    """portalctl with its stdout as bytes (the harness decodes text, and --raw's bytes are no UTF-8)."""
    return subprocess.run(cli.argv(args), cwd=ROOT, env=cli.env(), capture_output=True, timeout=60)


@pytest.mark.django_db(transaction=True)
def test_logs_and_logs_follow_show_a_jobs_escape_sequences_and_raw_writes_them(world, cli, tmp_path):
    repo = make_repo(tmp_path / "hostile", {"train.py": f"import sys\nsys.stdout.buffer.write({HOSTILE!r})\n"})
    job = cli.json("submit", "--name", "hostile", "--code-url", repo, "--no-tensorboard", "--", "python train.py")
    running.job_launch(job_id=job["id"])
    # The portal serves logs as UTF-8 (bytes that are not become U+FFFD, harmless): what the job wrote, as served.
    served = HOSTILE.decode(errors="replace").encode()
    expected = shown(served).encode()
    assert b"\\x1b]0;you have been pwned\\x07\\x1b[2J" in expected and not OBEYED.search(expected)

    code, out, err = finished(cli.start("logs", job["id"], "-f"))
    assert code == 0, err
    assert printed_by_the_job(out.encode()) == expected
    assert f"job {job['id']} succeeded" in err
    logs = run_bytes(cli, "logs", job["id"])
    assert logs.returncode == 0, logs.stderr
    assert printed_by_the_job(logs.stdout) == expected
    assert not OBEYED.search(logs.stdout)

    assert printed_by_the_job(run_bytes(cli, "logs", job["id"], "--raw").stdout) == served
    assert printed_by_the_job(run_bytes(cli, "logs", job["id"], "-f", "--raw").stdout) == served


@pytest.mark.django_db(transaction=True)
def test_get_shows_job_provided_messages_visibly(world, cli):
    # A Kubernetes termination message is what the job's container wrote: it reaches status_message and events.
    job = cli.json("submit", "--name", "teller", "--code-url", REMOTE, "--", "python train.py")
    message = "OOMKilled\x1b]0;pwned\x07\x1b[2J"
    Job.objects.filter(pk=job["id"]).update(status_message=message)
    JobEvent.objects.filter(job_id=job["id"]).update(message=message)
    shown_message = "OOMKilled\\x1b]0;pwned\\x07\\x1b[2J"

    got = run_bytes(cli, "get", job["id"], "--events")
    assert got.returncode == 0, got.stderr
    assert re.search(rb"^Message: +" + re.escape(shown_message.encode()) + rb"$", got.stdout, re.M), got.stdout
    assert got.stdout.count(shown_message.encode()) >= 2, "the message field and the timeline"
    assert not OBEYED.search(got.stdout)
    cancelled = run_bytes(cli, "cancel", job["id"])
    assert cancelled.returncode == 0, cancelled.stderr
    assert not OBEYED.search(cancelled.stdout + cancelled.stderr)
