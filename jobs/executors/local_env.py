"""The job environment contract (docs/architecture.md) as one worker of a local job sees it: the variables the
runner sets (``worker_env``), the folders they name (``View``: the sandbox's paths, or the host's in trusted
mode) and the names a job's own env cannot override. The runner (local_runner.py) starts the workers with it.
No Django here.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import sys

from jobs.executors.base import JobSpec, WorkerPlacement
from jobs.executors.job_env import PORTAL_SET_ENV
from jobs.executors.local_setup import inherited_env

RESERVED = PORTAL_SET_ENV | {"VIRTUAL_ENV"}

# Where a sandboxed job finds its folders.
OUTPUT_AT, TENSORBOARD_AT, CHECKPOINT_AT = (
    "/portal/output",
    "/portal/tensorboard",
    "/portal/checkpoint",
)  # CODE_AT: local_setup.py
SANDBOX_MASTER_PORT = 29500


def _without_portal_venv(path: str) -> str:
    # The portal's own virtualenv must not be on a job's PATH: `pip install` there would change the portal.
    if sys.prefix == sys.base_prefix:
        return path
    portal_bin = os.path.join(sys.prefix, "bin")
    return ":".join(entry for entry in path.split(":") if os.path.realpath(entry) != os.path.realpath(portal_bin))


def env_name(name: str) -> str:
    return "PORTAL_DATA_" + re.sub(r"[^A-Z0-9]", "_", name.upper())


@dataclasses.dataclass(frozen=True)
class View:
    """Where the job's folders are, as its commands see them (sandbox paths, or the host's in trusted mode)."""

    code: str
    output: str
    tensorboard: str
    checkpoint: str
    env: str
    master_port: int
    mounts: dict[str, str]  # storage name -> path


def worker_env(
    spec: JobSpec,
    placement: WorkerPlacement,
    *,
    local_rank: int,
    view: View,
    launch: dict,
    sandboxed: bool,
    visible_gpus: str | None = None,
) -> dict[str, str]:
    """The job environment contract (docs/architecture.md), as one worker sees it."""
    env = inherited_env(sandboxed=sandboxed)
    env.update({k: v for k, v in spec.env.items() if k not in RESERVED})
    path = env.get("PATH") or os.defpath
    env.update(
        {
            "PORTAL_JOB_ID": spec.job_id,
            "PORTAL_JOB_NAME": spec.name,
            "WORLD_SIZE": str(spec.workers),
            "RANK": str(placement.worker),
            "LOCAL_RANK": str(local_rank),
            "MASTER_ADDR": "127.0.0.1" if sandboxed else launch["master_addr"],
            "MASTER_PORT": str(view.master_port),
            "CUDA_VISIBLE_DEVICES": visible_gpus
            if visible_gpus is not None
            else ",".join(str(g) for g in placement.gpus),
            "TENSORBOARD_LOG_DIR": view.tensorboard,
            "PORTAL_OUTPUT_DIR": view.output,
            "PORTAL_CHECKPOINT_DIR": view.checkpoint,
            "PORTAL_RUN_INDEX": str(spec.run_index),
            "VIRTUAL_ENV": view.env,
            "PATH": f"{view.env}/bin:{_without_portal_venv(path)}",
            "PYTHONUNBUFFERED": "1",
        }
    )
    if spec.run_index > 0:
        env["PORTAL_RESUMED"] = "1"
    for mount in spec.mounts:
        env[env_name(mount.name)] = view.mounts[mount.name]
    if placement.gpu_fraction is not None:
        env["PORTAL_GPU_FRACTION"] = str(placement.gpu_fraction)
    if spec.framework == "tensorflow":
        addr = "127.0.0.1" if sandboxed else launch["master_addr"]
        ports = [SANDBOX_MASTER_PORT + 1 + i for i in range(spec.workers)] if sandboxed else launch["tf_ports"]
        hosts = [f"{addr}:{port}" for port in ports]
        env["TF_CONFIG"] = json.dumps(
            {"cluster": {"worker": hosts}, "task": {"type": "worker", "index": placement.worker}}
        )
    return env
