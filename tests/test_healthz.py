import pytest

from core.celery import app as celery_app


@pytest.mark.django_db(transaction=True, databases="__all__")
def test_it_reports_database_broker_and_channel_layer_healthy(client):
    for _ in range(3):  # again and again: a check must not leave state behind that breaks the next
        response = client.get("/healthz")
        assert response.status_code == 200, response.json()
        body = response.json()
        assert body["status"] == "ok"
        assert {name: check["ok"] for name, check in body["checks"].items()} == {
            "database": True,
            "broker": True,
            "channel_layer": True,
        }


@pytest.mark.django_db(transaction=True, databases="__all__")
def test_it_answers_503_and_names_the_broken_part(client, monkeypatch):
    monkeypatch.setattr(celery_app.conf, "broker_url", "redis://127.0.0.1:1/0")
    monkeypatch.setitem(celery_app.conf, "broker_transport", None)  # the embedded setting names its own transport
    response = client.get("/healthz")
    assert response.status_code == 503
    body = response.json()
    assert body["status"] == "unavailable"
    assert body["checks"]["broker"]["ok"] is False
    assert "Error" in body["checks"]["broker"]["error"]
    assert body["checks"]["database"]["ok"] is True
