"""TensorBoard on demand: real `tensorboard` processes behind the portal's authenticated proxy.

Event files are written with tensorboardX into the folder a local job's TENSORBOARD_LOG_DIR points
at; boards are started through the API and read through /tensorboard/... with Django's AsyncClient
(the proxy streams asynchronously). Every board a test starts is stopped at teardown.
"""

from __future__ import annotations

import json
import os
import signal
import time
from datetime import timedelta
from pathlib import Path

import pytest
from asgiref.sync import async_to_sync
from django.test import AsyncClient
from tensorboardX import SummaryWriter

from clusters import local_procs
from jobs.models import Job
from tensorboards import proxy
from tensorboards import services as boards
from tensorboards.models import TensorBoard

JOB = {
    "department": "vision",
    "code_url": "https://git.example.com/team/repo.git",
    "command": "python train.py",
    "gpus_per_worker": 0.25,
}
LOSSES = [1.0, 0.5, 0.25, 0.125, 0.0625]


@pytest.fixture
def portal(world, settings, tmp_path):
    """The test world with its own data root; every TensorBoard started meanwhile is stopped afterwards."""
    settings.PORTAL_DATA_ROOT = tmp_path / "portal"
    yield world
    for board in TensorBoard.objects.exclude(pid=None):
        boards.board_stop(board=board)
        poll(
            lambda board=board: not local_procs.alive(board.pid, int(board.handle) if board.handle else None),
            what=f"TensorBoard {board.pk} to end",
            timeout=15,
        )


def submit_with_events(portal, settings, name: str, *, user=None, tensorboard=True) -> tuple[int, str]:
    """Submit a job and write a `loss` scalar over 5 steps where its run's TENSORBOARD_LOG_DIR points
    (local_jobdir.JobDir.tensorboard_run: <executor root>/tensorboard/<job id>/run-<run index>/).

    Returns (job id, the run's name on the board).
    """
    response = portal.api(user or portal.alice).post(
        "/api/v1/jobs/", {**JOB, "name": name, "tensorboard": tensorboard}, format="json"
    )
    assert response.status_code == 201, response.json()
    job = Job.objects.get(pk=response.json()["id"])
    assert job.run_id, "the job was admitted and so has a run"
    folder = settings.PORTAL_DATA_ROOT / "executors" / job.cluster.name / "tensorboard" / job.storage_key / "run-0"
    writer = SummaryWriter(logdir=str(folder))
    for step, loss in enumerate(LOSSES):
        writer.add_scalar("loss", loss, step)
    writer.close()
    return job.pk, f"{name}-{job.pk}/run-0"


def fetch(path: str, *, user=None, method: str = "get", data=None, accept: str = "*/*", scope: dict | None = None):
    """One request through the ASGI stack; returns (response, body). Streams are read asynchronously."""

    async def go():
        client = AsyncClient()
        if user is not None:
            await client.aforce_login(user)
        try:
            if scope is not None:
                response = await client.request(
                    **{
                        "method": "GET",
                        "path": path,
                        "query_string": "",
                        "headers": [(b"host", b"testserver")],
                        **scope,
                    }
                )
            elif method == "post":
                response = await client.post(path, data, headers={"accept": accept})
            else:
                response = await client.get(path, headers={"accept": accept})
            if response.streaming:
                body = b"".join([chunk async for chunk in response.streaming_content])
            else:
                body = response.content
        finally:
            await proxy.clients_close()  # this event loop ends with the call
        return response, body

    return async_to_sync(go)()


def poll(attempt, *, what: str, timeout: float = 90):
    deadline = time.monotonic() + timeout
    while True:
        value = attempt()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(0.1)


def api_status(portal, url: str) -> dict:
    response = portal.api(portal.alice).get(url)
    assert response.status_code == 200, response.content
    return response.json()


def wait_running(portal, url: str) -> dict:
    board = poll(lambda: (b := api_status(portal, url))["status"] == "running" and b, what=f"{url} running")
    assert board["message"] == ""
    return board


def tags(prefix: str, user) -> dict:
    response, body = fetch(f"{prefix}data/plugin/scalars/tags", user=user)
    assert response.status_code == 200, body
    assert response["Content-Type"] == "application/json"
    return json.loads(body)


def test_it_starts_a_real_tensorboard_for_a_job_and_serves_it_through_the_proxy(portal, settings):
    job_id, run = submit_with_events(portal, settings, "digits")

    response = portal.api(portal.alice).post(f"/api/v1/jobs/{job_id}/tensorboard/")
    assert response.status_code == 200, response.json()
    assert response.json()["url"] == f"/tensorboard/{job_id}/"
    assert response.json()["status"] in {"starting", "running"}
    board = wait_running(portal, f"/api/v1/jobs/{job_id}/tensorboard/")
    assert board["jobs"] == [job_id]

    # Starting again reuses the running board and its process.
    pid = TensorBoard.objects.get(pk=board["id"]).pid
    again = portal.api(portal.carol).post(f"/api/v1/jobs/{job_id}/tensorboard/").json()
    assert (again["id"], again["status"]) == (board["id"], "running")
    assert TensorBoard.objects.get(pk=board["id"]).pid == pid
    assert f"--path_prefix\0/tensorboard/{job_id}\0" in Path(f"/proc/{pid}/cmdline").read_text()

    page, html = fetch(f"/tensorboard/{job_id}/", user=portal.alice, accept="text/html")
    assert page.status_code == 200
    assert page["Content-Type"].startswith("text/html")
    assert page["X-Frame-Options"] == "SAMEORIGIN"
    assert b"<title>TensorBoard</title>" in html
    assert "Set-Cookie" not in page

    found = poll(lambda: run in (t := tags(f"/tensorboard/{job_id}/", portal.alice)) and t, what="the loss tag")
    assert list(found) == [run]
    assert "loss" in found[run]

    # The data API posts forms: the proxy forwards the method and body.
    response, body = fetch(
        f"/tensorboard/{job_id}/data/plugin/scalars/scalars_multirun",
        user=portal.alice,
        method="post",
        data={"tag": "loss", "runs": [run]},
    )
    assert response.status_code == 200, body
    assert [(step, value) for _, step, value in json.loads(body)[run]] == list(enumerate(LOSSES))
    assert TensorBoard.objects.get(pk=board["id"]).last_access_at is not None


def test_it_compares_the_runs_of_several_jobs_on_one_board(portal, settings):
    first, first_run = submit_with_events(portal, settings, "first")
    second, second_run = submit_with_events(portal, settings, "second")

    response = portal.api(portal.alice).post("/api/v1/tensorboards/", {"jobs": [second, first]}, format="json")
    assert response.status_code == 200, response.json()
    board = response.json()
    assert board["url"] == f"/tensorboard/compare/{board['id']}/"
    assert board["jobs"] == [first, second]
    wait_running(portal, f"/api/v1/tensorboards/{board['id']}/")
    same = (
        portal.api(portal.alice).post("/api/v1/tensorboards/", {"jobs": [first, second, first]}, format="json").json()
    )
    assert same["id"] == board["id"]

    found = poll(lambda: len(t := tags(board["url"], portal.alice)) == 2 and t, what="both runs")
    assert sorted(found) == sorted([first_run, second_run])
    assert all("loss" in run_tags for run_tags in found.values())
    listed = portal.api(portal.alice).get("/api/v1/tensorboards/").json()
    assert [b["id"] for b in listed] == [board["id"]]

    # bob (nlp) sees neither the board nor that it exists.
    assert fetch(board["url"], user=portal.bob)[0].status_code == 404
    assert portal.api(portal.bob).get(f"/api/v1/tensorboards/{board['id']}/").status_code == 404
    assert portal.api(portal.bob).get("/api/v1/tensorboards/").json() == []


def test_it_names_the_jobs_a_comparison_cannot_use(portal, settings):
    mine, _ = submit_with_events(portal, settings, "mine")
    theirs = (
        portal.api(portal.bob)
        .post("/api/v1/jobs/", {**JOB, "name": "theirs", "department": "nlp"}, format="json")
        .json()["id"]
    )
    response = portal.api(portal.alice).post("/api/v1/tensorboards/", {"jobs": [mine, theirs, 999999]}, format="json")
    assert response.status_code == 400
    assert response.json() == {"jobs": [f"No job with ids {theirs}, 999999 in your departments."]}
    response = portal.api(portal.alice).post("/api/v1/tensorboards/", {"jobs": [mine]}, format="json")
    assert response.status_code == 400
    response = portal.api(portal.alice).post("/api/v1/tensorboards/", {"jobs": list(range(1, 13))}, format="json")
    assert response.status_code == 400
    assert "at most 10" in response.json()["jobs"][0]
    assert not TensorBoard.objects.exists()


def test_it_hides_a_jobs_board_from_outsiders_and_anonymous_users(portal, settings):
    job_id, _ = submit_with_events(portal, settings, "secret")
    assert fetch(f"/tensorboard/{job_id}/", user=portal.bob, accept="text/html")[0].status_code == 404
    assert fetch(f"/tensorboard/{job_id}/data/runs", user=portal.bob)[0].status_code == 404
    assert fetch("/tensorboard/999999/", user=portal.alice)[0].status_code == 404
    assert portal.api(portal.bob).post(f"/api/v1/jobs/{job_id}/tensorboard/").status_code == 404
    assert portal.api(portal.bob).get(f"/api/v1/jobs/{job_id}/tensorboard/").status_code == 404

    page, _ = fetch(f"/tensorboard/{job_id}/", accept="text/html")
    assert page.status_code == 302
    assert page["Location"] == f"/login/?next=/tensorboard/{job_id}/"
    assert fetch(f"/tensorboard/{job_id}/data/runs")[0].status_code == 401
    assert portal.api().post(f"/api/v1/jobs/{job_id}/tensorboard/").status_code == 401
    assert not TensorBoard.objects.exists(), "nobody allowed asked for it, so nothing was started"


@pytest.mark.parametrize(
    "path, raw",
    [
        ("/tensorboard/{id}/../1/", None),
        ("/tensorboard/{id}/./data/runs", None),
        ("/tensorboard/{id}/data\\runs", None),
        ("/tensorboard/{id}/data%00runs", None),
        ("/tensorboard/{id}/http://evil.example/", None),
        ("/tensorboard/{id}//etc/passwd", None),
        ("/tensorboard/{id}/data/runs", "/tensorboard/{id}/data%2fruns"),
        ("/tensorboard/{id}/data/runs", "/tensorboard/{id}/data%2Fruns"),
        ("/tensorboard/{id}/../../x", "/tensorboard/{id}/%2e%2e/%2e%2e/x"),
    ],
)
def test_it_rejects_path_tricks(portal, settings, path, raw):
    job_id, _ = submit_with_events(portal, settings, "tricks")
    if raw is None:
        response, body = fetch(path.format(id=job_id), user=portal.alice)
    else:
        response, body = fetch(
            path.format(id=job_id),
            user=portal.alice,
            scope={"path": path.format(id=job_id), "raw_path": raw.format(id=job_id).encode()},
        )
    assert response.status_code == 400, body
    # A NUL is refused before the proxy, by the portal-wide check of addresses (config/parameters.py).
    assert (b"contains a NUL character" if "%00" in path else b"not allowed") in body


def test_it_refuses_posts_from_other_origins(portal, settings):
    job_id, _ = submit_with_events(portal, settings, "origin")
    response, _ = fetch(
        f"/tensorboard/{job_id}/data/plugin/scalars/scalars_multirun",
        user=portal.alice,
        scope={"method": "POST", "headers": [(b"host", b"testserver"), (b"origin", b"https://evil.example")]},
    )
    assert response.status_code == 403
    assert not TensorBoard.objects.exists()


def test_it_refuses_a_board_for_a_job_without_tensorboard(portal, settings):
    job_id, _ = submit_with_events(portal, settings, "quiet", tensorboard=False)
    response = portal.api(portal.alice).post(f"/api/v1/jobs/{job_id}/tensorboard/")
    assert response.status_code == 409
    assert "tensorboard=false" in response.json()["detail"]
    response, body = fetch(f"/tensorboard/{job_id}/", user=portal.alice)
    assert response.status_code == 409
    assert b"tensorboard=false" in body


def test_it_stops_a_board_nobody_visited_for_the_idle_timeout(portal, settings):
    settings.PORTAL_TENSORBOARD_IDLE_SECONDS = 600
    job_id, _ = submit_with_events(portal, settings, "idle")
    board_id = portal.api(portal.alice).post(f"/api/v1/jobs/{job_id}/tensorboard/").json()["id"]
    wait_running(portal, f"/api/v1/jobs/{job_id}/tensorboard/")
    board = TensorBoard.objects.get(pk=board_id)
    now = board.last_access_at  # the clock starts at the last visit, not when the test got here

    assert boards.boards_stop_idle(now=now + timedelta(seconds=599)) == 0
    assert local_procs.alive(board.pid, int(board.handle))
    assert boards.boards_stop_idle(now=now + timedelta(seconds=601)) == 1

    poll(lambda: not local_procs.alive(board.pid, int(board.handle)), what="the TensorBoard process to end", timeout=15)
    status = api_status(portal, f"/api/v1/jobs/{job_id}/tensorboard/")
    assert status["status"] == "stopped"
    assert "600 s without a visit" in status["message"]

    # Opening it again starts it again.
    response, _ = fetch(f"/tensorboard/{job_id}/", user=portal.alice, accept="text/html")
    assert response.status_code == 503
    assert response["Retry-After"] == "2"
    wait_running(portal, f"/api/v1/jobs/{job_id}/tensorboard/")


def test_it_restarts_a_board_whose_process_died_on_the_next_visit(portal, settings):
    job_id, run = submit_with_events(portal, settings, "phoenix")
    portal.api(portal.alice).post(f"/api/v1/jobs/{job_id}/tensorboard/")
    wait_running(portal, f"/api/v1/jobs/{job_id}/tensorboard/")
    board = TensorBoard.objects.get(key=f"job:{job_id}")
    os.kill(board.pid, signal.SIGKILL)
    poll(lambda: not local_procs.alive(board.pid, int(board.handle)), what="the killed process to end", timeout=15)

    response, body = fetch(f"/tensorboard/{job_id}/data/runs", user=portal.alice)
    assert response.status_code == 503, body
    assert b"starting" in body

    poll(lambda: fetch(f"/tensorboard/{job_id}/", user=portal.alice)[0].status_code == 200, what="the board back")
    restarted = TensorBoard.objects.get(pk=board.pk)
    assert restarted.status == "running"
    assert restarted.pid != board.pid
    assert poll(lambda: run in tags(f"/tensorboard/{job_id}/", portal.alice), what="the loss tag again")


def test_it_shows_a_new_run_of_a_requeued_job_on_the_running_board(portal, settings):
    job_id, first_run = submit_with_events(portal, settings, "again")
    portal.api(portal.alice).post(f"/api/v1/jobs/{job_id}/tensorboard/")
    wait_running(portal, f"/api/v1/jobs/{job_id}/tensorboard/")
    poll(lambda: first_run in tags(f"/tensorboard/{job_id}/", portal.alice), what="the first run")

    # Preempted and admitted again: the job's next run writes its events into run-1 beside run-0.
    job = Job.objects.get(pk=job_id)
    job.run_id = f"{job_id}-0badcafe"
    job.save(update_fields=["run_id"])
    folder = settings.PORTAL_DATA_ROOT / "executors" / job.cluster.name / "tensorboard" / job.storage_key / "run-1"
    with SummaryWriter(logdir=str(folder)) as writer:
        writer.add_scalar("loss", 0.03, 5)
    assert boards.boards_reconcile() == 0

    found = poll(lambda: len(t := tags(f"/tensorboard/{job_id}/", portal.alice)) == 2 and t, what="the second run")
    assert sorted(found) == sorted([first_run, f"again-{job_id}/run-1"])
