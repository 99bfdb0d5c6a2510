"""/healthz, /healthz/ready, /healthz/live and `manage.py heartbeat`: what a monitor, an operator, a
Kubernetes probe and a stranger each get to see.
"""

from __future__ import annotations

import ipaddress
import json
from datetime import timedelta

import pytest
from django.core.management import CommandError, call_command
from django.db import OperationalError, connection
from django.test import Client
from django.utils import timezone

from core import heartbeats
from core.celery import app as celery_app

STRANGER = "203.0.113.9"  # not on PORTAL_METRICS_ALLOW (127.0.0.1/32, ::1/128)
ALL = ("worker", "beat", "watcher", "scheduling-cycle")


def beat_all(age_seconds: float = 0.0, names=ALL) -> None:
    for name in names:
        heartbeats.beat(name, now=timezone.now() - timedelta(seconds=age_seconds))


class Refusing:
    """A database connection whose driver refuses, with the driver's message."""

    def __init__(self, message: str):
        self.message = message

    def cursor(self):
        raise OperationalError(self.message)


@pytest.fixture
def admin_client(world):
    client = Client()
    client.force_login(world.admin)
    return client


@pytest.mark.django_db(transaction=True, databases="__all__")
def test_it_reports_every_part_healthy_with_the_heartbeats_ages(client):
    beat_all(age_seconds=2)
    for _ in range(3):  # again and again: a check must not leave state behind that breaks the next
        response = client.get("/healthz")  # from 127.0.0.1: on the metrics allow-list, so with details
        assert response.status_code == 200, response.json()
        body = response.json()
        assert body["status"] == "ok"
        assert {name: check["ok"] for name, check in body["checks"].items()} == {
            "database": True,
            "broker": True,
            "channel_layer": True,
            "worker": True,
            "beat": True,
            "watcher": True,
            "scheduling-cycle": True,
        }
        assert 2 <= body["checks"]["worker"]["age_s"] < 30 and body["checks"]["worker"]["max_age_s"] == 30


@pytest.mark.django_db(transaction=True, databases="__all__")
def test_a_stale_worker_makes_it_unavailable_and_names_the_worker(client):
    beat_all(names=("beat", "watcher", "scheduling-cycle"))
    beat_all(age_seconds=31, names=("worker",))
    response = client.get("/healthz")
    assert response.status_code == 503
    body = response.json()
    assert body["status"] == "unavailable"
    worker = body["checks"]["worker"]
    assert worker["ok"] is False and worker["age_s"] >= 31
    assert "The Celery worker last beat 31 s ago (more than 30 s)" in worker["error"]
    assert [name for name, check in body["checks"].items() if not check["ok"]] == ["worker"]


@pytest.mark.django_db(transaction=True, databases="__all__")
def test_a_process_that_never_beat_and_an_old_scheduling_cycle_are_unavailable(client, settings):
    settings.PORTAL_HEALTH_CYCLE_MAX_AGE = 34
    beat_all(names=("worker", "beat"))
    beat_all(age_seconds=40, names=("scheduling-cycle",))
    body = client.get("/healthz").json()
    assert body["checks"]["watcher"] == {
        "ok": False,
        "age_s": None,
        "max_age_s": 30,
        "error": "The cluster watcher has never recorded a heartbeat: is it running?",
    }
    assert body["checks"]["scheduling-cycle"]["ok"] is False
    assert "more than 34 s" in body["checks"]["scheduling-cycle"]["error"]


@pytest.mark.django_db(transaction=True, databases="__all__")
def test_the_freshest_replica_counts_for_healthz_and_its_own_row_for_a_probe(client):
    beat_all()
    from core.models import Heartbeat

    Heartbeat.objects.create(name="worker", host="gone-pod", pid=1, beat_at=timezone.now() - timedelta(hours=1))
    assert client.get("/healthz").status_code == 200  # another worker replica is alive
    call_command("heartbeat", "--check", "worker")  # this host's worker is alive


@pytest.mark.django_db(transaction=True, databases="__all__")
def test_strangers_get_only_the_status(world, client, admin_client, settings):
    beat_all(age_seconds=31, names=("worker",))
    stranger = client.get("/healthz", REMOTE_ADDR=STRANGER)
    assert (stranger.status_code, stranger.json()) == (503, {"status": "unavailable"})
    member = Client()
    member.force_login(world.alice)
    assert member.get("/healthz", REMOTE_ADDR=STRANGER).json() == {"status": "unavailable"}
    # A platform admin signed in sees the details from anywhere; so does the metrics allow-list.
    assert "worker" in admin_client.get("/healthz", REMOTE_ADDR=STRANGER).json()["checks"]
    settings.PORTAL_METRICS_ALLOW = [ipaddress.ip_network("203.0.113.0/24")]
    assert "worker" in client.get("/healthz", REMOTE_ADDR=STRANGER).json()["checks"]
    settings.PORTAL_METRICS_TOKEN = "scrape-token"
    settings.PORTAL_METRICS_ALLOW = []
    with_token = client.get("/healthz", REMOTE_ADDR=STRANGER, HTTP_AUTHORIZATION="Bearer scrape-token")
    assert "worker" in with_token.json()["checks"]
    wrong = client.get("/healthz", REMOTE_ADDR=STRANGER, HTTP_AUTHORIZATION="Bearer guess")
    assert wrong.json() == {"status": "unavailable"}
    beat_all()
    assert client.get("/healthz", REMOTE_ADDR=STRANGER).json() == {"status": "ok"}


@pytest.mark.django_db(transaction=True, databases="__all__")
def test_no_answer_names_the_database_host_or_name(admin_client, monkeypatch):
    beat_all()
    db = connection.settings_dict
    secrets = [str(db["NAME"]), *(str(db[k]) for k in ("HOST", "USER") if db.get(k))]
    healthy = admin_client.get("/healthz").content.decode()
    # A driver's message names them, as psycopg's does: connection to server at "host", ... database "name".
    message = (
        f'connection to server at "{db.get("HOST") or "127.0.0.1"}" failed: database "{db["NAME"]}" does not exist'
    )

    monkeypatch.setattr("config.health.connection", Refusing(message))  # only /healthz's own check
    response = admin_client.get("/healthz")
    assert response.status_code == 503
    check = response.json()["checks"]["database"]
    assert check == {
        "ok": False,
        "error": "The database does not answer (OperationalError); the web process's log has the details.",
    }
    for answer in (healthy, response.content.decode()):
        for secret in secrets:
            assert secret not in answer, (secret, answer)


@pytest.mark.django_db(transaction=True, databases="__all__")
def test_it_answers_503_and_names_the_broken_broker(client, monkeypatch):
    beat_all()
    monkeypatch.setattr(celery_app.conf, "broker_url", "redis://127.0.0.1:1/0")
    monkeypatch.setitem(celery_app.conf, "broker_transport", None)  # the embedded setting names its own transport
    response = client.get("/healthz")
    assert response.status_code == 503
    body = response.json()
    assert body["status"] == "unavailable"
    assert body["checks"]["broker"]["ok"] is False
    assert body["checks"]["broker"]["error"].startswith("The Celery broker does not answer (")
    assert body["checks"]["database"]["ok"] is True
    assert client.get("/healthz/ready").status_code == 503  # web cannot enqueue: not ready either


@pytest.mark.django_db(transaction=True, databases="__all__")
def test_readiness_ignores_other_processes_and_liveness_needs_only_web(client, monkeypatch):
    beat_all(age_seconds=600)  # worker, beat, watcher and the cycle all stale
    assert client.get("/healthz").status_code == 503
    ready = client.get("/healthz/ready")
    assert ready.status_code == 200 and set(ready.json()["checks"]) == {"database", "broker", "channel_layer"}
    monkeypatch.setattr("config.health.connection", Refusing("down"))
    assert client.get("/healthz/ready").status_code == 503
    live = client.get("/healthz/live")
    assert (live.status_code, json.loads(live.content)) == (200, {"status": "ok"})


@pytest.mark.django_db(transaction=True)
def test_the_heartbeat_command_checks_this_hosts_process():
    with pytest.raises(CommandError, match="has never recorded a heartbeat"):
        call_command("heartbeat", "--check", "beat")
    heartbeats.beat("beat", now=timezone.now() - timedelta(seconds=45))
    call_command("heartbeat", "--check", "beat", "--max-age", "60")
    with pytest.raises(CommandError, match=r"last beat 45 s ago \(more than 30 s\)"):
        call_command("heartbeat", "--check", "beat")
