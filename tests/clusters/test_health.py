"""A cluster's health: the pure decision (clusters/health.py), the check against a Kubernetes API server (the
fake) and a local host, the stored state with its time and TTL, and one log line per change of state."""

from __future__ import annotations

import logging
from datetime import timedelta

import pytest
from django.utils import timezone

from clusters import health
from clusters.health import Health
from clusters.models import Cluster
from clusters.services import cluster_choice_label, cluster_health, cluster_health_refresh, cluster_refusal


@pytest.fixture(autouse=True)
def _no_default_connection(monkeypatch, tmp_path):
    """No in-cluster service account and no ~/.kube/config: only a cluster's own settings connect it."""
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    monkeypatch.delenv("KUBECONFIG", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))


# --- the pure decision -----------------------------------------------------------------


@pytest.mark.parametrize(
    "backend,values,in_cluster,kubeconfig,reason",
    [
        ("kubernetes", {}, False, False, health.NO_CONNECTION_SETTINGS),
        ("kubernetes", {"namespace_prefix": "p-"}, False, False, health.NO_CONNECTION_SETTINGS),
        ("kubernetes", {"kube_url": "https://k8s.example.com"}, False, False, None),
        ("kubernetes", {"in_cluster": True}, False, False, None),
        ("kubernetes", {}, True, False, None),  # the portal's own pod: in-cluster by default
        ("kubernetes", {}, False, True, None),  # ~/.kube/config by default
        ("kubernetes", {"rendering_only": True, "kube_url": "https://x"}, False, False, health.RENDERING_ONLY),
        ("local", {}, False, False, None),
        ("local", {"rendering_only": True}, False, False, health.RENDERING_ONLY),
    ],
)
def test_what_settings_alone_decide(backend, values, in_cluster, kubeconfig, reason):
    found = health.configuration_problem(
        backend, values, in_cluster_available=in_cluster, default_kubeconfig=kubeconfig
    )
    assert (found.reason if found else None) == reason
    assert found is None or (found.state == health.UNREACHABLE and not found.usable)


def test_a_probe_needs_an_answer_and_the_training_operator():
    assert health.from_kube_probe(answered=True, served_kinds={"PyTorchJob", "TFJob"}) == Health(health.REACHABLE)
    missing = health.from_kube_probe(answered=True, served_kinds={"TFJob"})
    assert (missing.state, missing.reason) == (health.NOT_READY, health.OPERATOR_MISSING)
    assert "serves no PyTorchJob" in missing.message and not missing.usable
    down = health.from_kube_probe(answered=False, error="GET /version: no answer from the API server (timeout)")
    assert (down.state, down.reason, down.usable) == (health.UNREACHABLE, health.API_UNANSWERED, False)
    assert "timeout" in down.message
    assert Health(health.UNKNOWN).usable  # never checked: a submission checks it first


def test_one_log_line_per_change_of_state():
    down = Health(health.UNREACHABLE, health.API_UNANSWERED, "The API server does not answer: timeout")
    assert health.change_line("lab", health.UNKNOWN, Health(health.REACHABLE)) is None  # first check, all well
    assert health.change_line("lab", health.REACHABLE, down) == (
        "cluster lab: unreachable: The API server does not answer: timeout"
    )
    assert health.change_line("lab", health.UNREACHABLE, down) is None
    assert health.change_line("lab", health.UNREACHABLE, Health(health.REACHABLE)) == (
        "cluster lab: reachable again (was unreachable)"
    )


def test_the_grace_period_counts_from_when_the_cluster_became_unusable():
    since = timezone.now()
    assert not health.requeue_due(unusable_since=since, now=since + timedelta(seconds=299), grace_seconds=300)
    assert health.requeue_due(unusable_since=since, now=since + timedelta(seconds=300), grace_seconds=300)
    assert not health.requeue_due(unusable_since=None, now=since, grace_seconds=0)


def test_a_refusal_says_which_cluster_and_why():
    found = Health(health.UNREACHABLE, health.NO_CONNECTION_SETTINGS, "Set kube_url.")
    assert health.refusal("k8s-demo", found) == (
        "Cluster k8s-demo is unreachable (no connection settings): it takes no jobs now. Set kube_url."
    )
    assert health.refusal("local", Health(health.REACHABLE)) is None


# --- the check, stored -------------------------------------------------------------------


@pytest.fixture
def lab(db, kube):
    return Cluster.objects.create(name="lab", backend=Cluster.Backend.KUBERNETES, settings={"kube_url": kube.url})


def test_a_kubernetes_cluster_that_answers_with_the_operator_is_reachable(lab, kube):
    now = timezone.now()
    found = cluster_health_refresh(lab, now=now)
    assert found == Health(health.REACHABLE)
    lab.refresh_from_db()
    assert (lab.health, lab.health_checked_at, lab.health_since) == (health.REACHABLE, now, now)
    assert ("GET", "/version") in kube.requests
    assert cluster_choice_label(lab) == "lab" and cluster_refusal(lab) is None


def test_a_cluster_without_the_training_operator_is_not_ready(lab, kube):
    kube.inject(status=404, times=10, path_contains="/tfjobs")
    found = cluster_health_refresh(lab)
    assert (found.state, found.reason) == (health.NOT_READY, health.OPERATOR_MISSING)
    assert "serves no TFJob" in found.message
    assert cluster_choice_label(lab) == "lab (not ready: the Training Operator is not installed)"


def test_the_check_is_stored_and_made_again_only_when_stale(lab, kube):
    start = timezone.now()
    cluster_health_refresh(lab, now=start)
    asked = len(kube.requests)
    cluster_health_refresh(lab, now=start + timedelta(seconds=health.CHECK_EVERY_SECONDS - 1))
    assert len(kube.requests) == asked  # fresh: no network call
    assert cluster_health(lab).state == health.REACHABLE  # what pages read: never a call
    assert len(kube.requests) == asked
    cluster_health_refresh(lab, now=start + timedelta(seconds=health.CHECK_EVERY_SECONDS))
    assert len(kube.requests) > asked


def test_an_api_server_that_stops_answering_is_logged_once_and_again_when_back(lab, kube, caplog):
    start = timezone.now()
    cluster_health_refresh(lab, now=start)
    fault = kube.inject(status=503, times=1000)
    caplog.set_level(logging.INFO, logger="clusters.services")
    for tick in range(1, 6):
        found = cluster_health_refresh(lab, now=start + timedelta(seconds=tick * health.CHECK_EVERY_SECONDS))
        assert (found.state, found.reason) == (health.UNREACHABLE, health.API_UNANSWERED)
    lab.refresh_from_db()
    assert lab.health_since == start + timedelta(seconds=health.CHECK_EVERY_SECONDS)  # kept while it stays so
    fault.times = 0
    cluster_health_refresh(lab, now=start + timedelta(seconds=10 * health.CHECK_EVERY_SECONDS))
    lines = [record.getMessage() for record in caplog.records if record.name == "clusters.services"]
    assert len(lines) == 2, lines
    assert lines[0].startswith("cluster lab: unreachable: The API server does not answer:")
    assert lines[1] == "cluster lab: reachable again (was unreachable)"
    assert not any(record.exc_info for record in caplog.records)  # no traceback


def test_no_connection_settings_are_seen_without_a_check(db):
    prod = Cluster.objects.create(name="prod", backend=Cluster.Backend.KUBERNETES, settings={})
    found = cluster_health(prod)  # stored state unknown, yet its settings say enough
    assert (found.state, found.reason) == (health.UNREACHABLE, health.NO_CONNECTION_SETTINGS)
    assert cluster_choice_label(prod) == "prod (unreachable: no connection settings)"
    assert cluster_refusal(prod).startswith("Cluster prod is unreachable (no connection settings): it takes no jobs")


def test_a_local_cluster_is_reachable_while_its_job_folder_can_be_made(db, settings, tmp_path):
    settings.PORTAL_DATA_ROOT = tmp_path / "data"
    local = Cluster.objects.create(name="here", backend=Cluster.Backend.LOCAL)
    assert cluster_health_refresh(local) == Health(health.REACHABLE)
    settings.PORTAL_DATA_ROOT = tmp_path / "elsewhere"
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "elsewhere" / "executors").write_text("a file where the executors' folder should be")
    found = cluster_health_refresh(local, force=True)
    assert (found.state, found.reason) == (health.UNREACHABLE, health.EXECUTOR_BROKEN)
    assert "cannot be made" in found.message
    assert cluster_choice_label(local) == "here (unreachable: its executor does not work on this host)"
