"""The database connection pool's sizes, budget and 503, on any database (issue 16 item 1).

PostgreSQL's own side (a real busy pool, the check against the server, forks) is tests/test_db_pool_postgres.py.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from django.db import OperationalError, connection
from django.test import RequestFactory
from psycopg_pool import PoolTimeout

from core.api import exception_handler
from core.db_busy import PoolBusyMiddleware
from core.db_pool import PoolSizes, budget_problem, is_pool_timeout

ROOT = Path(__file__).resolve().parent.parent


def pool_timeout() -> OperationalError:
    """What Django raises when psycopg_pool gives up waiting (ensure_connection's wrap_database_errors)."""
    try:
        try:
            raise PoolTimeout("couldn't get a connection after 30.00 sec")
        except PoolTimeout as exc:
            raise OperationalError(*exc.args) from exc
    except OperationalError as wrapped:
        return wrapped


def sizes(**overrides) -> PoolSizes:
    return PoolSizes(**({"min_size": 1, "max_size": 8, "timeout": 30, "processes": 6, "headroom": 10} | overrides))


def test_the_default_sizes_fit_postgresqls_default_max_connections():
    # make run: web, worker + 2 prefork children, beat, watcher = 6 pools of 8, + 10 headroom = 58 <= 100 - 3.
    assert budget_problem(sizes(), max_connections=100, reserved=3) is None
    # The Kubernetes base (2 web, 2 workers of 3 processes, beat, watcher = 10 processes) fits too: 90 <= 97.
    assert budget_problem(sizes(processes=10), max_connections=100, reserved=3) is None


def test_an_overcommitted_budget_is_a_sentence_with_the_numbers_and_the_fix():
    problem = budget_problem(sizes(processes=20), max_connections=100, reserved=3)
    assert problem == (
        "20 processes (PORTAL_DB_PROCESSES) x 8 connections each (PORTAL_DB_POOL_MAX) + 10 of headroom "
        "(PORTAL_DB_HEADROOM) = 170 connections, but PostgreSQL accepts 97 (100 max_connections - 3 reserved for "
        "superusers): under load the portal would meet 'too many clients'. Lower PORTAL_DB_POOL_MAX to 4 or less, "
        "or raise PostgreSQL's max_connections to 173 or more."
    )
    assert "Run fewer processes" in budget_problem(sizes(processes=200), max_connections=100, reserved=3)
    assert budget_problem(sizes(max_size=0, processes=200), max_connections=100, reserved=3) is None  # no pool


def test_a_pool_timeout_is_recognised_through_djangos_wrapping_and_nothing_else_is():
    assert is_pool_timeout(pool_timeout())
    assert not is_pool_timeout(OperationalError("FATAL:  sorry, too many clients already"))
    assert not is_pool_timeout(ValueError("x"))


@pytest.mark.parametrize(
    ("path", "accept", "json_answer"),
    [("/api/v1/jobs/", "*/*", True), ("/jobs/", "text/html", False), ("/jobs/", "application/json", True)],
)
def test_a_view_that_meets_a_busy_pool_answers_503_with_retry_after(path, accept, json_answer):
    request = RequestFactory().get(path, HTTP_ACCEPT=accept)
    middleware = PoolBusyMiddleware(lambda request: None)
    response = middleware.process_exception(request, pool_timeout())
    assert response.status_code == 503
    assert response["Retry-After"] == "5"
    if json_answer:
        assert response["Content-Type"] == "application/json"
        assert json.loads(response.content)["detail"].startswith("The portal is busy: every database connection")
    else:
        assert response["Content-Type"].startswith("text/html")
        assert b"<h1>The portal is busy</h1>" in response.content and b"Try again in 5 seconds" in response.content
    assert middleware.process_exception(request, OperationalError("deadlock detected")) is None  # still a 500


def test_the_api_exception_handler_answers_a_busy_pool_503_in_json():
    response = exception_handler(pool_timeout(), {})
    assert response.status_code == 503
    assert response["Retry-After"] == "5"
    assert "Try again in 5 seconds" in response.data["detail"]
    assert exception_handler(OperationalError("deadlock detected"), {}) is None  # DRF's: an uncaught 500


def test_sqlite_has_no_pool(settings):
    if connection.vendor != "sqlite":
        pytest.skip("the SQLite configuration: run without a PostgreSQL DATABASE_URL")
    assert settings.PORTAL_DB_POOL is None
    assert "pool" not in settings.DATABASES["default"]["OPTIONS"]


def _settings_of(tmp_path, **env) -> subprocess.CompletedProcess:
    environ = {k: v for k, v in os.environ.items() if not k.startswith("PORTAL_DB_") and k != "REDIS_URL"}
    environ |= {"PORTAL_DATA_ROOT": str(tmp_path), "DATABASE_URL": "postgres://u@db.invalid:5432/portal", **env}
    script = (
        "import django, json; django.setup(); from django.conf import settings as s; "
        "d = s.DATABASES['default']; print(json.dumps([d['OPTIONS'].get('pool'), d['CONN_MAX_AGE'], "
        "d.get('CONN_HEALTH_CHECKS'), s.MIDDLEWARE[-1]]))"
    )
    return subprocess.run(
        [sys.executable, "-c", script],
        cwd=ROOT,
        env=environ | {"DJANGO_SETTINGS_MODULE": "config.settings"},
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_postgresql_gets_a_pool_sized_from_the_environment(tmp_path):
    result = _settings_of(tmp_path, PORTAL_DB_POOL_MAX="12", PORTAL_DB_POOL_MIN="2", PORTAL_DB_POOL_TIMEOUT="7")
    pool, max_age, health_checks, last_middleware = json.loads(result.stdout)
    assert (pool["min_size"], pool["max_size"], pool["timeout"]) == (2, 12, 7)
    assert max_age == 0 and health_checks is True  # pooling requires CONN_MAX_AGE 0; pooled connections checked
    assert last_middleware == "core.db_busy.PoolBusyMiddleware"
    pool_off = json.loads(_settings_of(tmp_path, PORTAL_DB_POOL_MAX="0").stdout)
    assert pool_off[0] is None  # the old behaviour: a connection per request thread


def test_a_pool_that_keeps_more_than_it_may_open_stops_the_start(tmp_path):
    result = _settings_of(tmp_path, PORTAL_DB_POOL_MAX="4", PORTAL_DB_POOL_MIN="5")
    assert result.returncode != 0
    assert "Invalid setting: PORTAL_DB_POOL_MIN=5 is above PORTAL_DB_POOL_MAX=4" in result.stderr
