import importlib
import io
import re
from datetime import timedelta
from types import SimpleNamespace

from django.core.management import call_command
from django.db import connection
from django.db.migrations.loader import MigrationLoader
from django.test import Client
from django.utils import timezone

from accounts.models import ApiToken
from accounts.tokens import token_authenticate, token_create


def _client_with_key(world, key):
    client = world.api()
    client.credentials(HTTP_AUTHORIZATION=f"Token {key}")
    return client


def _browser(world, user):
    client = Client(enforce_csrf_checks=True)
    client.force_login(user)
    assert client.get("/tokens/").status_code == 200  # sets the CSRF cookie
    return client, client.cookies["csrftoken"].value


def test_it_shows_a_new_key_once_and_never_in_the_list(world):
    api = world.api(world.alice)
    response = api.post("/api/v1/tokens/", {"name": "laptop"}, format="json")
    assert response.status_code == 201
    body = response.json()
    key = body["key"]
    assert body["name"] == "laptop" and body["prefix"] == key[:8] and len(key) >= 40

    listing = api.get("/api/v1/tokens/")
    assert key not in listing.content.decode()
    rows = listing.json()["results"]
    assert {"laptop", "tests"} <= {row["name"] for row in rows}
    assert set(rows[0]) == {"id", "name", "prefix", "created_at", "last_used_at", "expires_at"}


def test_it_authenticates_with_a_new_key_and_records_its_use(world):
    key = world.api(world.alice).post("/api/v1/tokens/", {"name": "ci"}, format="json").json()["key"]
    assert _client_with_key(world, key).get("/api/v1/me/").json()["username"] == "alice"
    assert ApiToken.objects.get(name="ci").last_used_at is not None


def test_it_refuses_a_revoked_key_with_401(world):
    api = world.api(world.alice)
    created = api.post("/api/v1/tokens/", {"name": "old script"}, format="json").json()
    assert api.delete(f"/api/v1/tokens/{created['id']}/").status_code == 204

    response = _client_with_key(world, created["key"]).get("/api/v1/me/")
    assert response.status_code == 401
    assert response["WWW-Authenticate"] == "Token"
    assert created["id"] not in [row["id"] for row in api.get("/api/v1/tokens/").json()["results"]]
    assert api.delete(f"/api/v1/tokens/{created['id']}/").status_code == 404


def test_it_refuses_an_expired_key(world):
    token, key = token_create(user=world.alice, name="short-lived")
    ApiToken.objects.filter(pk=token.pk).update(expires_at=timezone.now() - timedelta(seconds=1))
    assert _client_with_key(world, key).get("/api/v1/me/").status_code == 401


def test_it_hides_another_users_token_with_404(world):
    created = world.api(world.alice).post("/api/v1/tokens/", {"name": "mine"}, format="json").json()
    assert world.api(world.bob).delete(f"/api/v1/tokens/{created['id']}/").status_code == 404
    assert world.api(world.admin).delete(f"/api/v1/tokens/{created['id']}/").status_code == 404
    assert "mine" not in [row["name"] for row in world.api(world.bob).get("/api/v1/tokens/").json()["results"]]
    assert _client_with_key(world, created["key"]).get("/api/v1/me/").status_code == 200


def test_it_wants_a_token_name(world):
    api = world.api(world.alice)
    assert set(api.post("/api/v1/tokens/", {}, format="json").json()) == {"name"}
    blank = api.post("/api/v1/tokens/", {"name": "   "}, format="json")
    assert blank.status_code == 400 and set(blank.json()) == {"name"}
    long = api.post("/api/v1/tokens/", {"name": "x" * 61}, format="json")
    assert long.status_code == 400 and "60" in long.json()["name"][0]


def test_it_answers_anonymous_token_calls_with_401(world):
    assert world.api().get("/api/v1/tokens/").status_code == 401
    assert world.api().post("/api/v1/tokens/", {"name": "x"}, format="json").status_code == 401


def test_it_updates_last_used_at_at_most_once_a_minute(world):
    token, key = token_create(user=world.alice, name="busy")
    start = timezone.now()
    token_authenticate(key, now=start)
    token_authenticate(key, now=start + timedelta(seconds=59))
    token.refresh_from_db()
    assert token.last_used_at == start
    token_authenticate(key, now=start + timedelta(seconds=61))
    token.refresh_from_db()
    assert token.last_used_at == start + timedelta(seconds=61)


def test_it_stores_no_clear_key(world):
    key = world.api(world.alice).post("/api/v1/tokens/", {"name": "secret"}, format="json").json()["key"]
    signed_in = world.api().post("/api/v1/auth/token/", {"username": "bob", "password": world.password}, format="json")
    dump = io.StringIO()
    call_command("dumpdata", stdout=dump)
    assert key not in dump.getvalue()
    assert signed_in.json()["token"] not in dump.getvalue()
    assert key[:8] in dump.getvalue()  # the prefix is, for display


def test_it_signs_in_for_a_new_working_key_each_time(world):
    first = world.api().post("/api/v1/auth/token/", {"username": "alice", "password": world.password}, format="json")
    again = world.api().post("/api/v1/auth/token/", {"username": "alice", "password": world.password}, format="json")
    assert first.status_code == again.status_code == 200
    assert first.json()["token"] != again.json()["token"]
    for response in (first, again):
        assert _client_with_key(world, response.json()["token"]).get("/api/v1/me/").json()["username"] == "alice"
    assert ApiToken.objects.filter(user=world.alice, name="api").count() == 2


def test_it_gives_one_message_for_wrong_credentials(world):
    wrong_password = world.api().post("/api/v1/auth/token/", {"username": "alice", "password": "nope"}, format="json")
    wrong_user = world.api().post("/api/v1/auth/token/", {"username": "mallory", "password": "nope"}, format="json")
    assert wrong_password.status_code == wrong_user.status_code == 400
    assert (
        wrong_password.json()
        == wrong_user.json()
        == {"non_field_errors": ["Unable to sign in with that username and password."]}
    )
    assert not ApiToken.objects.filter(name="api").exists()


def test_it_creates_a_token_on_the_page_and_shows_the_key_once(world):
    client, csrf = _browser(world, world.alice)
    response = client.post("/tokens/", {"name": "notebook", "csrfmiddlewaretoken": csrf})
    assert response.status_code == 200
    html = response.content.decode()
    key = re.search(r'id="new-token-key" value="([^"]+)"', html).group(1)
    assert "It will not be shown again" in html
    assert "no-store" in response["Cache-Control"]
    assert _client_with_key(world, key).get("/api/v1/me/").json()["username"] == "alice"

    page = client.get("/tokens/").content.decode()
    assert "notebook" in page and key[:8] in page
    assert key not in page


def test_it_shows_name_problems_beside_the_field(world):
    client, csrf = _browser(world, world.alice)
    response = client.post("/tokens/", {"name": "", "csrfmiddlewaretoken": csrf})
    assert response.status_code == 400
    assert "Give the token a name" in response.content.decode()
    assert not ApiToken.objects.filter(user=world.alice).exists()


def test_it_revokes_a_token_on_the_page(world):
    token, key = token_create(user=world.alice, name="retired")
    client, csrf = _browser(world, world.alice)
    assert "retired" in client.get("/tokens/").content.decode()
    assert client.post(f"/tokens/{token.pk}/revoke/").status_code == 403  # no CSRF token
    response = client.post(f"/tokens/{token.pk}/revoke/", {"csrfmiddlewaretoken": csrf}, follow=True)
    assert response.redirect_chain == [("/tokens/", 302)]
    html = response.content.decode()
    assert "Revoked the token “retired”" in html
    assert "You have no API tokens" in html
    assert _client_with_key(world, key).get("/api/v1/me/").status_code == 401


def test_it_hides_another_users_token_on_the_page(world):
    token, key = token_create(user=world.alice, name="alices")
    client, csrf = _browser(world, world.bob)
    assert "alices" not in client.get("/tokens/").content.decode()
    assert client.post(f"/tokens/{token.pk}/revoke/", {"csrfmiddlewaretoken": csrf}).status_code == 404
    assert _client_with_key(world, key).get("/api/v1/me/").status_code == 200


def test_it_sends_anonymous_visitors_of_the_page_to_login(client, world):
    response = client.get("/tokens/")
    assert response.status_code == 302
    assert response["Location"].startswith("/login/")


def test_it_links_the_page_from_the_navigation(client, world):
    client.force_login(world.bob)
    assert 'href="/tokens/"' in client.get("/").content.decode()


def test_it_keeps_old_drf_keys_working_and_deletes_their_clear_copies(world):
    migration = importlib.import_module("quotas.migrations.0003_api_token")
    old_key = "0123456789abcdef0123456789abcdef01234567"
    with connection.cursor() as cursor:
        cursor.execute(
            'CREATE TABLE "authtoken_token" ("key" varchar(40) PRIMARY KEY, "user_id" integer,'
            ' "created" timestamp with time zone)'
        )
        cursor.execute(
            'INSERT INTO "authtoken_token" VALUES (%s, %s, %s)', [old_key, world.bob.pk, "2026-01-02 03:04:05"]
        )
    # The migration runs with the models as they were at that migration (ApiToken then lived in quotas).
    historical = MigrationLoader(connection).project_state(("quotas", "0003_api_token")).apps
    migration.carry_over_drf_tokens(historical, SimpleNamespace(connection=connection))
    with connection.cursor() as cursor:
        cursor.execute('SELECT COUNT(*) FROM "authtoken_token"')
        assert cursor.fetchone() == (0,)
    carried = ApiToken.objects.get(user=world.bob, name="api")
    assert carried.created_at.year == 2026 and carried.prefix == old_key[:8]
    assert _client_with_key(world, old_key).get("/api/v1/me/").json()["username"] == "bob"
