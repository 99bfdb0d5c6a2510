"""A member of another department sees nothing of vision's jobs: pages, logs, TensorBoard and websocket."""

from __future__ import annotations

import pytest
from playwright.sync_api import expect

# Opens the socket and reports whether it opened and how it closed (a refused handshake never opens).
SOCKET_OUTCOME = """path => new Promise(resolve => {
  const outcome = {opened: false, code: null, hello: null};
  const socket = new WebSocket(`ws://${location.host}${path}`);
  socket.onopen = () => { outcome.opened = true; };
  socket.onmessage = event => { outcome.hello = JSON.parse(event.data); socket.close(1000); };
  socket.onclose = event => { outcome.code = event.code; resolve(outcome); };
  setTimeout(() => resolve(outcome), 10000);
})"""


@pytest.mark.parametrize(
    ("path", "says"),
    [
        ("/jobs/{id}/", "No job with that id in your departments."),
        ("/api/v1/jobs/{id}/logs/", "No job with that id in your departments."),
        ("/tensorboard/{id}/", "No TensorBoard with that id in your departments."),
    ],
)
def test_an_outsider_gets_not_found_for_another_departments_job(visitor, portal, path, says):
    url = path.format(id=portal.vision_job_id)
    member = visitor.sign_in("alice")
    assert member.goto(url).status != 404  # the same address is there for vision's members

    outsider = visitor.sign_in("bob")
    response = outsider.goto(url)
    assert response.status == 404
    expect(outsider.locator("body")).to_contain_text(says)


def test_an_outsider_cannot_open_another_departments_job_socket(visitor, portal):
    path = f"/ws/jobs/{portal.vision_job_id}/"
    member = visitor.sign_in("alice")
    assert member.evaluate(SOCKET_OUTCOME, path) == {"opened": True, "code": 1000, "hello": {"type": "hello"}}

    outsider = visitor.sign_in("bob")
    outcome = outsider.evaluate(SOCKET_OUTCOME, path)
    assert outcome["hello"] is None
    assert not outcome["opened"] or outcome["code"] == 4404, outcome
