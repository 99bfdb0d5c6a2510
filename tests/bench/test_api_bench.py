"""bench.api for about two seconds on a small table: it runs the real portal on PostgreSQL and keeps its JSON keys."""

from __future__ import annotations

import json
import os
from urllib.parse import urlsplit, urlunsplit

import pytest

from bench import api

KEYS = {"submit_rps", "submit_p99_ms", "list_rps", "list_p99_ms", "bare_rps"}


def _server_url() -> str | None:
    """The PostgreSQL server the suite may use (that of DATABASE_URL, else the local default), if one answers."""
    psycopg = pytest.importorskip("psycopg")
    url = os.environ.get("DATABASE_URL", "")
    base = url if url.startswith(("postgres://", "postgresql://")) else api.DEFAULT_DATABASE_URL
    parts = urlsplit(base)
    try:
        psycopg.connect(urlunsplit(parts._replace(scheme="postgresql", path="/postgres")), connect_timeout=3).close()
    except psycopg.OperationalError:
        return None
    return urlunsplit(parts._replace(path=f"/portal_bench_smoke_{os.getpid()}"))


@pytest.mark.timeout(300)
def test_it_measures_three_endpoints_on_a_small_table(tmp_path, monkeypatch):
    url = _server_url()
    if url is None:
        pytest.skip("bench.api needs PostgreSQL (DATABASE_URL, or 127.0.0.1:5432)")
    monkeypatch.setenv("DATABASE_URL", url)  # a database of its own, never the suite's
    out = tmp_path / "api.json"
    try:
        report = api.main(["--duration", "2", "--jobs", "300", "--concurrency", "2", "--json", str(out)])
    finally:
        _drop(url)
    assert json.loads(out.read_text()) == report
    assert KEYS <= set(report)
    assert report["historical_jobs"] == 300
    for name in ("submit", "list", "bare"):
        assert report[f"{name}_requests"] > 0
        assert 0 < report[f"{name}_p50_ms"] <= report[f"{name}_p99_ms"]
    assert report["submit_ratio"] == round(report["submit_rps"] / report["bare_rps"], 3)


def test_it_never_drops_a_database_it_did_not_make():
    url = _server_url()
    if url is None:
        pytest.skip("needs PostgreSQL")
    import psycopg

    parts = urlsplit(url)
    name = parts.path.lstrip("/") + "_foreign"
    with psycopg.connect(urlunsplit(parts._replace(scheme="postgresql", path="/postgres")), autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    try:
        with pytest.raises(SystemExit, match="bench.api did not make it"):
            api._recreate_database(urlunsplit(parts._replace(path=f"/{name}")))
    finally:
        _drop(urlunsplit(parts._replace(path=f"/{name}")))


def _drop(url: str) -> None:
    import psycopg

    parts = urlsplit(url)
    with psycopg.connect(urlunsplit(parts._replace(scheme="postgresql", path="/postgres")), autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{parts.path.lstrip("/")}" WITH (FORCE)')


@pytest.mark.timeout(300)
def test_it_compares_servers_and_their_websockets_on_one_database(tmp_path, monkeypatch):
    url = _server_url()
    if url is None:
        pytest.skip("bench.api needs PostgreSQL (DATABASE_URL, or 127.0.0.1:5432)")
    monkeypatch.setenv("DATABASE_URL", url)
    out = tmp_path / "compare.json"
    argv = ["--compare", "uvicorn,uvicorn-workers:2", "--rounds", "1", "--duration", "1.5", "--jobs", "100"]
    try:
        report = api.main([*argv, "--concurrency", "1", "--json", str(out)])
    finally:
        _drop(url)
    assert json.loads(out.read_text()) == report
    assert set(report["compare"]) == {"uvicorn", "uvicorn-workers:2"} and report["baseline"] == "uvicorn"
    assert [(r["server"], r["round"]) for r in report["rounds"]] == [("uvicorn", 1), ("uvicorn-workers:2", 1)]
    for run in report["rounds"]:
        # Each socket heard a message sent from another process: the channel layer crosses processes.
        assert run["websockets_heard"] == f"{api.WEBSOCKETS}/{api.WEBSOCKETS}"
        assert len(run["worker_cpu_s"]) == run["workers"]
        assert run["bare_requests"] > 0 and run["submit_requests"] > 0 and run["list_requests"] > 0
    assert report["compare"]["uvicorn"]["bare_vs_baseline"] == 1.0
