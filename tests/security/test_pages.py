"""Every browser page about one department's object, generated from the URLconf like the matrix from the schema:
an outsider gets 404 (GET, and POST for the forms), an anonymous visitor is sent to sign in, and the department's
admin (the owner, for personal tokens) does get the page, which shows the fixture is the right object.

A new page with a parameter needs a line in objects.PATH_FIXTURES (or in SHARED below, if it is not a
department's object); without one its tests fail and say so.
"""

from __future__ import annotations

import re

import pytest
from django.test import Client
from django.urls import URLResolver, get_resolver

from tests.security.objects import MissingFixture, fill_path, world_with_objects

pytestmark = pytest.mark.django_db

# Pages with their own tests (test_other_paths.py), or about nobody's objects.
OTHER = ("api/", "admin/", "tensorboard/", "serve/")
# Parameters naming objects every signed-in user may see or only platform admins change: not tenancy.
SHARED = {("clusters", "name"), ("priorities", "name")}
# Parameters whose object is personal: alice's own, hidden from every other user.
PERSONAL = {("tokens", "token_id")}


def routes(patterns=None, prefix: str = ""):
    for pattern in get_resolver().url_patterns if patterns is None else patterns:
        if isinstance(pattern, URLResolver):
            yield from routes(pattern.url_patterns, prefix + str(pattern.pattern))
        else:
            yield "/" + prefix + str(pattern.pattern)


def parameters(route: str) -> list[tuple[str, str]]:
    """(segment before, name) of each <converter:name> in the route."""
    found = []
    for match in re.finditer(r"<(?:\w+:)?(\w+)>", route):
        segment = route[: match.start()].rstrip("/").rsplit("/", 1)[-1]
        found.append((segment, match.group(1)))
    return found


PAGES = sorted(
    route
    for route in routes()
    if not route.startswith(tuple("/" + p for p in OTHER)) and parameters(route) and not set(parameters(route)) & SHARED
)


@pytest.fixture(scope="module")
def shared(django_db_setup, django_db_blocker, tmp_path_factory):
    with world_with_objects(django_db_blocker, tmp_path_factory.mktemp("pages")) as (world, objects):
        yield world, objects


@pytest.fixture
def portal(shared, db):
    return shared


def url_of(route: str, objects) -> str:
    try:
        return fill_path(re.sub(r"<(?:\w+:)?(\w+)>", r"{\1}", route), objects)
    except MissingFixture as exc:
        pytest.fail(str(exc))


def browser(user) -> Client:
    client = Client()
    if user is not None:
        client.force_login(user)
    return client


@pytest.mark.parametrize("route", PAGES)
def test_an_outsider_gets_404_from_every_page_of_a_vision_object(portal, route):
    world, objects = portal
    url = url_of(route, objects)
    client = browser(world.bob)
    for method in ("get", "post"):
        response = getattr(client, method)(url)
        if method == "get" and response.status_code == 405:
            continue  # a form's target: its POST is what matters
        assert response.status_code == 404, f"{method.upper()} {url}: {response.status_code}"
        # The portal's 404 page echoes the address the outsider opened (its language switch), nothing more.
        assert b"vis-secret" not in response.content.replace(url.encode(), b"")


@pytest.mark.parametrize("route", PAGES)
def test_an_anonymous_visitor_is_sent_to_sign_in(portal, route):
    _, objects = portal
    url = url_of(route, objects)
    for method in ("get", "post"):
        response = getattr(browser(None), method)(url)
        if method == "get" and response.status_code == 405:
            continue
        assert response.status_code == 302 and response["Location"].startswith("/login/"), (
            f"{method.upper()} {url}: {response.status_code}"
        )


@pytest.mark.parametrize("route", PAGES)
def test_the_departments_admin_gets_the_page(portal, route):
    world, objects = portal
    url = url_of(route, objects)
    user = world.alice if set(parameters(route)) & PERSONAL else world.carol
    response = browser(user).get(url)
    assert response.status_code in (200, 302, 405), f"GET {url} as {user.username}: {response.status_code}"
    assert not response.get("Location", "").startswith("/login/"), f"GET {url} as {user.username} asked to sign in"


@pytest.mark.parametrize("route", [page for page in PAGES if page.startswith("/console/")])
def test_a_member_cannot_use_the_console_of_their_own_department(portal, route):
    world, objects = portal
    url = url_of(route, objects)
    client = browser(world.alice)
    for method in ("get", "post"):
        response = getattr(client, method)(url)
        if method == "get" and response.status_code == 405:
            continue
        assert response.status_code in (403, 404), f"{method.upper()} {url} as a member: {response.status_code}"
