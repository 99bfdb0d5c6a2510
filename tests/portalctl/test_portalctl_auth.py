"""portalctl's sign-in and configuration: `login` stores the url and a token for the owner only, the environment
wins over that file, and the client stands alone (nothing of the portal or Django imported)."""

from __future__ import annotations

import os
import stat
import subprocess
import sys

import pytest
from django.conf import global_settings

from tests.portalctl.cli_harness import ROOT


@pytest.mark.django_db(transaction=True)
def test_login_stores_url_and_token_readable_only_by_the_owner(world, cli, settings):
    # The portal process checks passwords with Django's default hashers, not the tests' fast MD5 one.
    settings.PASSWORD_HASHERS = global_settings.PASSWORD_HASHERS
    world.alice.set_password(world.password)
    world.alice.save(update_fields=["password"])
    wrong = cli(
        "login",
        "--url",
        cli.url,
        "--username",
        "alice",
        "--password-stdin",
        stdin="wrong\n",
        PORTAL_URL=None,
        PORTAL_TOKEN=None,
    )
    assert wrong.returncode == 1 and "Unable to sign in" in wrong.stderr
    assert not cli.config.exists()

    login = cli(
        "login",
        "--url",
        cli.url + "/api/v1/",
        "--username",
        "alice",
        "--password-stdin",
        stdin=world.password + "\n",
        PORTAL_URL=None,
        PORTAL_TOKEN=None,
    )
    assert login.returncode == 0, login.stderr
    assert f"as alice; url and token stored in {cli.config}" in login.stdout
    assert stat.S_IMODE(cli.config.stat().st_mode) == 0o600
    assert stat.S_IMODE(cli.config.parent.stat().st_mode) == 0o700
    assert cli.config.read_text().startswith(f'url = "{cli.url}"\ntoken = "')

    whoami = cli("whoami", PORTAL_URL=None, PORTAL_TOKEN=None)  # from the file alone
    assert whoami.returncode == 0 and whoami.stdout.startswith(f"alice at {cli.url}")
    assert "vision" in whoami.stdout and "member" in whoami.stdout
    assert cli("whoami", PORTAL_URL=None, PORTAL_TOKEN="not-a-token").returncode == 4  # the environment wins


def test_the_client_imports_nothing_of_the_portal_or_django():
    probe = (
        "import sys, portalctl.cli; "
        "print(sorted({m.split('.')[0] for m in sys.modules} & {'django', 'rest_framework', 'config', 'jobs', "
        "'quotas', 'models_registry', 'builds', 'frontend'}))"
    )
    result = subprocess.run(
        [sys.executable, "-c", probe],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        env={k: v for k, v in os.environ.items() if k != "DJANGO_SETTINGS_MODULE"},
    )
    assert result.stdout.strip() == "[]", result.stderr
