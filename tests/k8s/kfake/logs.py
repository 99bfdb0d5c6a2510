"""Pod logs (``GET .../pods/NAME/log``), as the kubelet serves them through the API server.

``container`` is required when the pod has more than one (400 otherwise, naming them), init containers
included; ``tailLines`` keeps the last lines; ``follow`` streams until the container terminated or the pod
went. A container that is still waiting and has printed nothing is a 400 "is waiting to start: REASON",
the message the ``kubernetes`` client passes on. The text is what ``fake.operator.log`` wrote.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import TYPE_CHECKING

import aiohttp.web

from tests.k8s.kfake.api import ApiError

if TYPE_CHECKING:
    from tests.k8s.kfake.fake import KubeFake


async def pod_log(fake: KubeFake, raw, namespace: str, name: str, params: dict):
    with fake.lock:
        pod = fake._read((("", "v1", "pods"), namespace, name))
        names = [c["name"] for c in pod["spec"].get("containers", [])]
        init_names = [c["name"] for c in pod["spec"].get("initContainers", [])]
        container = params.get("container")
        if not container:
            if len(names) != 1:
                raise ApiError(
                    400, "BadRequest", f"a container name must be specified for pod {name}, choose one of: {names}"
                )
            container = names[0]
        if container not in names + init_names:
            raise ApiError(400, "BadRequest", f"container {container} is not valid for pod {name}")
        statuses = {
            s["name"]: s
            for s in pod.get("status", {}).get("containerStatuses", [])
            + pod.get("status", {}).get("initContainerStatuses", [])
        }
        state = statuses.get(container, {}).get("state", {"waiting": {"reason": "PodInitializing"}})
        if "waiting" in state and (namespace, name, container) not in fake.store.logs:
            reason = state["waiting"].get("reason", "ContainerCreating")
            raise ApiError(400, "BadRequest", f'container "{container}" in pod "{name}" is waiting to start: {reason}')
    follow = params.get("follow") in ("true", "1", "True")
    tail = int(params["tailLines"]) if params.get("tailLines") else None

    def text() -> str:
        with fake.lock:
            return fake.store.logs.get((namespace, name, container), "")

    def done() -> bool:
        with fake.lock:
            current = fake.store.objects.get((("", "v1", "pods"), namespace, name))
            status = {
                s["name"]: s
                for s in (current or {}).get("status", {}).get("containerStatuses", [])
                + (current or {}).get("status", {}).get("initContainerStatuses", [])
            }
            return current is None or "terminated" in status.get(container, {}).get("state", {})

    content = text()
    if tail is not None:
        lines = content.splitlines(keepends=True)
        content = "".join(lines[-tail:]) if tail else ""
    if not follow:
        return aiohttp.web.Response(text=content, content_type="text/plain")
    response = aiohttp.web.StreamResponse(status=200, headers={"Content-Type": "text/plain"})
    await response.prepare(raw)
    sent = len(text()) - len(content)
    with contextlib.suppress(ConnectionResetError, asyncio.CancelledError):
        while True:
            ended = done()
            current = text()
            if len(current) > sent:
                await response.write(current[sent:].encode())
                sent = len(current)
            if ended:
                break
            changed = fake._changed
            assert changed is not None
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(changed.wait(), timeout=0.5)
        await response.write_eof()
    return response
