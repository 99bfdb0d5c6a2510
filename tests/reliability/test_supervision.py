"""`make run`'s supervisor (platform/supervise.sh, platform/supervisord.conf) with its real config, on the test
database and a free port: web, worker, beat and watcher each frozen (SIGSTOP: /healthz turns red) and then
killed with SIGKILL while jobs run; each comes back with a new pid and /healthz turns green again; afterwards
every submitted job has succeeded exactly once. And Ctrl-C (SIGINT to supervisord) stops all four.

Jobs are real processes on the local executor; each holds an exclusive lock named after its job while it runs,
so two runs of one job at the same time leave a DUPLICATE mark (as in test_kills.py).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from django.conf import settings

from accounts.models import Department
from accounts.tokens import token_create
from clusters.models import Storage
from jobs import lifecycle
from jobs.models import Job, JobEvent
from tests.jobs.test_job_flow import make_repo
from tests.processes import ROOT, Processes, free_port, process_env, wait_for

PROGRAMS = ("web", "worker", "beat", "watcher")
MAX_AGE = 3  # PORTAL_HEALTH_MAX_AGE_SECONDS for the test: a frozen process turns /healthz red within seconds

JOB = """\
import fcntl, os, pathlib, sys, time
marks = pathlib.Path(os.environ["MARKS"])
name = os.environ["PORTAL_JOB_NAME"]
lock = open(marks / (name + ".lock"), "w")
try:
    fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
except BlockingIOError:
    (marks / (name + ".DUPLICATE")).write_text(os.environ["PORTAL_JOB_ID"])
    sys.exit(9)
with open(marks / (name + ".runs"), "a") as runs:
    runs.write(os.environ["PORTAL_JOB_ID"] + "\\n")
time.sleep(float(os.environ["SECONDS"]))
print("done", name, flush=True)
"""


class Supervisor:
    """supervisord as `make run` starts it, on the test database and data root; always stopped."""

    def __init__(self, log_dir: Path, *, new_session: bool = False):
        self.port = free_port()
        self.env = process_env() | {
            "PORT": str(self.port),
            "PORTAL_HEARTBEAT_SECONDS": "1",
            "PORTAL_HEALTH_MAX_AGE_SECONDS": str(MAX_AGE),
            "PORTAL_LOG_LEVEL": "INFO",
        }
        self.output_path = log_dir / "supervisord.out"
        with open(self.output_path, "wb") as output:
            self.process = subprocess.Popen(
                ["sh", "platform/supervise.sh"],
                cwd=ROOT,
                env=self.env,
                stdout=output,
                stderr=subprocess.STDOUT,
                start_new_session=new_session,
            )

    def __enter__(self) -> Supervisor:
        return self

    def __exit__(self, *exc) -> None:
        pids = [self.pid(name) for name in PROGRAMS] if self.process.poll() is None else []
        self.process.send_signal(signal.SIGTERM)
        try:
            self.process.wait(timeout=120)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        for pid in pids:  # never leave a program behind, whatever happened
            if pid and alive(pid):
                os.kill(pid, signal.SIGKILL)

    def ctl(self, *args: str) -> str:
        done = subprocess.run(
            ["sh", "platform/supervise.sh", "ctl", *args], cwd=ROOT, env=self.env, capture_output=True, text=True
        )
        return done.stdout

    def pid(self, name: str) -> int:
        text = self.ctl("pid", name).strip()
        return int(text) if text.isdigit() else 0

    def running(self) -> dict[str, int]:
        """program -> pid, of those RUNNING."""
        states = dict(line.split()[:2] for line in self.ctl("status").splitlines() if line.strip())
        return {name: self.pid(name) for name in PROGRAMS if states.get(name) == "RUNNING"}

    def health(self) -> tuple[int | None, dict]:
        """/healthz from 127.0.0.1 (on the metrics allow-list: with details); (None, {}) when web does not answer."""
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/healthz", timeout=2) as response:
                return response.status, json.loads(response.read())
        except urllib.error.HTTPError as error:
            return error.code, json.loads(error.read())
        except OSError:
            return None, {}

    def green(self) -> bool:
        return self.health()[0] == 200

    def wait_green(self, what: str, timeout: float = 120) -> None:
        try:
            wait_for(self.green, timeout=timeout, what=f"/healthz green {what}", reconcile=False)
        except AssertionError as exc:
            raise AssertionError(f"{exc}; /healthz: {self.health()}\n{self.output()}") from None

    def output(self) -> str:
        logs = sorted((settings.PORTAL_DATA_ROOT / "logs").glob("*.log"))
        return self.output_path.read_text(errors="replace")[-15000:] + "".join(
            f"\n--- {log.name} ---\n{log.read_text(errors='replace')[-4000:]}" for log in logs
        )


def alive(pid: int) -> bool:
    """The process exists and is not a zombie."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (FileNotFoundError, IndexError):
        return False


@pytest.fixture
def supervisor(tmp_path):
    processes = Processes(tmp_path)
    processes.purge_broker()
    processes.migrate_channel_layer()
    with Supervisor(tmp_path) as running:
        yield running


def submit(port: int, token: str, body: dict) -> int:
    request = urllib.request.Request(
        f"http://127.0.0.1:{port}/api/v1/jobs/",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json", "Authorization": f"Token {token}"},
        method="POST",
    )
    with urllib.request.urlopen(request, timeout=30) as response:
        assert response.status == 201
        return json.loads(response.read())["id"]


@pytest.mark.django_db(transaction=True)
def test_each_process_killed_comes_back_and_no_job_is_lost_or_duplicated(world, supervisor, tmp_path):
    marks = tmp_path / "marks"
    marks.mkdir()
    marks.chmod(0o777)  # written by the jobs, which run sandboxed as vision's uid and see it as a storage mount
    Storage.objects.create(department=Department.objects.get(slug="vision"), name="marks", local_path=str(marks))
    script = f"supervised_{os.getpid()}.py"  # a name only this test's jobs have
    repo = make_repo(tmp_path / "repo", {script: JOB})
    _, token = token_create(user=world.alice, name="supervision")
    submitted: list[int] = []

    def submit_jobs(count: int) -> None:
        for _ in range(count):
            body = {
                "name": f"supervised-{len(submitted)}",
                "department": "vision",
                "code_url": repo,
                "command": f"python {script}",
                "gpus_per_worker": 1,
                "env": {"MARKS": "/marks", "SECONDS": "2"},
                "mounts": [{"storage": "marks", "path": "/marks"}],
            }
            submitted.append(submit(supervisor.port, token, body))

    def context() -> str:
        return (
            "\n".join(f"{job.pk} {job.name} {job.status} {job.status_message!r}" for job in Job.objects.order_by("pk"))
            + "\n"
            + supervisor.output()
        )

    supervisor.wait_green("after start", timeout=180)
    submit_jobs(4)
    for name in PROGRAMS:
        submit_jobs(2)
        old = supervisor.pid(name)
        assert old, context()

        # Frozen: red (web does not answer; the others' heartbeats go stale), then green once it runs on.
        os.kill(old, signal.SIGSTOP)
        try:
            if name == "web":
                wait_for(lambda: supervisor.health()[0] is None, timeout=30, what="web frozen", reconcile=False)
            else:
                wait_for(
                    lambda n=name: (lambda s, b: s == 503 and b["checks"][n]["ok"] is False)(*supervisor.health()),
                    timeout=30,
                    what=f"/healthz red while the {name} is frozen",
                    reconcile=False,
                )
        finally:
            os.kill(old, signal.SIGCONT)
        supervisor.wait_green(f"after the {name} thawed", timeout=60)

        # Killed: supervisord starts a new one; green again with it.
        before = supervisor.running()
        os.kill(old, signal.SIGKILL)
        new = wait_for(
            lambda n=name: (lambda pid: pid if pid not in (0, old) else 0)(supervisor.running().get(n, 0)),
            timeout=60,
            what=f"a new {name}",
            reconcile=False,
        )
        assert not alive(old)
        supervisor.wait_green(f"after the {name} came back")
        assert supervisor.pid(name) == new, context()
        # The others kept running all along: supervisord restarted only the one that died.
        after = supervisor.running()
        assert {k: v for k, v in after.items() if k != name} == {k: v for k, v in before.items() if k != name}

    wait_for(
        lambda: not Job.objects.filter(pk__in=submitted).exclude(status__in=lifecycle.FINAL).exists(),
        timeout=240,
        what="every job ended",
        reconcile=False,
    )
    jobs = {job.pk: job for job in Job.objects.all()}
    assert set(jobs) == set(submitted), context()  # none lost, none made twice
    assert {job.status for job in jobs.values()} == {lifecycle.SUCCEEDED}, context()
    endings = JobEvent.objects.filter(job__in=submitted, to_status=lifecycle.SUCCEEDED)
    assert sorted(endings.values_list("job_id", flat=True)) == sorted(submitted), context()  # each ended once
    assert sorted(path.name for path in marks.glob("*.DUPLICATE")) == [], context()
    for job in jobs.values():
        assert job.run_id in (marks / f"{job.name}.runs").read_text().split(), context()


@pytest.mark.django_db(transaction=True)
def test_ctrl_c_stops_all_four_and_their_output_reached_the_terminal_with_their_names(world, supervisor):
    pids = wait_for(
        lambda: (lambda running: running if set(running) == set(PROGRAMS) else None)(supervisor.running()),
        timeout=120,
        what="all four running",
        reconcile=False,
    )
    supervisor.wait_green("after start", timeout=180)
    supervisor.process.send_signal(signal.SIGINT)
    assert supervisor.process.wait(timeout=120) == 0, supervisor.output()
    assert [name for name, pid in pids.items() if alive(pid)] == [], supervisor.output()
    lines = supervisor.output_path.read_text(errors="replace").splitlines()
    for name in PROGRAMS:
        assert any(line.startswith(f"{name:<7} | ") for line in lines), (name, supervisor.output())


SHARED_OUTPUT = """\
import os, sys
sys.path.insert(0, "platform")
import supervise_run
if sys.argv[1] == "on":
    supervise_run.append_to_output()
os.write(1, b"supervisord: started\\n")  # supervisord's own log, on the inherited stdout
with open("/dev/fd/1", "ab", buffering=0) as listener:  # the output listener's lines (stderr_logfile=/dev/fd/1)
    listener.write(b"watcher | Watching 1 cluster(s).\\n")
os.write(1, b"supervisord: stopped\\n")
"""


@pytest.mark.parametrize("protection", ["on", "off"])
def test_with_output_to_a_file_supervisord_s_own_lines_do_not_overwrite_a_program_s(tmp_path, protection):
    """`make run > run.log`: supervisord writes on the stdout it inherits, the output listener through /dev/fd/1
    opened again: two handles on one file (platform/supervise_run.py, append_to_output)."""
    path = tmp_path / "run.log"
    with open(path, "wb") as output:  # as a shell's `>` opens it: no O_APPEND
        subprocess.run([sys.executable, "-c", SHARED_OUTPUT, protection], cwd=ROOT, stdout=output, check=True)
    lines = path.read_text().splitlines()
    if protection == "off":  # the failure this protects from, shown: the program's line is overwritten
        assert "watcher | Watching 1 cluster(s)." not in lines
    else:
        assert lines == ["supervisord: started", "watcher | Watching 1 cluster(s).", "supervisord: stopped"]
