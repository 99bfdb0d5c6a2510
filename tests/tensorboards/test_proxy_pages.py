"""What a person's browser gets from the TensorBoard proxy: its refusals as pages of the portal (status kept),
TensorBoard's fonts through the board's prefix; API and token clients keep plain text."""

from __future__ import annotations

import re

import pytest

from tests.jobs.test_tensorboard import fetch, portal, submit_with_events, wait_running  # noqa: F401 (fixture)

NAVIGATION = 'aria-label="Main"'
HTML = "text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8"  # what Chromium sends for a page


def test_a_board_of_another_department_is_a_styled_404_for_a_browser(portal, settings):
    job_id, _ = submit_with_events(portal, settings, "secret")
    response, body = fetch(f"/tensorboard/{job_id}/", user=portal.bob, accept=HTML)
    assert response.status_code == 404
    assert response["Content-Type"].startswith("text/html")
    text = body.decode()
    assert NAVIGATION in text and "portal.css" in text
    assert "TensorBoard not found" in text and "No TensorBoard with that id in your departments." in text
    assert f"/jobs/{job_id}/" not in text  # nothing says the job exists
    assert 'href="/jobs/">See your jobs</a>' in text

    response, body = fetch(f"/tensorboard/{job_id}/data/runs", user=portal.bob)  # TensorBoard's own fetches
    assert response.status_code == 404
    assert response["Content-Type"] == "text/plain; charset=utf-8"
    assert body == b"No TensorBoard with that id in your departments."


def test_a_path_trick_and_a_job_without_tensorboard_are_pages_too(portal, settings):
    job_id, _ = submit_with_events(portal, settings, "quiet", tensorboard=False)
    response, body = fetch(f"/tensorboard/{job_id}/", user=portal.alice, accept=HTML)
    assert response.status_code == 409
    assert "This job has no TensorBoard" in body.decode() and "tensorboard=false" in body.decode()
    assert f'href="/jobs/{job_id}/">Back to the job</a>' in body.decode()

    response, body = fetch(f"/tensorboard/{job_id}/./x", user=portal.alice, accept=HTML)
    assert response.status_code == 400
    assert "This TensorBoard address is not allowed" in body.decode() and NAVIGATION in body.decode()
    response, body = fetch(f"/tensorboard/{job_id}/./x", user=portal.alice)
    assert response.status_code == 400 and response["Content-Type"].startswith("text/plain")


def test_a_starting_board_is_a_page_that_refreshes_itself_and_compact_inside_the_frame(portal, settings):
    job_id, _ = submit_with_events(portal, settings, "starting")
    response, body = fetch(f"/tensorboard/{job_id}/", user=portal.alice, accept=HTML)
    assert response.status_code == 503 and response["Retry-After"] == "2"
    text = body.decode()
    assert '<meta http-equiv="refresh" content="2">' in text
    assert "TensorBoard is starting" in text and NAVIGATION in text

    framed, body = fetch(
        f"/tensorboard/{job_id}/",
        user=portal.alice,
        scope={
            "headers": [(b"host", b"testserver"), (b"accept", HTML.encode()), (b"sec-fetch-dest", b"iframe")],
        },
    )
    text = body.decode()
    if framed.status_code == 503:  # the board may be up by now: then the frame shows TensorBoard itself
        assert '<meta http-equiv="refresh" content="2">' in text and "TensorBoard is starting" in text
        assert NAVIGATION not in text, "the job page around the frame has the navigation"
    else:
        assert framed.status_code == 200 and "<title>TensorBoard</title>" in text


@pytest.mark.parametrize("encoding", ["identity", "gzip, deflate, br"])
def test_tensorboards_fonts_load_through_the_boards_prefix(portal, settings, encoding):
    job_id, _ = submit_with_events(portal, settings, "fonts")
    portal.api(portal.alice).post(f"/api/v1/jobs/{job_id}/tensorboard/")
    wait_running(portal, f"/api/v1/jobs/{job_id}/tensorboard/")
    response, body = fetch(
        f"/tensorboard/{job_id}/",
        user=portal.alice,
        scope={
            "headers": [(b"host", b"testserver"), (b"accept", HTML.encode()), (b"accept-encoding", encoding.encode())]
        },
    )
    assert response.status_code == 200
    assert "Content-Encoding" not in response
    assert int(response["Content-Length"]) == len(body)
    assert "frame-ancestors 'self'" in response["Content-Security-Policy"]
    text = body.decode()
    assert "<title>TensorBoard</title>" in text
    fonts = re.findall(r"url\(([^)]*\.woff2)\)", text)
    assert fonts, "TensorBoard's index names its fonts"
    assert all(font.startswith(f"/tensorboard/{job_id}/font-roboto/") for font in fonts), fonts[:3]
    for font in sorted(set(fonts))[:3]:
        answer, data = fetch(font, user=portal.alice)
        assert answer.status_code == 200, font
        assert answer["Content-Type"] == "font/woff2" and data[:4] == b"wOF2"


def test_a_board_that_failed_to_start_says_so_and_leads_back_to_the_job(portal, settings):
    from jobs.models import Job
    from tensorboards.models import TensorBoard

    job_id, _ = submit_with_events(portal, settings, "broken")
    job = Job.objects.get(pk=job_id)
    board = TensorBoard.objects.create(
        key=f"job:{job_id}", department=job.department, status=TensorBoard.Status.FAILED, message="it exited with 1"
    )
    board.jobs.add(job)

    response, body = fetch(f"/tensorboard/{job_id}/", user=portal.alice, accept=HTML)
    assert response.status_code == 502
    text = body.decode()
    assert "TensorBoard is not available" in text and "TensorBoard could not start: it exited with 1" in text
    assert "Start it again from the job page." in text
    assert f'href="/jobs/{job_id}/">Back to the job</a>' in text

    response, body = fetch(f"/tensorboard/{job_id}/data/runs", user=portal.alice)
    assert response.status_code == 502
    assert body == b"TensorBoard could not start: it exited with 1\nStart it again from the job page."
