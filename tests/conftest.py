"""One fixed world shared by all tests (as in healthchecks' hc/test.py).

vision: alice (member), carol (dept_admin); nlp: bob (member); admin: platform admin.
The world is the demo world that `make run` loads, with a known password.
"""

from __future__ import annotations

import pytest
from django.conf import settings as django_settings
from django.contrib.auth import get_user_model
from django.db import connections
from django.utils import translation
from rest_framework.test import APIClient

from accounts.tokens import token_create
from clusters.inventory import SIMULATED
from demo.data import demo_load
from quotas.scheduler import compiled

# The Kubernetes API fake (`kube`, `kube_api` fixtures) for every test directory.
pytest_plugins = ["tests.k8s.fixtures"]

PASSWORD = "correct-horse-battery"


def pytest_collection_modifyitems(config, items):
    """Tests that switch a protection of the scheduler core off by monkeypatching it (``pure_core``) need the core as
    Python: compiled, its functions and classes cannot be patched from outside. Where the compiled core runs they
    are skipped, and `make test` runs them again with PORTAL_COMPILED_SCHEDULER=0 (quotas.scheduler.compiled)."""
    if not compiled.active():
        return
    skip = pytest.mark.skip(reason="patches the scheduler core: runs in make test's pass with the core as Python")
    for item in items:
        if item.get_closest_marker("pure_core"):
            item.add_marker(skip)


class World:
    def __init__(self, data_root):
        demo_load(data_root=data_root, pools=[SIMULATED], password=PASSWORD)
        users = get_user_model().objects.in_bulk(["alice", "carol", "bob", "admin"], field_name="username")
        self.alice, self.carol, self.bob, self.admin = users["alice"], users["carol"], users["bob"], users["admin"]
        self.password = PASSWORD

    def api(self, user=None) -> APIClient:
        """A REST client authenticated with the user's personal token (anonymous for None)."""
        client = APIClient()
        if user is not None:
            _, key = token_create(user=user, name="tests")
            client.credentials(HTTP_AUTHORIZATION=f"Token {key}")
        return client


@pytest.fixture(scope="session")
def django_db_modify_db_settings(django_db_modify_db_settings_parallel_suffix) -> None:
    """Before pytest-django creates the test databases: close every connection pool opened so far.

    Django's PostgreSQL pool (OPTIONS["pool"]) keeps its connections to the database it was opened on, and
    creating the test database closes the connection but not the pool (django/db/backends/postgresql/creation.py
    closes it only when cloning or destroying). Anything that touched the database before (an import at
    collection time) would leave this process migrating and testing the real DATABASE_URL database while the
    portal processes the tests start use the test database, which stays empty. django_db_setup below checks it.
    """
    for connection in connections.all(initialized_only=True):
        connection.close()
        close_pool = getattr(connection, "close_pool", None)  # PostgreSQL's wrapper only
        if close_pool is not None:
            close_pool()


@pytest.fixture(scope="session")
def django_db_setup(django_db_setup, django_db_blocker) -> None:
    """pytest-django's, then a check that this process really is on the test database it created."""
    with django_db_blocker.unblock():
        for connection in connections.all():
            if connection.vendor != "postgresql":
                continue
            with connection.cursor() as cursor:
                cursor.execute("SELECT current_database()")
                (current,) = cursor.fetchone()
            wanted = connection.settings_dict["NAME"]
            assert current == wanted, f"the test process is on database {current!r}, not the test database {wanted!r}"


@pytest.fixture
def world(db, tmp_path) -> World:
    return World(tmp_path)


@pytest.fixture(autouse=True)
def _english_outside_requests():
    """Each test starts in the portal's default language. A request in Chinese leaves Chinese active in its
    thread (LocaleMiddleware activates a language and nothing deactivates it), so without this a test that
    reads a message outside a request would see the language of whichever test ran before it."""
    translation.activate(django_settings.LANGUAGE_CODE)
    yield
    translation.deactivate()


@pytest.fixture(autouse=True)
def _fast_password_hashing(settings):
    # The real hasher takes ~0.5 s per password by design; tests hash dozens.
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
