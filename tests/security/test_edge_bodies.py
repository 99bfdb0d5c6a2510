"""Request bodies are capped at the ASGI layer, before authentication (config/edge.py), in the real web
process (uvicorn, as `make run` starts it): an anonymous client that declares 600 MB is answered 413 before it
has sent any of it, a chunked body is cut at the cap, and the web process's memory does not grow."""

from __future__ import annotations

import pytest

from tests.processes import Processes
from tests.security.edge_client import declared, rss_bytes, streamed

MiB = 1024**2
CAP = 4 * MiB  # PORTAL_MAX_REQUEST_BYTES's default
SERVE_CAP = 16 * MiB  # PORTAL_SERVE_MAX_REQUEST_BYTES's default
FEW_MB = 5 * MiB


@pytest.fixture(scope="module")
def web(django_db_setup, tmp_path_factory):
    processes = Processes(tmp_path_factory.mktemp("edge-bodies"))
    try:
        port = processes.web()
        # The first answers import views and warm caches: measure memory after them.
        for path in ("/api/v1/jobs/", "/login/", "/serve/nothing/predict"):
            streamed(port, path, limit=CAP // 4)
        yield port, processes.web_process().pid
    finally:
        processes.stop()
        print(processes.logs()[-5000:])  # shown when a test failed


def test_a_declared_600_mb_anonymous_body_is_refused_before_it_is_sent(web):
    port, pid = web
    before = rss_bytes(pid)
    answer = declared(port, "/api/v1/jobs/", 600 * MiB)
    assert answer.status == 413
    assert answer.sent == 0  # answered on the headers alone
    assert answer.headers["connection"] == "close"
    assert answer.headers["content-type"] == "application/json"
    assert answer.json() == {
        "detail": "The request body is 600 MiB, more than the 4 MiB the portal accepts. Send a smaller body "
        "(the portal's operator sets this limit with PORTAL_MAX_REQUEST_BYTES)."
    }
    assert rss_bytes(pid) - before < FEW_MB


def test_a_chunked_body_without_length_is_cut_at_the_cap(web):
    port, pid = web
    before = rss_bytes(pid)
    answer = streamed(port, "/api/v1/jobs/", limit=600 * MiB)
    assert answer.status == 413
    assert "larger than the 4 MiB the portal accepts" in answer.json()["detail"]
    # The cap, plus what the kernel's socket buffers held when the answer came: far from 600 MB.
    assert CAP < answer.sent < CAP + 32 * MiB
    assert rss_bytes(pid) - before < FEW_MB


def test_bodies_under_the_cap_reach_the_portal(web):
    port, _ = web
    # Anonymous: Django reads the body, then DRF answers 401 (the edge let it through).
    assert declared(port, "/api/v1/jobs/", CAP, send=True).status == 401
    assert streamed(port, "/api/v1/jobs/", limit=CAP // 2).status == 401


def test_pages_get_a_short_page_and_the_router_json(web):
    port, _ = web
    page = declared(port, "/login/", 600 * MiB)
    assert page.status == 413
    assert page.headers["content-type"] == "text/html; charset=utf-8"
    assert b"<h1>Request body too large</h1>" in page.body
    assert b"more than the 4 MiB the portal accepts" in page.body
    served = declared(port, "/serve/iris/predict", 600 * MiB)
    assert served.status == 413 and served.headers["content-type"] == "application/json"
    assert "more than the 16 MiB the portal accepts for predictions" in served.json()["detail"]
    assert "PORTAL_SERVE_MAX_REQUEST_BYTES" in served.json()["detail"]


def test_predictions_have_their_own_larger_cap(web):
    port, _ = web
    # 8 MiB of instances is over the general cap but a prediction may carry it: the router answers (401 here).
    assert streamed(port, "/serve/iris/predict", limit=2 * CAP).status == 401
    assert streamed(port, "/serve/iris/predict", limit=600 * MiB).status == 413
