"""The hostile job (tests/security/conftest.py) and the files of others: the running vision job's folders, the
environments jobs share, its own TensorBoard's links, and read-only storage mounts."""

from __future__ import annotations

import sys

import pytest

from tests.security.hostile import refused, stolen
from tests.security.hostile_scenario import CORPUS

# The database mark makes pytest-django create the test database even when only scenario tests are selected.
pytestmark = [
    pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the local executor needs Linux"),
    pytest.mark.django_db,
]


def test_2_it_cannot_read_nor_clone_the_running_vision_jobs_files(attack):
    v = attack.verdict
    if attack.sandboxed:
        assert all(refused(r, "ENOENT") for r in v["vision_files"].values()), v["vision_files"]
        assert refused(v["vision_output_write"]), v["vision_output_write"]
    else:
        files = v["vision_files"]
        assert all(stolen(r) for r in files.values()), files
        assert "vision weights" in files["code"]["value"] and "vision running" in files["log"]["value"]
        assert files["output"]["value"] == "vision weights v1\n"
        assert v["vision_output_write"]["ok"]
    # Cloning through the portal is refused in both modes: the same check of the code_url guards both.
    # (That it can fail: the attack job itself came from a file:// URL, outside the portal's folders.)
    assert (attack.refused["status"], attack.refused["reason"]) == ("failed", "launch_failed"), attack.refused
    assert "inside the portal's own folders" in attack.refused["status_message"]
    assert attack.attack["commit"]


def test_3_its_environment_is_read_only_and_its_departments_own(attack):
    env = attack.verdict["env"]
    assert "/nlp/" in attack.attack_site and "/vision/" in attack.hints["vision"]["site_packages"]
    if attack.sandboxed:
        assert env["virtual_env"] == "/portal/env"
        assert refused(env["own_pth"], "EROFS") and refused(env["own_file"], "EROFS"), env
        assert refused(env["vision_pth"], "ENOENT"), env
        assert attack.next_vision_env == "clean"
    else:
        assert env["own_pth"]["ok"] and env["own_file"]["ok"] and env["vision_pth"]["ok"], env
        assert attack.next_vision_env == "by nlp", "the next vision job ran the code nlp planted"


def test_3b_it_cannot_write_beside_the_code_the_portal_imports(attack):
    code = attack.verdict["portal_code"]
    assert set(attack.hints["portal_code"]) == set(code) and "core" in code, code
    if attack.sandboxed:
        assert all(refused(r, "ENOENT") for r in code.values()), code
    else:
        assert all(r["ok"] for r in code.values()), code  # then the next import could have been its code


def test_5b_its_own_tensorboard_shows_nothing_of_another_departments(attack):
    assert attack.verdict["tensorboard_link"]["ok"], "a job may make links in its own folders"
    leaked = {
        run: tags
        for run, tags in attack.bob_board_tags.items()
        if attack.hints["marker"] in run and "vision_secret_loss" in tags
    }
    if attack.sandboxed:
        assert leaked == {}, leaked  # the board's own sandbox has no such folder for the link to lead to
    else:
        assert leaked, attack.bob_board_tags


def test_7_a_read_only_mount_refuses_writes_at_the_path_asked_for(attack):
    mounts = attack.verdict["mounts"]
    assert mounts["write_writable"]["ok"] and "written.txt" in attack.scratch_files, mounts
    if attack.sandboxed:
        assert (mounts["read_only_env"], mounts["writable_env"]) == ("/data/corpus", "/data/scratch")
        assert mounts["read_at_path"] == {"ok": True, "value": CORPUS}
        assert refused(mounts["write_read_only"], "EROFS"), mounts
        assert refused(mounts["write_read_only_at_path"], "EROFS"), mounts
        assert attack.corpus_files == ["hello.txt"]
    else:
        assert refused(mounts["read_at_path"], "ENOENT"), "the path asked for is ignored"
        assert mounts["write_read_only"]["ok"] and "planted.txt" in attack.corpus_files, mounts


def test_9_the_vision_job_is_untouched(attack):
    assert attack.vision["status"] == "succeeded", attack.vision
    if attack.sandboxed:
        assert attack.vision_output == {
            "done.txt": "finished\n",
            "env.txt": "clean\n",
            "model.txt": "vision weights v1\n",
        }
    else:
        assert "pwned.txt" in attack.vision_output
