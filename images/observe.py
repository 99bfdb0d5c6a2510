"""What a build's Job and pods say about it: its phase, why it failed, the digest Kaniko pushed. Pure: no Django,
no I/O (the dicts are the API server's objects)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from images.manifests import CONTAINER

QUEUED, BUILDING, SUCCEEDED, FAILED = "queued", "building", "succeeded", "failed"
DIGEST = re.compile(r"sha256:[0-9a-f]{64}")
LOG_TAIL_LINES = 20
PULL_ERRORS = ("ErrImagePull", "ImagePullBackOff", "InvalidImageName")


@dataclass(frozen=True)
class Observed:
    phase: str  # queued (no build pod running yet) | building | succeeded | failed
    message: str = ""
    digest: str = ""  # sha256:... when Kaniko reported what it pushed
    pod: str = ""  # the newest pod: its log tells the story


def observe(job: dict[str, Any] | None, pods: list[dict[str, Any]]) -> Observed:
    """The build's phase from its Job's conditions and its newest pod.

    A Job condition wins (Failed before Complete): it also covers the deadline, when the pods are gone.
    Without one, the pod's phase says it; the Job controller adds its condition a moment after the pod ends.
    """
    pod = newest(pods)
    name = pod["metadata"]["name"] if pod else ""
    terminated = _state(pod).get("terminated") or {}
    found = DIGEST.search(terminated.get("message") or "") if terminated.get("exitCode") == 0 else None
    digest = found.group(0) if found else ""
    if job is None:
        return Observed(FAILED, "The build's Job is gone from the cluster (deleted outside the portal?).", pod=name)
    conditions = {
        c.get("type"): c for c in (job.get("status") or {}).get("conditions") or [] if c.get("status") == "True"
    }
    if "Failed" in conditions:
        why = conditions["Failed"].get("message") or conditions["Failed"].get("reason") or "the build failed"
        return Observed(FAILED, f"Kubernetes: {why.rstrip('.')}.", pod=name)
    if "Complete" in conditions:
        return Observed(SUCCEEDED, digest=digest, pod=name)
    phase = (pod.get("status") or {}).get("phase") if pod else None
    if phase == "Succeeded":
        return Observed(SUCCEEDED, digest=digest, pod=name)
    if phase == "Failed":
        code = terminated.get("exitCode")
        reason = ((pod or {}).get("status") or {}).get("message") or ""
        return Observed(
            FAILED,
            reason or (f"Kaniko exited with code {code}." if code is not None else "The build pod failed."),
            pod=name,
        )
    if phase == "Running":
        return Observed(BUILDING, pod=name)
    waiting = _state(pod).get("waiting") or {}
    if waiting.get("reason") in PULL_ERRORS:
        return Observed(
            QUEUED, f"Cannot pull the Kaniko image: {waiting.get('message') or waiting['reason']}", pod=name
        )
    return Observed(QUEUED, "Waiting for the build pod to start.", pod=name)


def newest(pods: list[dict[str, Any]]) -> dict[str, Any] | None:
    return max(pods, key=lambda pod: pod["metadata"].get("creationTimestamp") or "", default=None)


def failure_message(observed: Observed, log: str) -> str:
    """What a person reads on a failed build: the reason and the last lines Kaniko wrote."""
    tail = [line for line in log.splitlines() if line.strip()][-LOG_TAIL_LINES:]
    return observed.message + ("\n" + "\n".join(tail) if tail else "")


def _state(pod: dict[str, Any] | None) -> dict[str, Any]:
    for status in ((pod or {}).get("status") or {}).get("containerStatuses") or []:
        if status.get("name") == CONTAINER:
            return status.get("state") or {}
    return {}
