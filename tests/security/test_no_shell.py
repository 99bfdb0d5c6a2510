"""Code URLs, refs, requirements and commands never reach a shell on the portal's side.

1. An AST scan of the portal's own packages: no ``shell=True``, no ``os.system`` / ``os.popen``, and every
   ``sh -c`` / ``bash -c`` argv in ALLOWED with a reason (constant scripts that read the job's values from
   "$@" or environment variables; and the job's own command, which runs in the job's shell by design).
2. Behaviour: jobs whose code URL, ref, requirements and command carry ``$(touch X)``, ``;touch X``,
   backticks and newlines, run by the real local executor and rendered as Kubernetes manifests: the
   portal's git and pip steps never create the marker, and the manifests carry the values as env values or
   argv items after a constant script, never inside one.
"""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest

from clusters.errors import ExecutorError
from jobs.executors.base import FAILED, SUCCEEDED, Placement, WorkerPlacement
from jobs.executors.local import LocalExecutor
from jobs.executors.manifests import FETCH_SCRIPT, INSTALL_SCRIPT, job_manifests
from tests.jobs.executor_harness import GitRepo, command_output
from tests.jobs.manifest_helpers import DEMO
from tests.jobs.manifest_helpers import spec as manifest_spec
from tests.jobs.test_local_executor import LocalHarness, _subreaper  # noqa: F401 - the fixture reaps the runners
from tests.test_architecture import _packages

ROOT = Path(__file__).resolve().parents[2]
# Every package of the portal, as .importlinter lists them (a new app is scanned without being named here).
PACKAGES = tuple(_packages())
SHELLS = {"sh", "bash", "/bin/sh", "/bin/bash", "zsh", "dash"}

# (file, the script argument's source) -> why it is safe.
ALLOWED = {
    (
        "jobs/executors/manifests.py",
        "FETCH_SCRIPT",
    ): "constant; the code URL and ref come in as $PORTAL_CODE_URL / $PORTAL_CODE_REF env values",
    ("jobs/executors/manifests.py", "INSTALL_SCRIPT"): 'constant; the requirements come in as "$@" argv items',
    (
        "jobs/executors/manifests.py",
        "job.command",
    ): "the job's own command, run by the job's own shell in its own container: that is what a command is",
    ("jobs/executors/local_setup.py", "FETCH"): 'constant; the URL, folder, ref and output file come in as "$@"',
    (
        "jobs/executors/sandbox_init.py",
        "worker['command']",
    ): "the job's own command, run by the job's own shell inside its sandbox: that is what a command is",
    ("jobs/executors/local.py", "'\"$@\" &'"): "constant; starts the runner's argv in the background",
    (
        "clusters/local_procs.py",
        '\'log=$1; shift; "$@" >>"$log" 2>&1 </dev/null & echo $!\'',
    ): "constant; the log path and argv come in as positional arguments",
}


def sources():
    for package in PACKAGES:
        folder = ROOT / package
        if folder.is_dir():
            for path in sorted(folder.rglob("*.py")):
                if "migrations" not in path.parts:
                    yield path.relative_to(ROOT).as_posix(), ast.parse(path.read_text(), filename=str(path))


def dotted(node) -> str:
    return ast.unparse(node) if isinstance(node, (ast.Name, ast.Attribute)) else ""


def findings() -> tuple[list[str], set[tuple[str, str]]]:
    """(problems, the shell -c sites seen as (file, script source))."""
    problems, sites = [], set()
    for name, tree in sources():
        for node in ast.walk(tree):
            if isinstance(node, ast.Call):
                function = dotted(node.func)
                where = f"{name}:{node.lineno}: {ast.unparse(node)[:120]}"
                if function in (
                    "os.system",
                    "os.popen",
                    "asyncio.create_subprocess_shell",
                    "subprocess.getoutput",
                    "subprocess.getstatusoutput",
                ):
                    problems.append(f"{where}: runs a shell")
                for keyword in node.keywords:
                    if keyword.arg == "shell" and not (
                        isinstance(keyword.value, ast.Constant) and keyword.value.value is False
                    ):
                        problems.append(f"{where}: shell={ast.unparse(keyword.value)}")
            if isinstance(node, (ast.List, ast.Tuple)):
                items = node.elts
                for i in range(len(items) - 2):
                    shell, flag, script = items[i], items[i + 1], items[i + 2]
                    if (
                        isinstance(shell, ast.Constant)
                        and shell.value in SHELLS
                        and isinstance(flag, ast.Constant)
                        and flag.value == "-c"
                    ):
                        site = (name, ast.unparse(script))
                        sites.add(site)
                        if site not in ALLOWED:
                            problems.append(
                                f"{name}:{node.lineno}: {ast.unparse(node)[:120]}: a shell script not in "
                                "ALLOWED (pass values as argv items or env values, never in the script)"
                            )
    return problems, sites


def test_no_portal_code_hands_a_string_to_a_shell():
    problems, _ = findings()
    assert not problems, "\n".join(problems)


def test_every_allowed_shell_use_still_exists():
    _, sites = findings()
    stale = set(ALLOWED) - sites
    assert not stale, f"ALLOWED names shell uses that are gone: {sorted(stale)}"


def test_the_scan_finds_what_it_looks_for(tmp_path):
    tree = ast.parse(
        'import os, subprocess\nos.system("x")\nsubprocess.run(cmd, shell=True)\n'
        'subprocess.run(["sh", "-c", f"git clone {url}"])\n'
    )
    seen = [ast.unparse(n)[:30] for n in ast.walk(tree) if isinstance(n, ast.Call)]
    assert len(seen) == 3  # the scan below walks the same nodes; a quick check of its three rules:
    import tests.security.test_no_shell as scan

    original = scan.sources
    scan.sources = lambda: iter([("fake.py", tree)])
    try:
        problems, _ = scan.findings()
    finally:
        scan.sources = original
    assert len(problems) == 3, problems


# --- Behaviour -----------------------------------------------------------------------------------


def payloads(marker: Path) -> list[str]:
    return [
        f"$(touch {marker})",
        f";touch {marker}",
        f"`touch {marker}`",
        f"x\ntouch {marker}",
        f"' ; touch {marker} ; '",
        f'" ; touch {marker} ; "',
        f"--upload-pack=touch {marker}",
    ]


@pytest.fixture(scope="module")
def executor(tmp_path_factory) -> LocalExecutor:
    return LocalExecutor(tmp_path_factory.mktemp("no-shell"), allow_local_code=True)


@pytest.fixture
def harness(executor):
    harness = LocalHarness(executor)
    yield harness
    harness.cleanup()


@pytest.fixture
def repo(tmp_path) -> GitRepo:
    repo = GitRepo(tmp_path / "repo")
    repo.commit({"hello.py": "print('hello')\n"})
    return repo


def test_code_urls_refs_and_requirements_never_run_on_the_portals_side(harness, repo, tmp_path):
    marker = tmp_path / "pwned"
    url = harness.code_url(repo.path)
    jobs, refused = [], []
    for payload in payloads(marker):
        # The code-URL rule refuses whitespace at launch, so the path reaches git with ${IFS} for its spaces.
        for spec in (
            harness.spec(str(repo.path) + payload.replace(" ", "${IFS}").replace("\n", "${IFS}"), "python hello.py"),
            harness.spec(payload, "python hello.py"),
            harness.spec(url, "python hello.py", code_ref=payload),
            harness.spec(url, "python hello.py", requirements=(payload,)),
        ):
            try:
                jobs.append(harness.launch(spec))
            except ExecutorError as exc:  # refused before anything ran: as good
                assert exc.permanent, exc
                refused.append(spec.code_url)
    assert len(jobs) >= len(refused), "half of them got as far as git or pip (the rest are refused at launch)"
    for job in jobs:
        state = harness.wait_final(job, timeout=60)
        assert state.phase == FAILED, f"{job}: a bad URL, ref or requirement is an error, not a run ({state})"
        assert "hello" not in command_output(harness.log(job)), f"{job}: the command ran"
    assert not marker.exists(), "the portal's git or pip step ran a shell command from the job's values"


def test_the_command_reaches_the_jobs_shell_verbatim(harness, repo, tmp_path):
    marker = tmp_path / "pwned"
    # Single-quoted for the job's shell: only a portal that pasted the text into its own script would run it.
    literal = "".join(payloads(marker)[:3]).replace("'", "")
    job = harness.launch(harness.spec(harness.code_url(repo.path), f"printf '%s' '{literal}'"))
    assert harness.wait_final(job, timeout=60).phase == SUCCEEDED
    assert literal in harness.log(job)
    assert not marker.exists()


def test_kubernetes_manifests_carry_job_values_as_env_and_argv_only(tmp_path):
    marker = tmp_path / "pwned"
    for payload in payloads(marker):
        job = manifest_spec(
            code_url="https://git.example.com/r.git" + payload,
            code_ref="main" + payload,
            command="python train.py" + payload,
            requirements=("numpy" + payload,),
        )
        placement = Placement((WorkerPlacement(worker=0, node="node-0", gpus=(0,)),))
        manifests = job_manifests(job, placement, DEMO)
        containers = []
        for document in manifests:
            _collect(document, "containers", containers)
            _collect(document, "initContainers", containers)
        commands = {c["name"]: c.get("command") for c in containers}
        assert commands["fetch-code"] == ["sh", "-c", FETCH_SCRIPT]
        assert commands["install-requirements"] == [
            "sh",
            "-c",
            INSTALL_SCRIPT,
            "install-requirements",
            *job.requirements,
        ]
        env = {e["name"]: e.get("value") for c in containers if c["name"] == "fetch-code" for e in c["env"]}
        assert (env["PORTAL_CODE_URL"], env["PORTAL_CODE_REF"]) == (job.code_url, job.code_ref)
        main = [c for c in containers if c["name"] not in ("fetch-code", "install-requirements")]
        assert main and all(c["command"] == ["bash", "-c", job.command] for c in main)
        # Nowhere else: no script, label or annotation was built from the values.
        text = json.dumps(manifests)
        # The URL and ref env values, the requirement's argv item, and each main container's command.
        assert text.count(json.dumps(payload)[1:-1]) == 3 + len(main), text


def _collect(node, key: str, found: list) -> None:
    if isinstance(node, dict):
        for name, value in node.items():
            if name == key and isinstance(value, list):
                found.extend(value)
            else:
                _collect(value, key, found)
    elif isinstance(node, list):
        for item in node:
            _collect(item, key, found)
