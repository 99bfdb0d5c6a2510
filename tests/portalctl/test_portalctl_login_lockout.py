"""portalctl login against the real portal process (issue 16): `--expires-in-days` gives the stored token an
expiry, and a locked-out account is told so (429: when to try again, that an admin can lift it)."""

from __future__ import annotations

import pytest
from django.conf import global_settings
from django.utils import timezone

from accounts.models import ApiToken


def login(cli, password: str, *extra: str):
    return cli(
        "login",
        "--url",
        cli.url,
        "--username",
        "bob",
        "--password-stdin",
        *extra,
        stdin=password + "\n",
        PORTAL_URL=None,
        PORTAL_TOKEN=None,
    )


@pytest.mark.django_db(transaction=True)
def test_login_gives_the_token_an_expiry_and_a_locked_account_is_told_when_to_try_again(world, cli, settings):
    settings.PASSWORD_HASHERS = global_settings.PASSWORD_HASHERS  # the portal process uses the default hashers
    world.bob.set_password(world.password)
    world.bob.save(update_fields=["password"])

    stored = login(cli, world.password, "--expires-in-days", "5")
    assert stored.returncode == 0, stored.stderr
    token = ApiToken.objects.filter(user=world.bob, name="api").get()
    assert 4.99 < (token.expires_at - timezone.now()).total_seconds() / 86400 <= 5

    for _ in range(settings.AXES_FAILURE_LIMIT):
        login(cli, "wrong")
    locked = login(cli, world.password)
    assert locked.returncode != 0
    assert "429" in locked.stderr and "Too many failed sign-ins" in locked.stderr, locked.stderr
    assert "Try again after" in locked.stderr and "lift the lock-out" in locked.stderr
    assert ApiToken.objects.filter(user=world.bob, name="api").count() == 1, "no token while locked out"
