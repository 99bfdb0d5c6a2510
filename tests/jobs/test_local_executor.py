"""The local executor: the executor contract suite, plus what only a local executor does (virtualenv
cache, who may fetch local code, re-adopting jobs whose supervisor died).

Jobs are real processes on this host, each job's workers in one bubblewrap sandbox (its own PID namespace:
killing the sandbox's first process ends them all). The whole module runs once sandboxed and once in the
trusted `isolation: none` mode. The test process makes itself the subreaper of what it starts (the detached
runners end up as its children), so it can reap them and prove with os.killpg(pgid, 0) / kill(pid, 0) that
nothing of a job is left.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import signal
import sys
import time
from pathlib import Path

import pytest

from clusters.errors import ExecutorError
from clusters.local_procs import alive
from jobs.executors.base import Mount
from jobs.executors.local import LocalExecutor, is_local_code
from jobs.executors.local_jobdir import JobDir, read_json
from jobs.executors.venvs import COMPLETE
from tests.jobs.executor_contract import ExecutorContract
from tests.jobs.executor_harness import GitRepo, Harness, command_output, slow_package, tiny_wheel, wait_for

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the local executor needs Linux (/proc)")

PR_SET_CHILD_SUBREAPER = 36


def reap_orphans() -> None:
    with contextlib.suppress(ChildProcessError):
        while os.waitpid(-1, os.WNOHANG)[0]:
            pass


def group_gone(pgid: int) -> bool:
    reap_orphans()
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return True
    return False


def pid_gone(pid: int) -> bool:
    reap_orphans()
    return not alive(pid)


@pytest.fixture(scope="module", autouse=True)
def _subreaper():
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    yield
    reap_orphans()
    libc.prctl(PR_SET_CHILD_SUBREAPER, 0, 0, 0, 0)


class LocalHarness(Harness):
    node = "localhost"

    def installed_line(self, package: str, version: str) -> str:
        return f"+ {package}=={version}"  # uv's words

    def code_url(self, path: Path) -> str:
        return path.as_uri()

    def mount(self, name: str, tmp_path: Path) -> Mount:
        folder = tmp_path / "storage" / name
        folder.mkdir(parents=True)
        (folder / "hello.txt").write_text(name)
        return Mount(name=name, path=f"/data/{name}", source=str(folder))

    def jobdir(self, job_id: str) -> JobDir:
        return JobDir(self.executor.root / "jobs" / job_id)

    def output(self, job_id: str) -> Path:
        return self.jobdir(job_id).output

    def runner_pid(self, job_id: str) -> int | None:
        return (read_json(self.jobdir(job_id).runner_file) or {}).get("pid")

    def pod(self, job_id: str) -> int:
        """The pid of the job's sandbox (or, unsandboxed, its launcher): the job runs while it does."""
        return wait_for(lambda: (self.jobdir(job_id).groups().get("pod") or {}).get("pid"), what="the workers to start")

    def kill_runner(self, job_id: str) -> int:
        pid = wait_for(lambda: self.runner_pid(job_id), what="the runner to record its pid")
        os.kill(pid, signal.SIGKILL)
        wait_for(lambda: group_gone(pid), what="the runner to die")  # the runner leads its own group
        return pid

    def assert_released(self, job_id: str) -> None:
        groups = self.jobdir(job_id).groups()
        if groups.get("setup"):
            pgid = groups["setup"]["pgid"]
            wait_for(lambda: group_gone(pgid), timeout=15, what=f"the setup step {pgid} of {job_id} to go")
        if groups.get("pod"):
            pid = groups["pod"]["pid"]
            wait_for(lambda: pid_gone(pid), timeout=15, what=f"the sandbox {pid} of {job_id} to go")
        for pgid in self.host_worker_groups(job_id):
            wait_for(lambda: group_gone(pgid), timeout=15, what=f"worker group {pgid} of {job_id} to go")

    def host_worker_groups(self, job_id: str) -> list[int]:
        """Unsandboxed, the workers' process groups (in a sandbox they die with it, and their ids are its own)."""
        return [] if self.executor.isolation == "sandbox" else list(self.jobdir(job_id).launcher_groups().values())
        runner = self.runner_pid(job_id)
        if runner is not None:
            wait_for(lambda: group_gone(runner), timeout=15, what=f"the runner of {job_id} to exit")


@pytest.fixture(scope="module", params=["sandbox", "none"])
def executor(request, tmp_path_factory) -> LocalExecutor:
    # One data folder per mode, so that jobs share the (empty-requirements) environment.
    return LocalExecutor(tmp_path_factory.mktemp(f"local-executor-{request.param}"), isolation=request.param)


@pytest.fixture
def harness(executor):
    harness = LocalHarness(executor)
    yield harness
    harness.cleanup()


class TestLocalExecutor(ExecutorContract):
    def test_launch_returns_at_once(self, harness, repo):
        spec = harness.spec(harness.code_url(repo.path), "echo hi")
        harness.launched.append(spec.job_id)
        started = time.monotonic()
        harness.executor.launch(spec, harness.placement(()))
        assert time.monotonic() - started < 0.1, "launch runs in a Celery task and must not wait for the job"
        assert harness.wait_final(spec.job_id).phase == "succeeded"

    def test_the_command_runs_in_its_virtualenv_without_the_portals_settings(self, harness, repo, monkeypatch):
        monkeypatch.setenv("DATABASE_URL", "postgres://portal:secret@db/portal")
        monkeypatch.setenv("DJANGO_SECRET_KEY", "do-not-leak")
        job = harness.launch(
            harness.spec(
                harness.code_url(repo.path),
                """python -c 'import json, os, sys; print(json.dumps({"prefix": sys.prefix, "env": dict(os.environ)}))'""",
                env={"RANK": "99", "PATH": f"/opt/tools/bin:{Path(sys.prefix, 'bin')}:/usr/bin:/bin"},
            )
        )
        assert harness.wait_final(job).phase == "succeeded"
        seen = json.loads(command_output(harness.log(job))[-1])
        env = seen["env"]
        assert env["VIRTUAL_ENV"] == seen["prefix"]
        if harness.executor.isolation == "sandbox":
            assert env["VIRTUAL_ENV"] == "/portal/env"  # the department's env, mounted read-only
        else:
            assert Path(env["VIRTUAL_ENV"]).parent == harness.executor.root / "envs" / "host" / "vision"
        # the job's venv first; the portal's own venv never (a `pip install` there would change the portal)
        assert env["PATH"].split(":") == [f"{env['VIRTUAL_ENV']}/bin", "/opt/tools/bin", "/usr/bin", "/bin"]
        assert env["PYTHONUNBUFFERED"] == "1"
        assert env["RANK"] == "0"  # reserved names win over the job's env
        assert "DATABASE_URL" not in env and "DJANGO_SECRET_KEY" not in env

    def test_code_on_this_host_is_refused_where_the_cluster_does_not_allow_it(self, harness, repo, tmp_path):
        strict = LocalExecutor(tmp_path / "strict", allow_local_code=False)
        placement = harness.placement(())
        for url in (
            repo.path.as_uri(),
            str(repo.path),
            "../repo",
            "ftp://example.com/repo.git",
            "ext::sh -c touch% /tmp/x",
        ):
            with pytest.raises(ExecutorError) as refused:
                strict.launch(harness.spec(url, "true"), placement)
            assert refused.value.permanent, url
        with pytest.raises(ExecutorError) as refused:
            strict.launch(harness.spec("https://example.com/repo.git", "true", workers=2), placement)
        assert refused.value.permanent and "placement" in refused.value.message
        assert not (tmp_path / "strict" / "jobs").exists()
        assert not is_local_code("https://github.com/org/repo.git") and not is_local_code("git@github.com:org/repo.git")
        assert is_local_code("file:///srv/repo") and is_local_code("/srv/repo") and is_local_code("./repo")

    def test_jobs_needing_the_same_new_environment_build_it_once(self, harness, tmp_path):
        requirement = f"tinypkg @ {tiny_wheel(tmp_path).as_uri()}"
        repo = GitRepo(tmp_path / "needs-tinypkg")
        repo.commit({"train.py": "import tinypkg\nprint(tinypkg.VALUE)\n"})
        jobs = [
            harness.launch(harness.spec(harness.code_url(repo.path), "python train.py", requirements=(requirement,)))
            for _ in range(2)
        ]
        for job in jobs:
            assert harness.wait_final(job, timeout=60).phase == "succeeded"
        logs = [harness.log(job) for job in jobs]
        assert sum("+ tinypkg==1.0" in log for log in logs) == 1
        assert sum("reusing cached environment" in log for log in logs) == 1
        envs = [env for env in (harness.executor.root / "envs").glob("*/vision/*") if env.is_dir()]
        assert envs and all(
            (env / COMPLETE).exists() for env in envs if env.name not in ("resolved",) and not env.name.startswith(".")
        ), "a half-built env was left"

    def test_a_job_whose_runner_died_is_adopted_and_finishes(self, harness, repo):
        job = harness.launch(
            harness.spec(
                harness.code_url(repo.path),
                'echo waiting; while [ ! -e "$PORTAL_OUTPUT_DIR/go" ]; do sleep 0.05; done; echo "finished $RANK"',
                workers=2,
            )
        )
        for worker in (0, 1):
            harness.wait_log(job, "waiting\n", worker)
        dead = harness.kill_runner(job)
        assert harness.state(job).phase == "running"  # this poll started an adopting runner
        wait_for(lambda: harness.runner_pid(job) not in (None, dead), what="an adopting runner")
        (harness.output(job) / "go").touch()
        state = harness.wait_final(job)
        assert (state.phase, state.exit_code) == ("succeeded", 0), state
        assert all(f"finished {worker}" in harness.log(job, worker) for worker in (0, 1))
        harness.assert_released(job)

    def test_workers_that_finished_while_no_runner_watched_end_the_job_from_their_exit_codes(self, harness, repo):
        job = harness.launch(
            harness.spec(
                harness.code_url(repo.path),
                'echo waiting; while [ ! -e "$PORTAL_OUTPUT_DIR/go" ]; do sleep 0.05; done; exit $((RANK * 5))',
                workers=2,
            )
        )
        for worker in (0, 1):
            harness.wait_log(job, "waiting\n", worker)
        pod = harness.pod(job)
        harness.kill_runner(job)
        (harness.output(job) / "go").touch()
        wait_for(lambda: pid_gone(pod), what="the workers to finish")
        state = harness.state(job)
        assert (state.phase, state.reason, state.exit_code) == ("failed", "worker_failed", 5), state
        assert "worker 1 exited with code 5" in state.message

    def test_a_job_whose_runner_and_workers_died_is_lost(self, harness, repo):
        job = harness.launch(harness.spec(harness.code_url(repo.path), "echo waiting; sleep 60"))
        harness.wait_log(job, "waiting\n")
        harness.kill_runner(job)
        pod = harness.pod(job)
        for pgid in harness.host_worker_groups(job):
            os.killpg(pgid, signal.SIGKILL)
        os.kill(pod, signal.SIGKILL)
        wait_for(lambda: pid_gone(pod), what="the worker to die")
        state = harness.state(job)
        assert (state.phase, state.reason) == ("lost", "lost"), state
        assert "supervisor died" in state.message and state.finished_at is not None
        assert harness.state(job).phase == "lost"  # final: it stays so

    def test_cancel_reaches_a_job_whose_runner_died(self, harness, repo):
        job = harness.launch(
            harness.spec(
                harness.code_url(repo.path),
                "trap 'echo stopping; exit 0' TERM; echo waiting; while true; do sleep 0.1; done",
            )
        )
        harness.wait_log(job, "waiting\n")
        harness.kill_runner(job)
        harness.executor.cancel(job, 5)
        state = harness.wait_final(job)
        assert (state.phase, state.reason) == ("cancelled", "cancelled"), state
        assert "stopping" in harness.log(job)
        harness.assert_released(job)

    @pytest.fixture
    def hanging_setup(self, tmp_path):
        """A job whose environment build never ends: a requirement whose in-tree build backend sleeps.

        (A sandboxed clone cannot reach a silent server on this host's loopback, which is the point.)"""
        repo = GitRepo(tmp_path / "needs-slowpkg")
        repo.commit({"train.py": "print('never')\n"})
        return repo.path.as_uri(), (slow_package(tmp_path / "slowpkg"),)

    def setup_started(self, harness, job):
        """The setup step (the environment build) that hangs, once it runs."""
        return wait_for(
            lambda: "resolving" in harness.log(job) and harness.jobdir(job).groups()["setup"],
            what="the environment build to start",
        )

    def test_cancel_during_setup_stops_the_setup_step(self, harness, hanging_setup):
        url, requirements = hanging_setup
        job = harness.launch(harness.spec(url, "echo never", requirements=requirements))
        clone = self.setup_started(harness, job)
        assert harness.state(job).phase == "starting"
        harness.executor.cancel(job, 30)
        state = harness.wait_final(job, timeout=10)
        assert (state.phase, state.reason, state.started_at) == ("cancelled", "cancelled", None), state
        wait_for(lambda: group_gone(clone["pgid"]), what="git to be killed")

    def test_a_job_whose_runner_died_during_setup_is_lost_and_its_setup_killed(self, harness, hanging_setup):
        url, requirements = hanging_setup
        job = harness.launch(harness.spec(url, "echo never", requirements=requirements))
        clone = self.setup_started(harness, job)
        harness.kill_runner(job)  # (a setup sandbox dies with its runner at once: bwrap --die-with-parent)
        state = harness.state(job)
        assert (state.phase, state.reason) == ("lost", "lost"), state
        wait_for(lambda: group_gone(clone["pgid"]), what="git to be killed")


class TestSandbox:
    """What only the sandbox promises: read-only mounts at the path asked for, a read-only environment."""

    @pytest.fixture
    def harness(self, tmp_path_factory):
        harness = LocalHarness(LocalExecutor(tmp_path_factory.mktemp("sandbox-only"), isolation="sandbox"))
        yield harness
        harness.cleanup()

    def test_a_read_only_mount_refuses_writes_at_the_requested_path(self, harness, tmp_path):
        repo = GitRepo(tmp_path / "repo")
        repo.commit(
            {
                "probe.sh": "cat /data/corpus/hello.txt; echo; if echo x > /data/corpus/new.txt; then echo WROTE-RO; fi\n"
                "echo ok > /data/scratch/new.txt && echo wrote-rw\n"
            }
        )
        corpus, scratch = harness.mount("corpus", tmp_path), harness.mount("scratch", tmp_path)
        corpus = Mount(corpus.name, "/data/corpus", corpus.source, read_only=True)
        os.chmod(scratch.source, 0o777)  # the department's uid must be able to write there, as on a real server
        job = harness.launch(harness.spec(repo.path.as_uri(), "bash probe.sh", mounts=(corpus, scratch)))
        assert harness.wait_final(job).phase == "succeeded"
        out = command_output(harness.log(job))
        assert out[0] == "corpus"  # the mount is where the job asked for it
        assert "Read-only file system" in harness.log(job) and "WROTE-RO" not in out
        assert not (Path(corpus.source) / "new.txt").exists()
        assert "wrote-rw" in out and (Path(scratch.source) / "new.txt").read_text() == "ok\n"

    def test_the_environment_is_read_only_and_pip_says_what_to_do(self, harness, tmp_path):
        repo = GitRepo(tmp_path / "repo")
        repo.commit(
            {
                "probe.sh": "site=$(python -c \"import sysconfig; print(sysconfig.get_paths()['purelib'])\")\n"
                'if echo "import os" > "$site/evil.pth"; then echo PLANTED; fi\npip install requests\n'
            }
        )
        job = harness.launch(harness.spec(repo.path.as_uri(), "bash probe.sh"))
        state = harness.wait_final(job)
        log = harness.log(job)
        assert "PLANTED" not in command_output(log) and "Read-only file system" in log
        assert state.phase == "failed" and "shared and read-only" in log and "requirements" in log

    def test_a_mount_inside_the_portals_folders_is_refused(self, harness, tmp_path):
        inside = harness.executor.root / "jobs"
        inside.mkdir(parents=True, exist_ok=True)
        with pytest.raises(ExecutorError) as refused:
            harness.executor.launch(
                harness.spec("https://example.com/r.git", "true", mounts=(Mount("sneaky", "/data", str(inside)),)),
                harness.placement(()),
            )
        assert refused.value.permanent and "portal's own folders" in refused.value.message

    def test_a_volume_under_the_shared_storage_folder_of_the_data_root_is_mounted(self, tmp_path):
        root = tmp_path / "data"
        volume = root / "storage" / "vision-datasets"
        volume.mkdir(parents=True)
        (volume / "hello.txt").write_text("vision-datasets")
        harness = LocalHarness(
            LocalExecutor(
                root / "executors" / "local", protected_paths=(str(root),), shared_storage=(str(root / "storage"),)
            )
        )
        try:
            repo = GitRepo(tmp_path / "repo")
            repo.commit({"probe.sh": "cat /data/ds/hello.txt\n"})
            job = harness.launch(
                harness.spec(
                    repo.path.as_uri(),
                    "bash probe.sh",
                    mounts=(Mount("vision-datasets", "/data/ds", str(volume), True),),
                )
            )
            assert harness.wait_final(job).phase == "succeeded"
            assert command_output(harness.log(job))[-1] == "vision-datasets"
            with pytest.raises(ExecutorError):  # the folder itself, which holds every volume, is not one
                harness.executor.launch(
                    harness.spec(
                        repo.path.as_uri(), "true", mounts=(Mount("all", "/data/all", str(root / "storage")),)
                    ),
                    harness.placement(()),
                )
        finally:
            harness.cleanup()
