"""Failed sign-ins are throttled per account and per address (issue 16, item 5; accounts/login.py, django-axes).

What an attacker notices: after PORTAL_LOGIN_FAILURE_LIMIT wrong passwords the login page and the token
endpoint answer 429 saying when to try again, and the right password fails too; rotating X-Forwarded-For or the
username does not help. What the user notices: the page says until when and that an admin can lift it; once the
cool-off has passed (the attempts' times moved back: no sleeping) the right password works again.

With axes switched off (AXES_ENABLED=False) the lock-out tests here fail: shown in the issue-16 report.
"""

from __future__ import annotations

from axes.models import AccessAttempt
from django.conf import settings
from django.test import Client

from accounts.models import ApiToken

WRONG = "not-the-password"


def sign_in(client: Client, username: str, password: str, **extra):
    return client.post("/login/", {"username": username, "password": password}, **extra)


def signed_in(client: Client) -> bool:
    return client.get("/tokens/").status_code == 200


def token_call(client: Client, username: str, password: str, **extra):
    return client.post(
        "/api/v1/auth/token/", {"username": username, "password": password}, content_type="application/json", **extra
    )


def test_70_wrong_passwords_for_admin_lock_it_out_and_then_the_right_one_fails(world):
    client = Client()
    statuses = [sign_in(client, "admin", f"{WRONG}-{attempt}").status_code for attempt in range(70)]
    limit = settings.AXES_FAILURE_LIMIT
    assert statuses[: limit - 1] == [200] * (limit - 1), "the first wrong passwords get the form back"
    assert set(statuses[limit - 1 :]) == {429}, statuses

    right = sign_in(client, "admin", world.password)
    page = right.content.decode()
    assert right.status_code == 429
    assert "Too many failed sign-ins for this account or from your address" in page
    assert "Try again after" in page and "UTC" in page and "lift the lock-out" in page
    assert int(right["Retry-After"]) > 0
    assert not signed_in(client), "the right password does not sign in while locked out"
    # A fresh browser elsewhere (another address) is refused too: the account is locked, not just the address.
    elsewhere = Client(REMOTE_ADDR="192.0.2.77")
    assert sign_in(elsewhere, "admin", world.password).status_code == 429
    assert not signed_in(elsewhere)


def test_an_address_is_locked_out_across_usernames_and_forwarded_headers_do_not_help(world):
    attacker = Client(REMOTE_ADDR="198.51.100.9")
    limit = settings.AXES_FAILURE_LIMIT
    for attempt in range(limit):  # never the same username twice: no account reaches the limit
        sign_in(attacker, f"guess{attempt}", WRONG, HTTP_X_FORWARDED_FOR=f"203.0.113.{attempt}")
    assert sign_in(attacker, "alice", world.password, HTTP_X_FORWARDED_FOR="203.0.113.200").status_code == 429
    assert not signed_in(attacker)
    # alice herself, from her own address, is not locked: only the attacker's address is.
    alice = Client(REMOTE_ADDR="192.0.2.10")
    assert sign_in(alice, "alice", world.password).status_code == 302
    assert signed_in(alice)


def test_the_token_endpoint_is_locked_out_alike_and_answers_json(world):
    client = Client(REMOTE_ADDR="198.51.100.20")
    limit = settings.AXES_FAILURE_LIMIT
    answers = [token_call(client, "carol", WRONG) for _ in range(limit)]
    assert [a.status_code for a in answers[:-1]] == [400] * (limit - 1)
    assert answers[-1].status_code == 429
    tokens_before = ApiToken.objects.filter(user=world.carol).count()

    right = token_call(client, "carol", world.password)
    assert right.status_code == 429
    body = right.json()
    assert body["detail"].startswith("Too many failed sign-ins") and "Try again after" in body["detail"]
    assert body["locked_until"] and int(right["Retry-After"]) > 0
    assert ApiToken.objects.filter(user=world.carol).count() == tokens_before, "no token for a locked account"
    # The login page shares the count: the account is locked there too.
    assert sign_in(Client(), "carol", world.password).status_code == 429


def test_failures_on_the_page_and_the_api_add_up(world):
    client = Client(REMOTE_ADDR="198.51.100.21")
    limit = settings.AXES_FAILURE_LIMIT
    for attempt in range(limit):
        (sign_in if attempt % 2 else token_call)(client, "bob", WRONG)
    assert token_call(Client(), "bob", world.password).status_code == 429


def test_the_lock_out_ends_after_the_cool_off(world):
    client = Client()
    for _ in range(settings.AXES_FAILURE_LIMIT):
        sign_in(client, "alice", WRONG)
    assert sign_in(client, "alice", world.password).status_code == 429
    # The clock moves on: the failures are now older than the cool-off.
    AccessAttempt.objects.update(attempt_time=AccessAttempt.objects.first().attempt_time - settings.AXES_COOLOFF_TIME)
    assert sign_in(client, "alice", world.password).status_code == 302
    assert signed_in(client)


def test_without_a_cool_off_the_page_says_an_admin_must_lift_it(world, settings):
    settings.AXES_COOLOFF_TIME = None
    client = Client()
    for _ in range(settings.AXES_FAILURE_LIMIT):
        sign_in(client, "bob", WRONG)
    refused = sign_in(client, "bob", world.password)
    assert refused.status_code == 429
    assert "The lock-out lasts until an admin lifts it" in refused.content.decode()
    assert not refused.has_header("Retry-After")


def test_a_few_wrong_passwords_then_the_right_one_sign_in(world):
    client = Client()
    for _ in range(settings.AXES_FAILURE_LIMIT - 1):
        assert sign_in(client, "alice", WRONG).status_code == 200
    assert sign_in(client, "alice", world.password).status_code == 302
    assert signed_in(client)


def test_failures_are_counted_by_the_client_address_the_asgi_layer_set():
    from accounts.login import client_address

    class Request:
        META = {"REMOTE_ADDR": "192.0.2.1", "HTTP_X_FORWARDED_FOR": "10.9.9.9"}

    assert client_address(Request()) == "192.0.2.1"
    assert settings.AXES_CLIENT_IP_CALLABLE == "accounts.login.client_address"


def test_the_cool_off_given_is_the_end_of_the_lock_out(world):
    client = Client()
    for _ in range(settings.AXES_FAILURE_LIMIT):
        sign_in(client, "carol", WRONG)
    from accounts.login import lockout_state

    locked, until = lockout_state(username="carol", address=None)
    last = AccessAttempt.objects.order_by("-attempt_time").first().attempt_time
    assert locked and until == last + settings.AXES_COOLOFF_TIME
    # Tries while locked out do not push it back.
    sign_in(client, "carol", world.password)
    assert lockout_state(username="carol", address=None)[1] == until
