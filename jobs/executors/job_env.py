"""The names of the job environment contract (docs/architecture.md) that the portal sets in every job, on
either executor: a job's own ``env`` cannot override them. Each executor adds the few names it sets besides
(local: VIRTUAL_ENV; Kubernetes: PYTHONPATH, NVIDIA_VISIBLE_DEVICES). Pure: no Django, no I/O.
"""

from __future__ import annotations

PORTAL_SET_ENV = frozenset(
    {
        "PORTAL_JOB_ID",
        "PORTAL_JOB_NAME",
        "WORLD_SIZE",
        "RANK",
        "LOCAL_RANK",
        "MASTER_ADDR",
        "MASTER_PORT",
        "TF_CONFIG",
        "CUDA_VISIBLE_DEVICES",
        "PORTAL_GPU_FRACTION",
        "TENSORBOARD_LOG_DIR",
        "PORTAL_OUTPUT_DIR",
        "PORTAL_CHECKPOINT_DIR",
        "PORTAL_RUN_INDEX",
        "PORTAL_RESUMED",
        "PYTHONUNBUFFERED",
    }
)
