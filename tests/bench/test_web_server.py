"""bench/web_server.py's server specs and argvs, and bench.api's refusal of bad ones (no server is started)."""

from __future__ import annotations

import pytest

from bench import api
from bench.web_server import FLAGS, parse_server, server_argv, uvicorn_argv


@pytest.mark.parametrize(
    ("spec", "parsed"),
    [
        ("uvicorn", ("uvicorn", 1)),
        ("daphne", ("daphne", 1)),
        ("uvicorn-workers:3", ("uvicorn-workers", 3)),
        ("gunicorn-uvicorn:2", ("gunicorn-uvicorn", 2)),
    ],
)
def test_it_parses_each_kind_of_server(spec, parsed):
    assert parse_server(spec) == parsed


@pytest.mark.parametrize(
    "spec", ["", "uvicorn:2", "daphne:1", "uvicorn-workers", "uvicorn-workers:0", "gunicorn-uvicorn:x", "hypercorn"]
)
def test_it_refuses_what_is_not_a_server(spec):
    with pytest.raises(ValueError, match="unknown server"):
        parse_server(spec)


def test_one_uvicorn_is_the_web_process_of_make_run_and_workers_add_only_their_count():
    assert server_argv("uvicorn", 8123) == uvicorn_argv(8123)
    assert server_argv("uvicorn-workers:3", 8123) == [*uvicorn_argv(8123), "--workers", "3"]
    assert server_argv("uvicorn", 8123, host="0.0.0.0")[2:6] == ["--host", "0.0.0.0", "--port", "8123"]


def test_daphne_and_gunicorn_serve_the_same_application_on_the_same_address():
    daphne = server_argv("daphne", 8123)
    assert daphne[0].endswith("/daphne") and daphne[-1] == "config.asgi:application"
    assert daphne[daphne.index("-b") + 1] == "127.0.0.1" and daphne[daphne.index("-p") + 1] == "8123"
    gunicorn = server_argv("gunicorn-uvicorn:4", 8123)
    assert gunicorn[0].endswith("/gunicorn") and gunicorn[1] == "config.asgi:application"
    assert gunicorn[gunicorn.index("--bind") + 1] == "127.0.0.1:8123"
    assert gunicorn[gunicorn.index("--workers") + 1] == "4"
    assert gunicorn[gunicorn.index("--worker-class") + 1] == "bench.gunicorn_worker.PortalUvicornWorker"


def test_gunicorns_uvicorn_workers_are_configured_as_uvicorn_is():
    pytest.importorskip("gunicorn")
    from bench.gunicorn_worker import PortalUvicornWorker

    # What FLAGS say, as uvicorn.Config's arguments: a flag added there must be added to the worker too.
    assert list(FLAGS) == [
        *("--http", "httptools", "--loop", "uvloop", "--ws", "websockets-sansio", "--lifespan", "off"),
        *("--no-server-header", "--no-proxy-headers", "--no-access-log"),
    ]
    assert PortalUvicornWorker.CONFIG_KWARGS == {
        "http": "httptools",
        "loop": "uvloop",
        "ws": "websockets-sansio",
        "lifespan": "off",
        "server_header": False,
        "proxy_headers": False,
        "access_log": False,
    }


@pytest.mark.parametrize(
    "argv",
    [
        ["--server", "nginx"],
        ["--compare", "uvicorn,uvicorn-workers:0"],
        ["--compare", "uvicorn,daphne", "--url", "http://127.0.0.1:8000"],
    ],
)
def test_bench_api_refuses_bad_servers_before_it_starts_anything(argv, capsys):
    with pytest.raises(SystemExit) as exited:
        api.main(argv)
    assert exited.value.code == 2
    error = capsys.readouterr().err
    assert "unknown server" in error or "--compare starts its own servers" in error
