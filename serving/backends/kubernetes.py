"""Model servers as KServe InferenceServices (the serving backend of clusters with the kubernetes backend).

One InferenceService per variant (serving/backends/manifests.py says why), created, read and
deleted through clusters.kube.Kube, the portal's one wrapper of the Kubernetes client. No
Django here: serving/servers.py owns the rows and the rules (when to start, restart, stop).

A ServerProcess of this backend: ``handle`` is "<namespace>/<name>" of the InferenceService, ``pid`` is
None, ``url`` is KServe's address once it has one (``url(process)``), ``model_name`` the name KServe
serves it under (the InferenceService's name: /v1/models/<name>:predict).
"""

from __future__ import annotations

from dataclasses import dataclass

from clusters.backends import kube_call, kube_where
from clusters.errors import ExecutorError
from clusters.k8s import MANAGED_BY, ManifestError
from clusters.manifest_validation import manifest_problems
from serving.backends import manifests
from serving.backends.local import ServerProcess, ServerSpec, ServingError
from serving.backends.manifests import API_VERSION, KIND, InferenceTarget, ServingSettings

LOG_LINES = 20
PREDICTOR_CONTAINER = "kserve-container"  # the model server's container in KServe's predictor pods
SELECTOR = f"app.kubernetes.io/managed-by={MANAGED_BY},{manifests.SERVER_ID_LABEL}"


@dataclass(frozen=True)
class KServeSpec(ServerSpec):
    """A ServerSpec with what a cluster needs besides: the variant's deployment, namespace, replicas."""

    target: InferenceTarget | None = None


class KubernetesServingBackend:
    def __init__(self, kube, settings: ServingSettings):
        self.kube = kube  # clusters.kube.Kube
        self.settings = settings

    def start(self, spec: ServerSpec) -> ServerProcess:
        """Create the InferenceService; one that exists already is given the wanted spec if it differs."""
        target = spec.target if isinstance(spec, KServeSpec) else None
        if target is None:
            raise ServingError(
                "A Kubernetes model server needs its deployment's target (a KServeSpec).", permanent=True
            )
        try:
            manifest = manifests.inference_service(target, self.settings)
        except ManifestError as exc:  # a setting is missing or wrong: an admin can act on the message
            raise ServingError(str(exc), permanent=True) from exc
        problems = manifest_problems(manifest)
        if problems:  # a bug of the builder: never send the cluster what it would refuse or prune
            raise ServingError("The InferenceService is invalid:\n" + "\n".join(problems), permanent=True)
        metadata = manifest["metadata"]
        obj, created = self._call(lambda: self.kube.create(manifest))
        if not created:
            if (obj.get("metadata") or {}).get("deletionTimestamp"):
                raise ServingError(
                    f"InferenceService {metadata['name']} is still being deleted; starting it again once it is gone.",
                    permanent=False,
                )
            patch = manifests.spec_patch(obj, manifest)
            if patch is not None:
                obj = self._call(
                    lambda: self.kube.patch(API_VERSION, KIND, metadata["namespace"], metadata["name"], patch)
                )
        return ServerProcess(
            url=manifests.address(obj) if manifests.is_ready(obj) else "",
            model_name=metadata["name"],
            handle=f"{metadata['namespace']}/{metadata['name']}",
        )

    def ready(self, process: ServerProcess) -> bool:
        obj = self._get(process)
        return obj is not None and manifests.is_ready(obj) and bool(manifests.address(obj))

    def url(self, process: ServerProcess) -> str:
        """KServe's address of a ready InferenceService ("" before it has one)."""
        obj = self._get(process)
        return manifests.address(obj) if obj is not None else ""

    def alive(self, process: ServerProcess) -> bool:
        obj = self._get(process)
        return (
            obj is not None and not (obj.get("metadata") or {}).get("deletionTimestamp") and not manifests.failure(obj)
        )

    def stop(self, process: ServerProcess) -> None:
        namespace, name = _where(process)
        # Background: the name is free again at once (a restart creates it anew); KServe's own
        # owner references take its Deployments, Services and pods with it.
        self._call(lambda: self.kube.delete(API_VERSION, KIND, namespace, name, propagation="Background"))

    def output(self, server_id: int) -> str:
        """KServe's own word on it (Ready condition, last failure), then the predictor pod's last lines."""
        try:
            found, _ = self.kube.list(API_VERSION, KIND, labels=f"{manifests.SERVER_ID_LABEL}={server_id}")
            if not found:
                return ""
            obj = found[0]
            metadata = obj["metadata"]
            lines = [text for text in (manifests.failure(obj), manifests.ready_condition(obj).get("message")) if text]
            pods, _ = self.kube.list(
                "v1", "Pod", namespace=metadata["namespace"], labels=f"{manifests.ISVC_LABEL}={metadata['name']}"
            )
            for pod in pods[:1]:
                log = self.kube.pod_log(metadata["namespace"], pod["metadata"]["name"], container=PREDICTOR_CONTAINER)
                lines += log.splitlines()[-LOG_LINES:]
        except ExecutorError:
            return ""  # only used to say why a server died: the cluster being unreachable must not hide that
        return "\n".join(dict.fromkeys(lines))

    def running(self) -> dict[int, ServerProcess]:
        """Every InferenceService the portal made on this cluster that is not being deleted, by variant id."""
        found, _ = self._call(lambda: self.kube.list(API_VERSION, KIND, labels=SELECTOR))
        running = {}
        for obj in found:
            metadata = obj["metadata"]
            server_id = (metadata.get("labels") or {}).get(manifests.SERVER_ID_LABEL, "")
            if server_id.isdigit() and not metadata.get("deletionTimestamp"):
                running[int(server_id)] = ServerProcess(
                    url=manifests.address(obj),
                    model_name=metadata["name"],
                    handle=f"{metadata['namespace']}/{metadata['name']}",
                )
        return running

    def forget(self, server_id: int) -> None:
        """Nothing is kept outside the cluster."""

    def _get(self, process: ServerProcess) -> dict | None:
        namespace, name = _where(process)
        return self._call(lambda: self.kube.get(API_VERSION, KIND, namespace, name))

    @staticmethod
    def _call(operation):
        return kube_call(operation, ServingError)


def _where(process: ServerProcess) -> tuple[str, str]:
    return kube_where(process.handle, ServingError, "an InferenceService")
