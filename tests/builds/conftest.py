"""A Kubernetes cluster that builds images, beside the world's local cluster (tests/conftest.py; its `kube`
fixture is the API fake, tests/k8s/fixtures.py)."""

import pytest
from django.utils import timezone

from clusters.models import Cluster
from images import services

DOCKERFILE = "# tools for audio models\nFROM pytorch/pytorch:2.4.0-cuda12.1\nRUN pip install torchaudio==2.4.0\n"
REGISTRY = "registry.example.com/portal"


@pytest.fixture
def cluster(world):
    """A build cluster whose API nobody answers: for what is decided before a cluster is asked. Its health was
    checked a moment ago and found reachable (clusters.services keeps it for CHECK_EVERY_SECONDS), so a
    submission does not ask it again."""
    return Cluster.objects.create(
        name="k8s",
        backend=Cluster.Backend.KUBERNETES,
        settings={"kube_url": "http://127.0.0.1:9", "build_registry": REGISTRY, "build_push_secret": "registry-push"},
        health=Cluster.Health.REACHABLE,
        health_checked_at=timezone.now(),
        health_since=timezone.now(),
    )


@pytest.fixture
def kube_cluster(world, kube, monkeypatch):
    """A build cluster served by the API fake; the client does not retry, so each reconcile is one attempt."""
    monkeypatch.setattr(services, "KUBE_OPTIONS", {"retries": 0, "timeout_seconds": 2})
    return Cluster.objects.create(
        name="k8s",
        backend=Cluster.Backend.KUBERNETES,
        settings={"kube_url": kube.url, "build_registry": REGISTRY, "build_push_secret": "registry-push"},
    )
