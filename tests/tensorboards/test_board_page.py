"""The portal's page of a comparison board (/tensorboards/<id>/): the portal's navigation, the jobs compared with
links back to them, the board in a frame; another department's board is the portal's 404."""

from __future__ import annotations

from django.test import Client

from tests.jobs.test_tensorboard import portal, submit_with_events  # noqa: F401 (fixture)

NAVIGATION = 'aria-label="Main"'


def browser(user=None) -> Client:
    client = Client()
    if user is not None:
        client.force_login(user)
    return client


def test_a_comparison_has_a_page_in_the_portal_with_a_way_back(portal, settings):
    first, _ = submit_with_events(portal, settings, "first")
    second, _ = submit_with_events(portal, settings, "second")
    board = portal.api(portal.alice).post("/api/v1/tensorboards/", {"jobs": [first, second]}, format="json").json()

    response = browser(portal.alice).get(f"/tensorboards/{board['id']}/")
    assert response.status_code == 200
    text = response.content.decode()
    assert NAVIGATION in text
    assert "Comparing 2 jobs in TensorBoard" in text
    assert f'href="/jobs/{first}/">first</a>' in text and f'href="/jobs/{second}/">second</a>' in text
    assert 'href="/jobs/">Back to the jobs</a>' in text
    assert f'data-tensorboard-embed="/tensorboard/compare/{board["id"]}/"' in text


def test_another_departments_comparison_is_not_found_and_visitors_sign_in(portal, settings):
    first, _ = submit_with_events(portal, settings, "first")
    second, _ = submit_with_events(portal, settings, "second")
    board = portal.api(portal.alice).post("/api/v1/tensorboards/", {"jobs": [first, second]}, format="json").json()

    response = browser(portal.bob).get(f"/tensorboards/{board['id']}/")
    assert response.status_code == 404
    text = response.content.decode()
    assert NAVIGATION in text and "No TensorBoard with that id in your departments." in text
    assert "first" not in text
    assert browser(portal.alice).get("/tensorboards/999999/").status_code == 404
    response = browser().get(f"/tensorboards/{board['id']}/")
    assert response.status_code == 302 and response["Location"] == f"/login/?next=/tensorboards/{board['id']}/"
