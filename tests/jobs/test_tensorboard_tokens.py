"""The TensorBoard proxy for automation (issue 16, item 8): API tokens open /tensorboard/... like the REST API.

A script sends `Authorization: Token <key>`; the proxy takes the REST API's header formats (the same
ApiTokenAuthentication) and its rules: the token's user must belong to the job's department, another
department's token gets what a missing board gets, and revoked or expired tokens are refused even next to
a working session cookie. Tokens in the query string are not read. Session-authenticated POSTs keep their
same-origin check; token-authenticated ones, which no other site can make a browser send, do not need it.
Real `tensorboard` processes where a board has to answer (test_tensorboard.py's fixtures).
"""

from __future__ import annotations

import json
from datetime import timedelta

import pytest
from asgiref.sync import async_to_sync
from django.test import AsyncClient
from django.utils import timezone

from accounts.models import ApiToken
from accounts.tokens import token_create, token_revoke
from jobs.models import Job
from tensorboards import proxy
from tensorboards.models import TensorBoard
from tests.jobs.test_tensorboard import LOSSES, poll, portal, submit_with_events, wait_running  # noqa: F401 - fixture

FOREIGN = "https://evil.example"


def call(path: str, *, token: str | None = None, header: str | None = None, session=None, method="get", **kwargs):
    """One request through the ASGI stack with `Authorization: Token <token>` (or `header` as it is);
    `session`: also signed in as that user. Returns (response, body text)."""

    async def go():
        client = AsyncClient()
        if session is not None:
            await client.aforce_login(session)
        headers = {"accept": "application/json", **kwargs.pop("headers", {})}
        if token is not None:
            headers["authorization"] = f"Token {token}"
        if header is not None:
            headers["authorization"] = header
        try:
            response = await getattr(client, method)(path, headers=headers, **kwargs)
            if response.streaming:
                body = b"".join([chunk async for chunk in response.streaming_content])
            else:
                body = response.content
        finally:
            await proxy.clients_close()
        return response, body.decode()

    return async_to_sync(go)()


def key_of(user, name: str = "automation", **fields) -> str:
    token, key = token_create(user=user, name=name)
    if fields:
        ApiToken.objects.filter(pk=token.pk).update(**fields)
    return key


def running_board(portal, settings, name: str) -> tuple[int, str]:
    job_id, run = submit_with_events(portal, settings, name)
    portal.api(portal.alice).post(f"/api/v1/jobs/{job_id}/tensorboard/")
    wait_running(portal, f"/api/v1/jobs/{job_id}/tensorboard/")
    return job_id, run


def test_a_script_reads_a_board_with_its_api_token(portal, settings):
    job_id, run = running_board(portal, settings, "scripted")
    key = key_of(portal.alice)

    def tags():
        response, body = call(f"/tensorboard/{job_id}/data/plugin/scalars/tags", token=key)
        assert response.status_code == 200, body
        return json.loads(body)

    assert "loss" in poll(lambda: run in (t := tags()) and t, what="the loss tag")[run]
    # The data API's POST, as TensorBoard's UI sends it (no Origin: a script is no browser).
    response, body = call(
        f"/tensorboard/{job_id}/data/plugin/scalars/scalars_multirun",
        token=key,
        method="post",
        data={"tag": "loss", "runs": [run]},
    )
    assert response.status_code == 200, body
    assert [(step, value) for _, step, value in json.loads(body)[run]] == list(enumerate(LOSSES))
    assert ApiToken.objects.get(prefix=key[:8]).last_used_at is not None

    # The REST API's header rules: the keyword in any case; a department admin's and a platform admin's tokens.
    assert call(f"/tensorboard/{job_id}/data/runs", header=f"token {key}")[0].status_code == 200
    assert call(f"/tensorboard/{job_id}/data/runs", token=key_of(portal.carol))[0].status_code == 200
    assert call(f"/tensorboard/{job_id}/data/runs", token=key_of(portal.admin))[0].status_code == 200


def test_another_departments_token_gets_what_a_missing_board_gets(portal, settings):
    job_id, _ = submit_with_events(portal, settings, "vision-only")
    other, _ = submit_with_events(portal, settings, "vision-too")
    job = Job.objects.get(pk=job_id)
    compare = TensorBoard.objects.create(key=f"compare:{job_id},{other}", department=job.department)
    compare.jobs.set([job_id, other])
    bob = key_of(portal.bob)
    missing, missing_body = call("/tensorboard/999999/data/runs", token=bob)
    assert missing.status_code == 404
    for path in (f"/tensorboard/{job_id}/", f"/tensorboard/{job_id}/data/runs", f"/tensorboard/compare/{compare.pk}/"):
        for method in ("get", "post"):
            response, body = call(path, token=bob, method=method)
            assert (response.status_code, body) == (404, missing_body), f"{method} {path}"
    # Alice's session cookie beside bob's token: the token decides who calls, never the session behind it.
    response, body = call(f"/tensorboard/{job_id}/data/runs", token=bob, session=portal.alice)
    assert (response.status_code, body) == (404, missing_body)
    assert not TensorBoard.objects.filter(key__startswith="job:").exists(), "bob started nothing"
    assert TensorBoard.objects.get(pk=compare.pk).status == "stopped"


@pytest.mark.parametrize("state", ["revoked", "expired", "inactive user"])
def test_a_token_that_no_longer_works_is_refused_even_beside_a_session(portal, settings, state):
    job_id, _ = submit_with_events(portal, settings, "refusals")
    if state == "revoked":
        token, key = token_create(user=portal.alice, name="old")
        token_revoke(user=portal.alice, token_id=token.pk)
    elif state == "expired":
        key = key_of(portal.alice, expires_at=timezone.now() - timedelta(seconds=1))
    else:
        key = key_of(portal.carol)
        type(portal.carol).objects.filter(pk=portal.carol.pk).update(is_active=False)
    for session in (None, portal.alice):
        response, body = call(f"/tensorboard/{job_id}/data/runs", token=key, session=session)
        assert response.status_code == 401, body
        assert response["WWW-Authenticate"] == "Token"
        assert body.startswith("Invalid, revoked or expired token."), body
        assert "Authorization: Token <key>" in body
    page, _ = call(f"/tensorboard/{job_id}/", token=key, headers={"accept": "text/html"})
    assert page.status_code == 401, "a script's refused token is told so, not sent to the login page"
    assert not TensorBoard.objects.exists(), "nothing was started for a refused token"


@pytest.mark.parametrize("header", ["Token", "Token a b", "Token caf\xe9"])
def test_a_malformed_token_header_is_refused_with_the_rest_apis_words(portal, settings, header):
    job_id, _ = submit_with_events(portal, settings, "malformed")
    response, body = call(f"/tensorboard/{job_id}/data/runs", header=header, session=portal.alice)
    assert response.status_code == 401, body
    assert body.startswith("Invalid token header."), body
    assert not TensorBoard.objects.exists()


@pytest.mark.parametrize("parameter", ["token", "access_token"])
def test_a_token_in_the_query_string_is_not_read(portal, settings, parameter):
    job_id, _ = submit_with_events(portal, settings, "in-the-url")
    response, body = call(f"/tensorboard/{job_id}/data/runs", data={parameter: key_of(portal.alice)})
    assert response.status_code == 401, body
    assert "not read from the URL" in body and "Authorization: Token <key>" in body
    assert not TensorBoard.objects.exists()


def test_session_posts_keep_their_origin_check_and_token_posts_need_none(portal, settings):
    job_id, run = running_board(portal, settings, "origins")
    path = f"/tensorboard/{job_id}/data/plugin/scalars/scalars_multirun"
    form = {"tag": "loss", "runs": [run]}
    # A page on another site posting with alice's cookie, with or without some other Authorization scheme.
    for header in (None, "Basic YWxpY2U6eA==", "Bearer abc"):
        response, body = call(
            path, session=portal.alice, header=header, method="post", data=form, headers={"origin": FOREIGN}
        )
        assert response.status_code == 403, (header, body)
        assert "Cross-origin" in body
    # A browser on another site cannot send alice's token without her key: nothing for a forged request to ride on.
    response, body = call(path, token=key_of(portal.alice), method="post", data=form, headers={"origin": FOREIGN})
    assert response.status_code == 200, body
    # And the session still opens the board, GET and same-origin POST.
    assert call(f"/tensorboard/{job_id}/data/runs", session=portal.alice)[0].status_code == 200
    same_origin = {"origin": "http://testserver"}
    assert call(path, session=portal.alice, method="post", data=form, headers=same_origin)[0].status_code == 200
