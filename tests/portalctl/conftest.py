"""Fixtures of the portalctl tests: the real portal under uvicorn on the test database, and portalctl as alice.

The portal runs under uvicorn (the web process of `make run`) rather than pytest-django's WSGI `live_server`,
because `logs -f` streams an asynchronous response that a WSGI server would buffer until the job has ended.
"""

from __future__ import annotations

import pytest

from accounts.tokens import token_create
from tests.jobs.test_job_flow import make_repo
from tests.portalctl.cli_harness import Portalctl
from tests.processes import Processes


@pytest.fixture(scope="package")
def channel_layer(django_db_setup, tmp_path_factory):
    """The channel layer's tables, once for the package: the portal pushes live job updates through it."""
    Processes(tmp_path_factory.mktemp("channels")).migrate_channel_layer()


@pytest.fixture
def portal(channel_layer, tmp_path):
    processes = Processes(tmp_path)
    try:
        yield f"http://127.0.0.1:{processes.web()}"
    finally:
        processes.stop()


@pytest.fixture
def cli(world, portal, tmp_path):
    portalctl = Portalctl(portal, token_create(user=world.alice, name="portalctl")[1], tmp_path / "home")
    yield portalctl
    portalctl.stop()


@pytest.fixture
def repo(tmp_path):
    return make_repo(
        tmp_path / "repo",
        {
            "train.py": "import os, sys\nprint('epoch 1 loss 0.5', flush=True)\n"
            "open(os.path.join(os.environ['PORTAL_OUTPUT_DIR'], 'model.joblib'), 'wb').write(b'weights')\n"
            "print('saved model.joblib', flush=True)\nsys.exit(int(os.environ.get('EXIT_CODE', '0')))\n",
        },
    )
