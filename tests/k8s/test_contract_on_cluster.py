"""The executor contract suite against a real cluster: ``KUBECONFIG=... make test-k8s``.

Skipped unless KUBECONFIG is set. The cluster needs the Kubeflow Training Operator, a namespace the
portal may create (``portal-vision``) and these, read from the environment:
- PORTAL_K8S_GIT_HOST: an address of this machine that the cluster's pods can reach; the harness serves
  the tests' git repositories there with ``git daemon`` (port PORTAL_K8S_GIT_PORT, default 9418);
- PORTAL_K8S_JOB_VOLUME: a local path where the ``portal-jobs`` PVC of ``portal-vision`` is mounted on this
  machine (e.g. its NFS export), to read what jobs wrote to PORTAL_OUTPUT_DIR;
- PORTAL_K8S_STORAGE_PVCS: ``name=pvc,...`` for the storages ``vision-datasets`` and ``scratch.2024``:
  PVCs in ``portal-vision`` whose root holds hello.txt containing the storage's name;
- PORTAL_K8S_SETTINGS (optional): the cluster's settings JSON (ClusterSettings keys), e.g. a storage
  class for the job volume or an image registry mirror.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from clusters.k8s import ClusterSettings
from clusters.kube import Kube
from jobs.executors.base import Mount, ObservedState
from jobs.executors.kubernetes import KubernetesExecutor
from tests.jobs.executor_contract import ExecutorContract
from tests.jobs.executor_harness import Harness, wait_for

pytestmark = pytest.mark.skipif(not os.environ.get("KUBECONFIG"), reason="needs a real cluster: set KUBECONFIG")


class ClusterHarness(Harness):
    def __init__(self, executor, kube: Kube, git_root: Path):
        super().__init__(executor)
        self.kube, self.git_root = kube, git_root
        self.pvcs = dict(
            item.split("=", 1) for item in filter(None, os.environ.get("PORTAL_K8S_STORAGE_PVCS", "").split(","))
        )

    def code_url(self, path: Path) -> str:
        host, port = os.environ["PORTAL_K8S_GIT_HOST"], os.environ.get("PORTAL_K8S_GIT_PORT", "9418")
        return f"git://{host}:{port}/{path.relative_to(self.git_root)}"

    def mount(self, name: str, tmp_path: Path) -> Mount:
        return Mount(name=name, path=f"/data/{name}", source=self.pvcs[name])

    def state(self, job_id: str) -> ObservedState:
        # A cancelled job's objects are deleted, so the executor leaves it out; the portal (jobs_reconcile)
        # turns a launched job that is gone after a cancel into "cancelled", and so does the harness.
        found = self.executor.poll([job_id]).get(job_id)
        return found or ObservedState(phase="cancelled", reason="cancelled", finished_at=time.time())

    def output(self, job_id: str) -> Path:
        return Path(os.environ["PORTAL_K8S_JOB_VOLUME"]) / job_id / "output"

    def assert_released(self, job_id: str) -> None:
        def released():
            pods, _ = self.kube.list("v1", "Pod", labels=f"portal/job-id={job_id}")
            return all((pod.get("status") or {}).get("phase") in ("Succeeded", "Failed") for pod in pods)

        wait_for(released, timeout=60, what=f"the pods of {job_id} to end")


@pytest.fixture
def harness(tmp_path_factory):
    git_root = tmp_path_factory.getbasetemp()
    daemon = subprocess.Popen(  # serves every repository the tests build under the base temp dir
        [
            shutil.which("git") or "git",
            "daemon",
            "--reuseaddr",
            "--export-all",
            f"--base-path={git_root}",
            f"--port={os.environ.get('PORTAL_K8S_GIT_PORT', '9418')}",
            str(git_root),
        ],
    )
    kube = Kube.from_settings({"kubeconfig": os.environ["KUBECONFIG"]})
    settings = ClusterSettings.from_cluster("test", json.loads(os.environ.get("PORTAL_K8S_SETTINGS", "{}")))
    executor = KubernetesExecutor(kube, settings)
    executor.ensure_department("vision", 0)
    made = ClusterHarness(executor, kube, git_root)
    try:
        yield made
        made.cleanup()
    finally:
        executor.collect_garbage(set())
        daemon.terminate()
        daemon.wait(10)
        kube.close()


class TestKubernetesExecutorOnACluster(ExecutorContract):
    @pytest.mark.skip(reason="LOCAL_RANK is 0 in every pod (one process per pod); the local executor counts per node")
    def test_the_command_sees_the_job_environment_contract(self):
        pass

    @pytest.mark.skip(
        reason="the tests' wheels are file:// URLs on this machine, and pods install afresh (no "
        "shared environment cache on Kubernetes)"
    )
    def test_requirements_are_installed_once_then_reused(self):
        pass
