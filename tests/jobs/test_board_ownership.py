"""A TensorBoard's port taken by another process is never proxied to (issue 14, item 5).

The attack: a job kills another department's TensorBoard, binds its port and serves its own HTML, which
the portal's authenticated proxy would show to that department on the portal's origin. Here the impostor
is a real HTTP server in a subprocess answering "<h1>pwned</h1>" on the board's port; the board is a real
`tensorboard` started through the API. The listener check itself (clusters/listeners.py) is tried on
real processes too.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time

import pytest
from django.utils.html import escape

from clusters import listeners, local_procs
from tensorboards import services as boards
from tensorboards.models import TensorBoard
from tests.jobs.test_tensorboard import fetch, poll, portal, submit_with_events, wait_running  # noqa: F401 - fixture

PWNED = b"<h1>pwned</h1>"
IMPOSTOR = """
import http.server, sys

class Pwned(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_GET(self):
        body = sys.argv[3].encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json" if body.startswith(b"{") else "text/html")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_POST = do_GET

    def log_message(self, *args):
        pass

http.server.HTTPServer((sys.argv[1], int(sys.argv[2])), Pwned).serve_forever()
"""
PARENT = """
import subprocess, sys
subprocess.run([sys.executable, "-c", sys.argv[1], "127.0.0.1", *sys.argv[2:]])
"""


@pytest.fixture
def impostors():
    """``on(port)`` starts an HTTP server on 127.0.0.1:port answering ``body`` (PWNED) to every request
    (``child``: in a child of the process returned); every one is ended at teardown."""
    started: list[subprocess.Popen] = []

    def on(port: int, *, body: bytes = PWNED, child: bool = False) -> subprocess.Popen:
        argv = [PARENT, IMPOSTOR] if child else [IMPOSTOR, "127.0.0.1"]
        deadline = time.monotonic() + 15
        while True:  # the port may be held a moment longer by the process that just died
            process = subprocess.Popen(
                [sys.executable, "-c", *argv, str(port), body.decode()],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                start_new_session=True,
            )
            started.append(process)
            if (
                poll(lambda: process.poll() is not None or _answers(port), what=f"an impostor on {port}", timeout=15)
                and process.poll() is None
            ):
                return process
            if time.monotonic() > deadline:
                raise AssertionError(f"no impostor could bind port {port}")

    yield on
    for process in started:
        local_procs.signal_group(process.pid, signal.SIGKILL)  # with the children of those that start one
        process.wait(timeout=10)


def _answers(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5) as sock:
            sock.sendall(b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            return b"pwned" in sock.recv(4096)
    except OSError:
        return False


def kill(pid: int, handle: str) -> None:
    os.kill(pid, signal.SIGKILL)
    poll(lambda: not local_procs.alive(pid, int(handle)), what=f"process {pid} to end", timeout=15)


def running_board(portal, settings, name: str) -> tuple[int, TensorBoard]:
    job_id, _ = submit_with_events(portal, settings, name)
    assert portal.api(portal.alice).post(f"/api/v1/jobs/{job_id}/tensorboard/").status_code == 200
    wait_running(portal, f"/api/v1/jobs/{job_id}/tensorboard/")
    page, html = fetch(f"/tensorboard/{job_id}/", user=portal.alice, accept="text/html")
    assert page.status_code == 200 and b"<title>TensorBoard</title>" in html
    return job_id, TensorBoard.objects.get(key=f"job:{job_id}")


def test_the_proxy_never_serves_an_impostor_that_killed_the_board_and_took_its_port(portal, settings, impostors):
    job_id, board = running_board(portal, settings, "victim")
    kill(board.pid, board.handle)
    impostors(board.port)

    page, html = fetch(f"/tensorboard/{job_id}/", user=portal.alice, accept="text/html")
    assert PWNED not in html
    assert page.status_code == 503
    assert escape(boards.NOT_OURS).encode() in html  # on the portal's page (tensorboards/proxy.py)
    stopped = TensorBoard.objects.get(pk=board.pk)
    assert (stopped.status, stopped.message) == ("stopped", boards.NOT_OURS)

    # The next visits start a fresh board on another port, and only ever show TensorBoard.
    def back():
        page, html = fetch(f"/tensorboard/{job_id}/", user=portal.alice, accept="text/html")
        assert PWNED not in html
        return page.status_code == 200 and b"<title>TensorBoard</title>" in html

    poll(back, what="a fresh board")
    fresh = TensorBoard.objects.get(pk=board.pk)
    assert fresh.status == "running" and fresh.pid != board.pid and fresh.port != board.port


def test_a_board_whose_port_is_taken_before_it_comes_up_is_never_marked_running_there(portal, settings, impostors):
    job_id, _ = submit_with_events(portal, settings, "raced")
    portal.api(portal.alice).post(f"/api/v1/jobs/{job_id}/tensorboard/")
    board = TensorBoard.objects.get(key=f"job:{job_id}")
    assert board.status == "starting" and board.port
    # TensorBoard needs seconds to import before it binds: the impostor gets there first.
    impostors(board.port)

    for _ in range(5):
        _, html = fetch(f"/tensorboard/{job_id}/", user=portal.alice, accept="text/html")
        assert PWNED not in html
    now = TensorBoard.objects.get(pk=board.pk)
    assert not (now.status == "running" and now.port == board.port)


def test_it_knows_the_listener_of_a_port_and_whether_it_is_the_process_it_started(impostors, tmp_path):
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    server = impostors(port)
    started = local_procs.start_time(server.pid)

    assert listeners.listener_pids("127.0.0.1", port) == {server.pid}
    assert listeners.is_ours(server.pid, started, "127.0.0.1", port)
    # A process that is no ancestor of the listener (detached, as the portal starts its servers).
    other, other_started = local_procs.start_detached(["sleep", "60"], log=tmp_path / "sleep.log")
    try:
        assert not listeners.is_ours(other, other_started, "127.0.0.1", port)
    finally:
        local_procs.stop_detached(other, other_started, grace=0)
    assert not listeners.is_ours(server.pid, started + 1, "127.0.0.1", port), "a reused pid is not ours"
    with socket.socket() as free:
        free.bind(("127.0.0.1", 0))
        nobody = free.getsockname()[1]
    assert listeners.listener_pids("127.0.0.1", nobody) == set()
    assert not listeners.is_ours(server.pid, started, "127.0.0.1", nobody)


def test_a_server_started_by_the_recorded_process_is_its_own(impostors):
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    parent = impostors(port, child=True)
    (child,) = listeners.listener_pids("127.0.0.1", port)
    assert child != parent.pid
    assert listeners.is_ours(parent.pid, local_procs.start_time(parent.pid), "127.0.0.1", port)
