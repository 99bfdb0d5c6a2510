"""Fixtures of the hostile-job suite (issue 14, "Done when"): the hostile member of nlp, through the real portal
and real processes (the scenario: hostile_scenario.py; the tests: test_hostile_*.py, one kind of attack each).

The whole scenario runs twice, once per package rather than once per module: the ``attack`` fixture returns what
a run showed, after cleaning up, so every module judges the same two runs. On the cluster as the demo sets it up
(isolation "sandbox") every attack fails. With the protection switched off (isolation "none", written straight
into the cluster's settings: the validator refuses "none" for a cluster two departments share, which is exactly
the point) each test asserts the same attack SUCCEEDS, so that each assertion is known to be able to fail.
The setup timeout has its own test (test_hostile_resources.py): the same hanging setup with and without it.
test_5b is a hole this suite found and that is now closed: the portal's TensorBoard followed the links a job
leaves in its own TENSORBOARD_LOG_DIR; boards (and model servers) now run in a sandbox of their own that sees
only their runs' folders (on a trusted cluster, like its jobs, they do not).

Each run of the scenario has its Celery worker for itself, stopped with it: no worker outlives the hostile
modules to launch the jobs of the other security tests.
"""

from __future__ import annotations

import uuid

import pytest
from django.conf import settings
from django.test import override_settings

from tests.conftest import World
from tests.security.hostile_scenario import Outcome, celery_worker, clean_up, play


@pytest.fixture(scope="package", params=["sandbox", "none"], ids=["sandboxed", "protection-off"])
def attack(request, django_db_setup, django_db_blocker, tmp_path_factory) -> Outcome:
    isolation = request.param
    marker = f"hostile-{uuid.uuid4().hex}"
    folder = tmp_path_factory.mktemp(f"hostile-{isolation}")
    demo_password = settings.PORTAL_DATA_ROOT / "demo-password"
    made_password = not demo_password.exists()
    if made_password:  # what `make run` leaves in the data root
        demo_password.write_text("demo-password-of-the-portal\n")
        demo_password.chmod(0o600)
    hasher = ["django.contrib.auth.hashers.MD5PasswordHasher"]
    with django_db_blocker.unblock(), override_settings(PASSWORD_HASHERS=hasher):
        (folder / "processes").mkdir()
        with celery_worker(folder / "processes") as portal:
            world = None
            try:
                world = World(folder / "world")
                return play(
                    world,
                    isolation=isolation,
                    marker=marker,
                    folder=folder,
                    portal=portal,
                    demo_password=demo_password,
                )
            except BaseException:
                print(portal.processes.logs())
                raise
            finally:
                clean_up(world, marker)
                if made_password:
                    demo_password.unlink(missing_ok=True)
