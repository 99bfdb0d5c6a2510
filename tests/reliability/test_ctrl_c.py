"""Ctrl-C on `make run` (platform/supervise.sh) stops every process the stack started (issue 17, item 6).

The real stack as `make run` starts it (supervise.sh, supervisord and its four programs, on the test database
and data root) in a session of its own, like a terminal's foreground process group. Through it: a job that
runs until it is stopped, a TensorBoard for that job (started by the web process) and a deployment whose model
server the worker starts. Then SIGINT to the whole group, as a terminal sends on Ctrl-C.

Afterwards no process of the test's own is left: none that appeared since the test started and names its data
root (on its command line or in its environment), nor any child of those, except the job's supervisor
(local_runner) and its workers, which keep running on purpose so that the next run adopts the job again.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import time
import urllib.request
from pathlib import Path

import pytest
from django.conf import settings

from accounts.tokens import token_create
from serving.models import ModelServer
from tensorboards.models import TensorBoard
from tests.jobs.test_job_flow import make_repo
from tests.models_registry.test_serving import register
from tests.processes import Processes, wait_for
from tests.reliability.test_supervision import PROGRAMS, Supervisor, alive


def processes() -> dict[int, tuple[int, bytes]]:
    """pid -> (parent pid, command line and environment) of every live process we may read."""
    found = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            stat = Path(f"/proc/{name}/stat").read_text()
            state, ppid = stat.rsplit(")", 1)[1].split()[:2]
            if state in "ZX":
                continue
            text = Path(f"/proc/{name}/cmdline").read_bytes()
            with contextlib.suppress(OSError):
                text += b"\0" + Path(f"/proc/{name}/environ").read_bytes()
        except (OSError, ValueError, IndexError):
            continue
        found[int(name)] = (int(ppid), text)
    return found


def descendants(roots: set[int], table: dict[int, tuple[int, bytes]]) -> set[int]:
    found = set(roots)
    while True:
        more = {pid for pid, (ppid, _) in table.items() if ppid in found and pid not in found}
        if not more:
            return found
        found |= more


def ours(before: set[int]) -> tuple[set[int], set[int]]:
    """(processes of this test's stack, those of them that are the job's supervisor and its workers)."""
    table = {pid: entry for pid, entry in processes().items() if pid not in before}
    root = str(settings.PORTAL_DATA_ROOT).encode()
    mine = descendants({pid for pid, (_, text) in table.items() if root in text}, table)
    runners = {pid for pid in mine if b"jobs.executors.local_runner" in table[pid][1]}
    return mine, descendants(runners, table)


class Terminal(Supervisor):
    """supervise.sh in a session of its own: ``ctrl_c()`` signals its whole process group, as a terminal does."""

    def __init__(self, log_dir: Path):
        super().__init__(log_dir, new_session=True)

    def ctrl_c(self) -> None:
        os.killpg(self.process.pid, signal.SIGINT)


def api(port: int, token: str, path: str, body: dict | None = None) -> dict:
    request = urllib.request.Request(
        f"http://127.0.0.1:{port}{path}",
        data=None if body is None else json.dumps(body).encode(),
        headers={"Content-Type": "application/json", "Authorization": f"Token {token}"},
        method="GET" if body is None else "POST",
    )
    with urllib.request.urlopen(request, timeout=30) as response:
        assert response.status in (200, 201), response.status
        return json.loads(response.read())


@pytest.mark.django_db(transaction=True)
def test_ctrl_c_on_make_run_stops_boards_and_model_servers_too_and_leaves_only_the_job_supervisor(world, tmp_path):
    before = set(processes())
    stack_processes = Processes(tmp_path)
    stack_processes.purge_broker()
    stack_processes.migrate_channel_layer()
    register("ctrlc", 1)
    repo = make_repo(tmp_path / "repo", {"train.py": "import time\ntime.sleep(600)\n"})
    _, token = token_create(user=world.alice, name="ctrl-c")
    left: set[int] = set()
    with Terminal(tmp_path) as stack:
        try:
            stack.wait_green("after start", timeout=180)
            port = stack.port
            job = api(
                port,
                token,
                "/api/v1/jobs/",
                {
                    "name": "ctrl-c",
                    "department": "vision",
                    "code_url": repo,
                    "command": "python train.py",
                    "gpus_per_worker": 1,
                    "tensorboard": True,
                },
            )["id"]
            api(
                port,
                token,
                "/api/v1/deployments/",
                {
                    "name": "ctrlc",
                    "department": "vision",
                    "model": "ctrlc",
                    "strategy": "ab",
                    "variants": [{"name": "a", "version": 1, "weight": 100}],
                },
            )
            wait_for(
                lambda: api(port, token, f"/api/v1/jobs/{job}/")["status"] == "running",
                timeout=120,
                what="the job running",
                reconcile=False,
            )
            api(port, token, f"/api/v1/jobs/{job}/tensorboard/", {})
            board = wait_for(
                lambda: TensorBoard.objects.filter(key=f"job:{job}", status=TensorBoard.Status.RUNNING).first(),
                timeout=120,
                what="the job's TensorBoard running",
                reconcile=False,
            )
            server = wait_for(
                lambda: ModelServer.objects.filter(
                    variant__deployment__name="ctrlc", status=ModelServer.Status.READY
                ).first(),
                timeout=120,
                what="the model server ready",
                reconcile=False,
            )
            programs = stack.running()
            assert set(programs) == set(PROGRAMS), stack.output()
            mine, job_processes = ours(before)
            assert {board.pid, server.pid, *programs.values()} <= mine - job_processes, stack.output()
            assert job_processes, "the job's supervisor is one of the stack's processes"

            stack.ctrl_c()
            assert stack.process.wait(timeout=180) == 0, stack.output()
            left, job_left = wait_for(
                lambda: (lambda found: found if found[0] <= found[1] else None)(ours(before)),
                timeout=30,
                what="every process of the stack but the job's to end",
                reconcile=False,
            )
            assert not alive(board.pid) and not alive(server.pid)
            # The job keeps running on purpose: its supervisor outlives the portal, the next run adopts it.
            assert job_left and job_left <= job_processes, (job_left, job_processes)
            # Says what it stopped (how many: a board or server the periodic care restarted meanwhile counts anew).
            said = [line for line in stack.output_path.read_text().splitlines() if line.startswith("Stopped ")]
            assert len(said) == 1 and said[0].endswith("TensorBoard(s) on this host."), (said, stack.output())
            assert TensorBoard.objects.get(pk=board.pk).status == TensorBoard.Status.STOPPED
            assert ModelServer.objects.get(pk=server.pk).status == ModelServer.Status.STOPPED
        finally:
            mine, _ = ours(before)
            for pid in mine | left:  # the job's processes by design, anything else only if the test failed
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            deadline = time.monotonic() + 30
            while any(alive(pid) for pid in mine) and time.monotonic() < deadline:
                time.sleep(0.1)
