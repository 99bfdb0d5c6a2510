"""Pytest fixtures for the Kubernetes API fake; tests/conftest.py loads them (pytest_plugins).

- ``kube``: a running KubeFake (tests/k8s/kfake/); the test fails if the fake hit a bug of its own.
- ``kube_api``: the portal's ``Kube`` wrapper talking to it, with a short timeout and a sleep that only
  records the backoff delays (``kube_api.slept``), so retries cost no wall time.
"""

from __future__ import annotations

import pytest

from tests.k8s.kfake import KubeFake


@pytest.fixture
def kube():
    with KubeFake() as fake:
        yield fake
        assert not fake.errors, "the fake failed:\n" + "\n".join(fake.errors)


@pytest.fixture
def kube_api(kube):
    from clusters.kube import Kube

    slept: list[float] = []
    api = Kube(kube.api_client(), retries=4, backoff_seconds=0.01, timeout_seconds=1, sleep=slept.append)
    api.slept = slept
    yield api
    api.close()
