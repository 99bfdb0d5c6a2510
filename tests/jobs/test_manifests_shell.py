"""Nothing from a job reaches a shell string in its manifests: the code URL, ref and requirements are values,
and the constant fetch and install scripts run what they are given as data."""

from __future__ import annotations

import os
import subprocess

import pytest

from jobs.executors.manifests import FETCH_SCRIPT, INSTALL_SCRIPT
from tests.jobs.manifest_helpers import (
    env_of,
    pod_specs,
    render,
    spec,
)

# ------------------------------------------------------------------------------ no shell injection

EVIL_URL = "https://git.example.com/$(touch pwned-url)`touch pwned-tick`.git"
EVIL_REF = "main;touch pwned-ref"
EVIL_REQUIREMENT = "numpy; touch pwned-req"


def strings_in(node, path=""):
    if isinstance(node, dict):
        for key, value in node.items():
            yield from strings_in(value, f"{path}.{key}")
    elif isinstance(node, list):
        for index, value in enumerate(node):
            yield from strings_in(value, f"{path}[{index}]")
    elif isinstance(node, str):
        yield path, node


@pytest.mark.parametrize("framework", ["pytorch", "tensorflow", "mpi", "python"])
def test_the_code_url_ref_and_requirements_are_only_ever_values_never_shell_text(framework):
    manifest = render(spec(framework=framework, code_url=EVIL_URL, code_ref=EVIL_REF, requirements=(EVIL_REQUIREMENT,)))
    places = {
        text: [path for path, value in strings_in(manifest) if text in value]
        for text in (EVIL_URL, EVIL_REF, EVIL_REQUIREMENT)
    }
    for template in pod_specs(manifest).values():
        fetch, install = template["spec"]["initContainers"]
        assert fetch["command"] == ["sh", "-c", FETCH_SCRIPT] and install["command"][:4] == [
            "sh",
            "-c",
            INSTALL_SCRIPT,
            "install-requirements",
        ]
    assert places[EVIL_URL] and all(p.endswith("initContainers[0].env[0].value") for p in places[EVIL_URL])
    assert places[EVIL_REF] and all(p.endswith("initContainers[0].env[1].value") for p in places[EVIL_REF])
    assert places[EVIL_REQUIREMENT] and all(
        p.endswith("initContainers[1].command[4]") for p in places[EVIL_REQUIREMENT]
    )


def test_the_fetch_script_runs_what_it_is_given_as_data(tmp_path):
    repo = tmp_path / "repo$(touch pwned-url)"
    subprocess.run(["git", "init", "--quiet", "--initial-branch=main", str(repo)], check=True)
    (repo / "train.py").write_text("print('hi')\n")
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t", "-C", str(repo)]
    subprocess.run([*git, "add", "."], check=True)
    subprocess.run([*git, "commit", "--quiet", "-m", "x"], check=True)
    fetch = pod_specs(render(spec(code_url=str(repo), code_ref=EVIL_REF)))["Master"]["spec"]["initContainers"][0]
    env = {
        **env_of(fetch),
        "PORTAL_CODE_DIR": str(tmp_path / "code"),
        "GIT_ALLOW_PROTOCOL": "file",
        "PATH": os.environ["PATH"],
        "HOME": str(tmp_path),
    }
    result = subprocess.run(fetch["command"], env=env, cwd=tmp_path, capture_output=True, text=True)
    assert result.returncode != 0 and "main;touch pwned-ref" in result.stderr  # git: no such ref, said verbatim
    assert (tmp_path / "code" / "train.py").exists()  # the odd URL was cloned as the path it is
    assert not list(tmp_path.glob("pwned*")) and not list((tmp_path / "code").glob("pwned*"))


@pytest.mark.parametrize("repo_requirements", [True, False])
def test_the_install_script_hands_each_requirement_to_pip_as_one_argument(tmp_path, repo_requirements):
    # A stand-in for the image's python that records how pip was called.
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "python").write_text('#!/bin/sh\nprintf "%s\\n" "$@" > "$PIP_ARGS"\n')
    (bin_dir / "python").chmod(0o755)
    code = tmp_path / "code"
    code.mkdir()
    if repo_requirements:
        (code / "requirements.txt").write_text("scipy\n")
    install = pod_specs(render(spec(requirements=(EVIL_REQUIREMENT, "pandas>=2"))))["Master"]["spec"]["initContainers"][
        1
    ]
    env = {
        **env_of(install),
        "PORTAL_CODE_DIR": str(code),
        "PORTAL_PACKAGES_DIR": str(tmp_path / "packages"),
        "PATH": f"{bin_dir}:{os.environ['PATH']}",
        "PIP_ARGS": str(tmp_path / "pip-args"),
    }
    subprocess.run(install["command"], env=env, cwd=tmp_path, check=True)
    args = (tmp_path / "pip-args").read_text().splitlines()
    reading = ["-r", str(code / "requirements.txt")] if repo_requirements else []
    assert args == [
        "-m",
        "pip",
        "install",
        "--no-input",
        "--disable-pip-version-check",
        "--target",
        str(tmp_path / "packages"),
        *reading,
        "--",
        EVIL_REQUIREMENT,
        "pandas>=2",
    ]
    assert not list(tmp_path.glob("pwned*"))


def test_the_install_script_does_nothing_without_requirements(tmp_path):
    (tmp_path / "code").mkdir()
    install = pod_specs(render(spec(requirements=())))["Master"]["spec"]["initContainers"][1]
    env = {
        **env_of(install),
        "PORTAL_CODE_DIR": str(tmp_path / "code"),
        "PORTAL_PACKAGES_DIR": str(tmp_path / "p"),
        "PATH": "/nonexistent:/usr/bin:/bin",
    }
    result = subprocess.run(install["command"], env=env, cwd=tmp_path, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
