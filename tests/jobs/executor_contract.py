"""The executor contract suite: what every executor (local, kubernetes) must do, seen from outside.

Use it by subclassing ExecutorContract in a test module (``class TestMyExecutor(ExecutorContract)``)
and providing a ``harness`` fixture: a Harness subclass that knows how the executor under test reaches
code and storage and how to tell that a job's processes are gone. Jobs run real commands from real git
repositories built in tmp_path; nothing sleeps, everything polls with a deadline (wait_for).
"""

from __future__ import annotations

import json
import time

import pytest

from jobs.executors.base import FINAL_PHASES
from tests.jobs.executor_harness import (
    DUMP_ENV,
    MEET,
    GitRepo,
    command_output,
    tiny_wheel,
)


class ExecutorContract:
    """Behaviour every executor owes the portal. Needs a ``harness`` fixture (see Harness)."""

    @pytest.fixture
    def repo(self, tmp_path) -> GitRepo:
        repo = GitRepo(tmp_path / "repo")
        repo.commit({"dump_env.py": DUMP_ENV, "meet.py": MEET, "version.txt": "main\n"}, "scripts")
        return repo

    def test_the_command_sees_the_job_environment_contract(self, harness, repo, tmp_path):
        url, vision = harness.code_url(repo.path), harness.mount("vision-datasets", tmp_path)
        pytorch = harness.launch(
            harness.spec(
                url,
                "python dump_env.py",
                framework="pytorch",
                workers=2,
                name="resnet-train",
                mounts=(vision, harness.mount("scratch.2024", tmp_path)),
                env={"MY_SETTING": "on"},
            ),
            harness.placement((0, 1), (2,)),
        )
        tensorflow = harness.launch(
            harness.spec(url, "python dump_env.py", framework="tensorflow", workers=2),
            harness.placement((3,), (), fractions={0: 0.5}),
        )
        assert harness.wait_final(pytorch).phase == "succeeded"
        assert harness.wait_final(tensorflow).phase == "succeeded"

        seen = [json.loads((harness.output(pytorch) / f"env-{rank}.json").read_text()) for rank in (0, 1)]
        env0, env1 = seen[0]["env"], seen[1]["env"]
        for rank, env in enumerate((env0, env1)):
            assert env["PORTAL_JOB_ID"] == pytorch
            assert env["PORTAL_JOB_NAME"] == "resnet-train"
            assert env["WORLD_SIZE"] == "2"
            assert env["RANK"] == str(rank)
            assert env["LOCAL_RANK"] == str(rank)  # both workers are on the same node
            assert env["MY_SETTING"] == "on"
            assert "TF_CONFIG" not in env
            assert "PORTAL_GPU_FRACTION" not in env
            assert env["PORTAL_DATA_VISION_DATASETS"] and env["PORTAL_DATA_SCRATCH_2024"]
            assert seen[rank]["data_files"] == {
                "PORTAL_DATA_VISION_DATASETS": "vision-datasets",
                "PORTAL_DATA_SCRATCH_2024": "scratch.2024",
            }
            assert seen[rank]["dirs"] == {"TENSORBOARD_LOG_DIR": True, "PORTAL_OUTPUT_DIR": True}
            assert "dump_env.py" in seen[rank]["cwd_files"]  # the command runs in the checkout
        assert env0["CUDA_VISIBLE_DEVICES"] == "0,1"
        assert env1["CUDA_VISIBLE_DEVICES"] == "2"
        assert env0["MASTER_ADDR"] and env0["MASTER_ADDR"] == env1["MASTER_ADDR"]
        assert env0["MASTER_PORT"] == env1["MASTER_PORT"] and 0 < int(env0["MASTER_PORT"]) < 65536

        tf = [json.loads((harness.output(tensorflow) / f"env-{rank}.json").read_text())["env"] for rank in (0, 1)]
        configs = [json.loads(env["TF_CONFIG"]) for env in tf]
        hosts = configs[0]["cluster"]["worker"]
        assert len(hosts) == 2 and len(set(hosts)) == 2 and all(":" in host for host in hosts)
        assert configs[1]["cluster"] == configs[0]["cluster"]
        assert [c["task"] for c in configs] == [{"type": "worker", "index": 0}, {"type": "worker", "index": 1}]
        assert tf[0]["PORTAL_GPU_FRACTION"] == "0.5" and "PORTAL_GPU_FRACTION" not in tf[1]
        assert tf[0]["CUDA_VISIBLE_DEVICES"] == "3" and tf[1]["CUDA_VISIBLE_DEVICES"] == ""

    def test_two_workers_meet_at_master_addr_and_master_port(self, harness, repo):
        job = harness.launch(
            harness.spec(harness.code_url(repo.path), "python meet.py", framework="pytorch", workers=2)
        )
        state = harness.wait_final(job)
        assert (state.phase, state.exit_code) == ("succeeded", 0), state.message
        assert "rank 0 heard: hello rank 0, rank 1 here" in command_output(harness.log(job, 0))
        assert "rank 1 heard: hello rank 1, rank 0 here" in command_output(harness.log(job, 1))

    def test_code_is_fetched_at_a_branch_a_tag_or_a_commit(self, harness, tmp_path):
        repo = GitRepo(tmp_path / "versions")
        tagged = repo.commit({"version.txt": "tagged\n"})
        repo.git("tag", "-a", "v1", "-m", "release 1")
        pinned = repo.commit({"version.txt": "pinned commit\n"})
        main = repo.commit({"version.txt": "main\n"})
        repo.git("checkout", "--quiet", "-b", "feature", tagged)
        feature = repo.commit({"version.txt": "feature branch\n"})
        repo.git("checkout", "--quiet", "main")

        refs = {
            None: (main, "main"),
            "feature": (feature, "feature branch"),
            "v1": (tagged, "tagged"),
            pinned: (pinned, "pinned commit"),
            pinned[:8]: (pinned, "pinned commit"),
        }
        jobs = {
            ref: harness.launch(harness.spec(harness.code_url(repo.path), "cat version.txt", code_ref=ref))
            for ref in refs
        }
        for ref, (commit, text) in refs.items():
            state = harness.wait_final(jobs[ref])
            assert (state.phase, state.commit) == ("succeeded", commit), (ref, state)
            assert command_output(harness.log(jobs[ref]))[-1] == text, ref

        # A re-run (after a preemption) carries the commit its first run resolved: the branch moved on since.
        rerun = harness.launch(
            harness.spec(harness.code_url(repo.path), "cat version.txt", code_ref="main", commit=pinned)
        )
        state = harness.wait_final(rerun)
        assert (state.phase, state.commit) == ("succeeded", pinned), state
        assert command_output(harness.log(rerun))[-1] == "pinned commit"

    def test_code_that_cannot_be_fetched_fails_with_gits_own_message(self, harness, repo, tmp_path):
        missing = harness.launch(harness.spec(harness.code_url(tmp_path / "missing"), "true"))
        bad_ref = harness.launch(harness.spec(harness.code_url(repo.path), "true", code_ref="no-such-branch"))
        # git's own words, which depend on the transport
        missing_words = ("does not exist", "not found", "does not appear to be a git repository")
        for job, words in ((missing, missing_words), (bad_ref, ("no-such-branch",))):
            state = harness.wait_final(job)
            assert (state.phase, state.reason) == ("failed", "clone_failed"), state
            assert any(w in state.message for w in words) and "Traceback" not in state.message, state.message
            assert state.started_at is None and state.finished_at is not None

    def test_requirements_are_installed_once_then_reused(self, harness, tmp_path):
        requirement = f"tinypkg @ {tiny_wheel(tmp_path).as_uri()}"
        repo = GitRepo(tmp_path / "needs-tinypkg")
        repo.commit(
            {
                "requirements.txt": f"# what train.py imports\n{requirement}\n",
                "train.py": "import tinypkg\nprint(tinypkg.VALUE)\n",
            }
        )
        url = harness.code_url(repo.path)

        first = harness.launch(harness.spec(url, "python train.py"))
        assert harness.wait_final(first, timeout=60).phase == "succeeded"
        log = harness.log(first)
        installed = harness.installed_line("tinypkg", "1.0")
        assert installed in log
        # the install belongs to the job's log, ahead of what the command printed
        assert log.index(installed) < log.index("tinypkg 1.0 imported")

        # The same set, this time as the job's own requirement: one set, so the environment is reused.
        second = harness.launch(harness.spec(url, "python train.py", requirements=(requirement.replace(" @ ", "@"),)))
        assert harness.wait_final(second, timeout=60).phase == "succeeded"
        log = harness.log(second)
        assert "reusing cached environment" in log and harness.installed_line("tinypkg", "1.0") not in log
        assert command_output(log)[-1] == "tinypkg 1.0 imported"

        broken = f"brokenpkg @ {(tmp_path / 'missing' / 'brokenpkg-1.0-py3-none-any.whl').as_uri()}"
        for _ in range(2):  # a failed install is not remembered: the next job tries again
            job = harness.launch(harness.spec(url, "python train.py", requirements=(broken,)))
            state = harness.wait_final(job, timeout=60)
            assert (state.phase, state.reason) == ("failed", "install_failed"), state
            assert "brokenpkg-1.0-py3-none-any.whl" in state.message and "Traceback" not in state.message
            assert "reusing" not in harness.log(job) and state.started_at is None

    def test_logs_are_read_from_an_offset_and_can_be_followed(self, harness, repo):
        job = harness.launch(
            harness.spec(
                harness.code_url(repo.path),
                'for i in 1 2 3 4 5 6; do echo "line $i"; sleep 0.1; done; printf "no newline"',
            )
        )
        followed, while_running, offset = [], [], 0
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            final = harness.state(job).phase in FINAL_PHASES  # before reading: then the last read has it all
            new = list(harness.executor.logs(job, 0, since=offset))
            offset += sum(len(line.encode()) for line in new)
            followed += new
            if final:
                break
            # Counted as read while running only if the job is still running after the read: the job may end
            # between the two looks, and then the executor rightly hands out the last line without a newline.
            if harness.state(job).phase not in FINAL_PHASES:
                while_running += new
            time.sleep(0.05)
        assert [line for line in followed if not line.startswith("[portal]")] == [
            *(f"line {i}\n" for i in range(1, 7)),
            "no newline",
        ]
        assert any(line.startswith("line ") for line in while_running), "nothing was followed while the job ran"
        assert all(line.endswith("\n") for line in while_running), "a partial line was handed out while running"

        whole = harness.log(job)
        since = len(whole[: whole.index("line 4")].encode())
        assert list(harness.executor.logs(job, 0, since=since)) == ["line 4\n", "line 5\n", "line 6\n", "no newline"]
        assert list(harness.executor.logs(job, 0, since=len(whole.encode()))) == []

    def test_cancel_gives_the_command_its_grace_period_to_checkpoint(self, harness, repo):
        job = harness.launch(
            harness.spec(
                harness.code_url(repo.path),
                """trap 'echo saved > "$PORTAL_OUTPUT_DIR/checkpoint"; echo checkpointed; exit 0' TERM
               echo ready; while true; do sleep 0.1; done""",
            )
        )
        harness.wait_log(job, "ready\n")
        asked = time.monotonic()
        harness.executor.cancel(job, 30)
        assert time.monotonic() - asked < 0.5, "cancel must not wait for the grace period"
        state = harness.wait_final(job)
        assert (state.phase, state.reason) == ("cancelled", "cancelled")
        assert time.monotonic() - asked < 10, "a command that exits on SIGTERM does not wait out the grace"
        assert (harness.output(job) / "checkpoint").read_text() == "saved\n"
        assert "checkpointed" in harness.log(job)
        harness.assert_released(job)

    def test_cancel_kills_a_command_that_ignores_sigterm_once_the_grace_is_over(self, harness, repo):
        job = harness.launch(
            harness.spec(harness.code_url(repo.path), "trap '' TERM; echo ready; sleep 60; echo survived")
        )
        harness.wait_log(job, "ready\n")
        asked = time.monotonic()
        harness.executor.cancel(job, 1)
        state = harness.wait_final(job)
        assert (state.phase, state.reason) == ("cancelled", "cancelled")
        assert 1 <= time.monotonic() - asked < 10
        assert "survived" not in harness.log(job)
        harness.assert_released(job)

    def test_max_runtime_ends_the_job_as_deadline_exceeded(self, harness, repo):
        job = harness.launch(harness.spec(harness.code_url(repo.path), "echo started; sleep 60", max_runtime_seconds=1))
        state = harness.wait_final(job, timeout=15)
        assert (state.phase, state.reason) == ("failed", "deadline_exceeded"), state
        assert 1 <= state.finished_at - state.started_at < 6
        harness.assert_released(job)

    def test_a_failing_worker_stops_the_others_and_fails_the_job(self, harness, repo):
        job = harness.launch(
            harness.spec(
                harness.code_url(repo.path),
                'if [ "$RANK" = 1 ]; then echo "rank 1 is out of memory"; exit 3; fi; sleep 60',
                workers=2,
            )
        )
        state = harness.wait_final(job)
        assert (state.phase, state.reason, state.exit_code) == ("failed", "worker_failed", 3), state
        assert "worker 1" in state.message and "code 3" in state.message
        assert "rank 1 is out of memory" in state.message  # the last lines of its log
        assert state.finished_at - state.started_at < 10, "worker 0 was left sleeping"
        harness.assert_released(job)

    def test_launching_twice_runs_the_job_once(self, harness, repo):
        spec = harness.spec(harness.code_url(repo.path), "echo once")
        placement = harness.placement(())
        harness.launch(spec, placement)
        harness.executor.launch(spec, placement)
        assert harness.wait_final(spec.job_id).phase == "succeeded"
        harness.executor.launch(spec, placement)  # also after it ended
        assert harness.state(spec.job_id).phase == "succeeded"
        assert command_output(harness.log(spec.job_id)).count("once") == 1

    def test_unknown_jobs_are_left_out(self, harness, repo):
        job = harness.launch(harness.spec(harness.code_url(repo.path), "echo hi"))
        harness.wait_final(job)
        assert set(harness.executor.poll([job, "never-launched"])) == {job}
        assert list(harness.executor.logs("never-launched", 0)) == []
        assert list(harness.executor.logs(job, 7)) == []
        harness.executor.cancel("never-launched", 1)  # nothing to do, and no error
        assert harness.state(job).phase == "succeeded"
