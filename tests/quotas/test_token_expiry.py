"""API tokens with an expiry (issue 16, item 6): set on the tokens page, in POST /api/v1/tokens/ and
POST /api/v1/auth/token/ (portalctl login --expires-in-days), bounded by PORTAL_TOKEN_MAX_DAYS, shown in the list,
and enforced: an expired key answers 401 saying it expired. Also: `manage.py demo` (make run's log) prints no
token, only how to get one; revoking a token sends accounts.signals.token_revoked."""

from __future__ import annotations

import re
from datetime import timedelta
from io import StringIO

from django.core.management import call_command
from django.test import Client
from django.utils import timezone
from django.utils.dateparse import parse_datetime

from accounts.models import ApiToken
from accounts.signals import token_revoked
from accounts.tokens import key_hash, token_create


def created_with(world, **fields):
    return world.api(world.alice).post("/api/v1/tokens/", {"name": "ci", **fields}, format="json")


def days_ahead(value: str) -> float:
    at = parse_datetime(value)
    assert at is not None, value
    return (at - timezone.now()).total_seconds() / 86400


def test_the_api_sets_an_expiry_in_days_or_at_a_time_and_lists_it(world):
    in_days = created_with(world, expires_in_days=30)
    assert in_days.status_code == 201
    assert 29.99 < days_ahead(in_days.json()["expires_at"]) <= 30
    at = (timezone.now() + timedelta(days=3)).replace(microsecond=0)
    exact = created_with(world, expires_at=at.isoformat())
    assert parse_datetime(exact.json()["expires_at"]) == at
    listed = {row["id"]: row for row in world.api(world.alice).get("/api/v1/tokens/").json()["results"]}
    assert listed[in_days.json()["id"]]["expires_at"] == in_days.json()["expires_at"]
    never = created_with(world)
    assert never.json()["expires_at"] is None, "without PORTAL_TOKEN_MAX_DAYS a token may never expire"


def test_a_wrong_expiry_is_a_400_saying_what_to_give(world):
    zero = created_with(world, expires_in_days=0)
    assert zero.status_code == 400
    assert zero.json()["expires_in_days"] == [
        "A token must live at least 1 day; leave it empty for the longest allowed lifetime."
    ]
    past = created_with(world, expires_at=(timezone.now() - timedelta(hours=1)).isoformat())
    assert past.json()["expires_at"] == ["This time has passed: give an expiry in the future (times are UTC)."]
    both = created_with(world, expires_in_days=3, expires_at=(timezone.now() + timedelta(days=1)).isoformat())
    assert both.json()["expires_in_days"] == ["Give either expires_in_days or expires_at, not both."]
    text = created_with(world, expires_in_days="soon")
    assert text.status_code == 400 and "expires_in_days" in text.json()
    assert not ApiToken.objects.filter(name="ci").exists()


def test_the_longest_lifetime_bounds_new_tokens_and_is_their_default(world, settings):
    settings.PORTAL_TOKEN_MAX_DAYS = 90
    too_long = created_with(world, expires_in_days=91)
    assert too_long.json()["expires_in_days"] == ["91 days is too long (the longest this portal allows is 90 days)."]
    far = created_with(world, expires_at=(timezone.now() + timedelta(days=100)).isoformat())
    assert far.json()["expires_at"] == ["This is too far ahead (the longest this portal allows is 90 days)."]
    default = created_with(world)
    assert 89.99 < days_ahead(default.json()["expires_at"]) <= 90
    signed_in = Client().post(
        "/api/v1/auth/token/", {"username": "bob", "password": world.password}, content_type="application/json"
    )
    assert ApiToken.objects.filter(user=world.bob, name="api").get().expires_at is not None, signed_in.json()


def test_the_token_endpoint_takes_an_expiry_too(world):
    answer = Client().post(
        "/api/v1/auth/token/",
        {"username": "bob", "password": world.password, "expires_in_days": 7},
        content_type="application/json",
    )
    assert answer.status_code == 200
    token = ApiToken.objects.get(key_hash=key_hash(answer.json()["token"]))
    assert timedelta(days=6.99) < token.expires_at - timezone.now() <= timedelta(days=7)
    refused = Client().post(
        "/api/v1/auth/token/",
        {"username": "bob", "password": world.password, "expires_in_days": -1},
        content_type="application/json",
    )
    assert refused.status_code == 400 and "at least 1 day" in refused.json()["expires_in_days"][0]


def test_the_page_sets_and_shows_the_expiry(world):
    browser = Client()
    browser.force_login(world.alice)
    page = browser.post("/tokens/", {"name": "laptop", "expires_in_days": "7"})
    assert page.status_code == 200
    token = ApiToken.objects.get(name="laptop")
    assert timedelta(days=6.99) < token.expires_at - timezone.now() <= timedelta(days=7)
    # In the reader's zone (UTC without the portal_tz cookie), the exact moment in the <time> element.
    assert f'<time datetime="{token.expires_at.isoformat()}"' in page.content.decode()
    assert f"{token.expires_at:%-d %b %Y, %H:%M}" in page.content.decode()
    wrong = browser.post("/tokens/", {"name": "desk", "expires_in_days": "0"})
    assert wrong.status_code == 400
    assert "A token must live at least 1 day" in wrong.content.decode()
    assert not ApiToken.objects.filter(name="desk").exists()


def test_an_expired_token_answers_401_saying_it_expired(world):
    token, key = token_create(user=world.alice, name="old", expires_in_days=1)
    client = world.api()
    client.credentials(HTTP_AUTHORIZATION=f"Token {key}")
    assert client.get("/api/v1/me/").status_code == 200
    ApiToken.objects.filter(pk=token.pk).update(expires_at=timezone.now() - timedelta(seconds=1))
    refused = client.get("/api/v1/me/")
    assert refused.status_code == 401 and refused["WWW-Authenticate"] == "Token"
    assert "This one expired at" in refused.json()["detail"] and "portalctl login" in refused.json()["detail"]
    ApiToken.objects.filter(pk=token.pk).update(revoked_at=timezone.now())
    assert refused.json()["detail"] != client.get("/api/v1/me/").json()["detail"], "a revoked one is not 'expired'"


def test_revoking_a_token_sends_token_revoked(world):
    token, _ = token_create(user=world.alice, name="socket")
    received = []

    def on_revoked(sender, token, **kwargs):
        received.append(token.pk)

    token_revoked.connect(on_revoked)
    try:
        world.api(world.alice).delete(f"/api/v1/tokens/{token.pk}/")
    finally:
        token_revoked.disconnect(on_revoked)
    assert received == [token.pk]


def test_the_demo_command_prints_no_token_but_how_to_get_one(world):
    out = StringIO()
    before = ApiToken.objects.count()
    call_command("demo", stdout=out)
    printed = out.getvalue()
    hashes = set(ApiToken.objects.values_list("key_hash", flat=True))
    words = set(re.findall(r"[A-Za-z0-9_-]{20,}", printed))
    assert not {key_hash(word) for word in words} & hashes, "a key of the database is in the output"
    assert ApiToken.objects.count() == before, "the demo issues no token"
    assert "Authorization: Token $TOKEN" in printed and "/tokens/" in printed and "portalctl login" in printed
