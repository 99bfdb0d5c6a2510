"""On a machine with NVIDIA GPUs (`make test-gpu`): a sandboxed job sees and uses only the GPUs it was given.

Skipped where there is no /dev/nvidia0 (every CI machine): what the sandbox binds is then nothing to look at.
Checks what CUDA_VISIBLE_DEVICES alone never fenced: the other GPUs' device nodes are not there, nvidia-smi
inside lists only the job's GPU, and CUDA (through PyTorch when the machine has it) counts one device and
computes on it.
"""

from __future__ import annotations

import glob
import json
import os
import shutil

import pytest

from jobs.executors.local import LocalExecutor
from tests.jobs.executor_harness import GitRepo, command_output
from tests.jobs.test_local_executor import LocalHarness, _subreaper  # noqa: F401 - the fixture reaps the runners

GPUS = sorted(int(path[len("/dev/nvidia") :]) for path in glob.glob("/dev/nvidia[0-9]*"))
pytestmark = pytest.mark.skipif(not GPUS, reason="no NVIDIA GPU on this machine (run on a GPU host: make test-gpu)")

PROBE = """\
import glob, json, os, shutil, subprocess, pathlib
seen = {"nodes": sorted(glob.glob("/dev/nvidia[0-9]*")), "visible": os.environ.get("CUDA_VISIBLE_DEVICES")}
if shutil.which("nvidia-smi"):
    seen["smi"] = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True).stdout.strip().splitlines()
try:
    import torch
    seen["torch_count"] = torch.cuda.device_count()
    seen["torch_sum"] = float(torch.ones(1024, device="cuda").sum()) if seen["torch_count"] else None
except ImportError:
    pass
pathlib.Path(os.environ["PORTAL_OUTPUT_DIR"], "gpus.json").write_text(json.dumps(seen))
print(json.dumps(seen))
"""


@pytest.fixture
def harness(tmp_path_factory):
    harness = LocalHarness(
        LocalExecutor(
            tmp_path_factory.mktemp("gpu"),
            isolation="sandbox",
            extra_ro_paths=tuple(p for p in ("/opt", "/usr/local/cuda") if os.path.isdir(p)),
        )
    )
    yield harness
    harness.cleanup()


def test_a_sandboxed_job_sees_only_the_gpu_it_was_given(harness, tmp_path):
    repo = GitRepo(tmp_path / "repo")
    repo.commit({"probe.py": PROBE})
    given = GPUS[-1]
    job = harness.launch(harness.spec(repo.path.as_uri(), "python probe.py"), harness.placement((given,)))
    state = harness.wait_final(job, timeout=120)
    assert state.phase == "succeeded", (state, harness.log(job))
    seen = json.loads((harness.output(job) / "gpus.json").read_text())
    print(command_output(harness.log(job)))
    assert seen["nodes"] == [f"/dev/nvidia{given}"]
    assert seen["visible"] == "0"  # CUDA numbers the one GPU it can open from 0
    if shutil.which("nvidia-smi"):
        assert len(seen.get("smi", [])) == 1, seen
    if "torch_count" in seen:
        assert seen["torch_count"] == 1 and seen["torch_sum"] == 1024.0
