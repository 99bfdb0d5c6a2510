"""The researcher's pages: dashboard, jobs list, job page, queue and clusters (the submit form:
test_researcher_submit.py).

Jobs are submitted through the same service as the API; admission happens in
the request, launching after commit, which these tests do not run.
"""

import re

import pytest

from jobs.models import Job
from tests.frontend.researcher_helpers import signed_in, submit

# --- Dashboard -----------------------------------------------------------------------


def test_it_shows_my_recent_jobs_usage_bars_and_queued_jobs_on_the_dashboard(client, world):
    big = submit(world.alice, name="big", workers=1, gpus_per_worker=8)
    waiting = submit(world.alice, name="waiting")
    assert (big.status, waiting.status) == ("admitted", "queued")
    html = signed_in(client, world.alice).get("/").content.decode()
    assert "Welcome, alice" in html
    assert f'href="/jobs/{big.pk}/"' in html and f'href="/jobs/{waiting.pk}/"' in html
    queued = html[html.index("My queued jobs") : html.index("GPU usage by department")]
    assert "waiting" in queued and waiting.pending_reason in queued and "big" not in queued
    usage = html[html.index("GPU usage by department") :]
    # vision holds all 8 sim GPUs with a nominal quota of 4: 4 of them are borrowed.
    assert "8 used of 4 nominal, 4 borrowed; pool has 8; 1 waiting" in usage
    assert "Natural Language Processing" not in html


def test_the_dashboard_says_when_there_is_nothing_to_show(client, world):
    html = signed_in(client, world.bob).get("/").content.decode()
    assert "You have not submitted any jobs yet." in html
    assert "None of your jobs is waiting." in html
    assert "0 used of 4 nominal, 0 borrowed" in html


def test_the_navigation_links_the_pages_and_the_users_departments(client, world):
    html = signed_in(client, world.alice).get("/").content.decode()
    for label, url in [
        ("Dashboard", "/"),
        ("Submit", "/jobs/new/"),
        ("Jobs", "/jobs/"),
        ("Queue", "/queue/"),
        ("Clusters", "/clusters/"),
    ]:
        assert re.search(rf'<a href="{re.escape(url)}"[^>]*>{label}</a>', html), label
    assert 'href="/jobs/?department=vision"' in html
    assert 'href="/jobs/?department=nlp"' not in html
    assert "vendor/htmx/htmx.min.js" in html and "frontend/portal.js" in html


def test_the_vendored_htmx_is_served_by_the_portal(client, world):
    response = signed_in(client, world.alice).get("/static/frontend/vendor/htmx/htmx.min.js")
    assert response.status_code == 200
    assert b"htmx" in b"".join(response.streaming_content)[:200]


# --- Jobs list -----------------------------------------------------------------------


def test_the_jobs_list_filters_searches_and_pages(client, world):
    for index in range(27):
        submit(world.alice, name=f"sweep-{index}", gpus_per_worker=0)
    submit(world.carol, name="carols-run", command="python eval.py", gpus_per_worker=0)
    submit(world.bob, name="bobs-run", department="nlp", gpus_per_worker=0)
    signed_in(client, world.alice)

    first = client.get("/jobs/").content.decode()
    assert "Page 1 of 2 (28 jobs)" in first and "carols-run" in first and "bobs-run" not in first
    second = client.get("/jobs/?page=2").content.decode()
    assert "Page 2 of 2 (28 jobs)" in second and "sweep-0<" in second and "carols-run" not in second

    mine = client.get("/jobs/?user=carol").content.decode()
    assert "carols-run" in mine and "sweep-" not in mine
    found = client.get("/jobs/?q=eval.py").content.decode()
    assert "carols-run" in found and "sweep-" not in found
    assert "No jobs match these filters." in client.get("/jobs/?status=failed").content.decode()
    assert "No jobs match these filters." in client.get("/jobs/?department=nlp").content.decode()
    paged = client.get("/jobs/?user=alice&page=2").content.decode()
    assert 'href="?user=alice&amp;page=1"' in paged

    admin = signed_in(client, world.admin).get("/jobs/?department=nlp").content.decode()
    assert "bobs-run" in admin and "carols-run" not in admin


def test_the_jobs_list_says_when_there_are_no_jobs(client, world):
    html = signed_in(client, world.bob).get("/jobs/").content.decode()
    assert "No jobs in your departments yet." in html


def test_the_live_part_of_the_jobs_list_is_served_alone_for_polling(client, world):
    job = submit(world.alice, name="polled")
    response = signed_in(client, world.alice).get("/jobs/?status=admitted", HTTP_HX_REQUEST="true")
    html = response.content.decode()
    assert "<html" not in html and "polled" in html
    assert 'hx-get="/jobs/?status=admitted"' in html and 'hx-trigger="every 5s, live"' in html
    assert f'value="{job.pk}"' in html  # the checkbox for "Compare in TensorBoard"
    assert "HX-Request" in response["Vary"]  # so "back" never shows the part alone


# --- Job page ------------------------------------------------------------------------


def test_the_job_page_shows_status_timeline_placement_logs_and_tensorboard(client, world):
    job = submit(world.alice, name="digits")
    html = signed_in(client, world.carol).get(f"/jobs/{job.pk}/").content.decode()
    assert "digits" in html and "status-admitted" in html
    assert "Admitted: worker 0 on local-sim-0 GPU 0." in html  # timeline
    assert "<td>local-sim-0</td>" in html  # placement
    assert "GPU-seconds" in html
    assert f'data-logs-url="/api/v1/jobs/{job.pk}/logs/"' in html
    assert f'href="/api/v1/jobs/{job.pk}/logs/?worker=0"' in html  # download
    assert f'data-tensorboard-url="/api/v1/jobs/{job.pk}/tensorboard/"' in html
    assert f'href="/jobs/new/?clone={job.pk}"' in html
    assert f'action="/jobs/{job.pk}/cancel/"' in html and "data-confirm=" in html
    assert f'data-ws="/ws/jobs/{job.pk}/"' in html


def test_a_queued_job_shows_why_it_waits_and_its_position(client, world):
    submit(world.alice, name="big", gpus_per_worker=8)
    waiting = submit(world.alice, name="waiting")
    html = signed_in(client, world.alice).get(f"/jobs/{waiting.pk}/").content.decode()
    # The reason as its label, the code only in the tooltip.
    assert f'<span class="reason" title="{waiting.pending_reason}">Quota used up</span>' in html
    assert f"<code>{waiting.pending_reason}</code>" not in html
    assert "position 1 in the queue" in html
    assert waiting.status_message.replace("'", "&#x27;") in html
    assert "Not placed yet" in html


def test_cancel_ends_a_waiting_job_and_a_finished_one_says_why_not(client, world):
    job = submit(world.alice, name="doomed")
    signed_in(client, world.alice)
    response = client.post(f"/jobs/{job.pk}/cancel/", follow=True)
    assert Job.objects.get(pk=job.pk).status == "cancelled"
    html = response.content.decode()
    assert "Cancel requested for job doomed." in html and "status-cancelled" in html
    assert f'action="/jobs/{job.pk}/cancel/"' not in html
    again = client.post(f"/jobs/{job.pk}/cancel/", follow=True).content.decode()
    assert "has already cancelled; there is nothing to cancel." in again
    assert client.get(f"/jobs/{job.pk}/cancel/").status_code == 405


def test_outsiders_get_404_on_another_departments_job(client, world):
    job = submit(world.alice, name="private")
    signed_in(client, world.bob)
    assert client.get(f"/jobs/{job.pk}/").status_code == 404
    assert client.get(f"/jobs/{job.pk}/", HTTP_HX_REQUEST="true").status_code == 404
    assert client.get(f"/jobs/new/?clone={job.pk}").status_code == 404
    assert client.get("/jobs/new/?clone=nonsense").status_code == 404
    assert client.post(f"/jobs/{job.pk}/cancel/").status_code == 404
    assert Job.objects.get(pk=job.pk).status == "admitted"
    assert "private" not in client.get("/jobs/").content.decode()


def test_pages_send_anonymous_visitors_to_sign_in(client, world):
    for url in ["/jobs/", "/jobs/new/", "/jobs/1/", "/queue/", "/clusters/", "/clusters/local/"]:
        response = client.get(url)
        assert response.status_code == 302 and response["Location"].startswith("/login/"), url


# --- Queue and clusters ------------------------------------------------------------------


def test_the_queue_shows_admission_order_with_reasons(client, world):
    submit(world.alice, name="big", gpus_per_worker=8)
    first = submit(world.alice, name="first-waiting")
    submit(world.carol, name="second-waiting")
    submit(world.bob, name="nlp-waiting", department="nlp")
    html = signed_in(client, world.alice).get("/queue/?cluster=local&gpu_type=sim").content.decode()
    assert html.index("first-waiting") < html.index("second-waiting")
    first.refresh_from_db()
    assert first.pending_reason and f'<span class="reason" title="{first.pending_reason}">' in html
    assert "nlp-waiting" not in html
    assert "No job of your departments is waiting here" in client.get("/queue/?gpu_type=V100").content.decode()


def test_the_cluster_page_maps_gpus_to_departments_without_naming_others(client, world):
    held = submit(world.alice, name="vision-half", gpus_per_worker=0.5)
    submit(world.bob, name="nlp-whole", department="nlp", gpus_per_worker=1)
    signed_in(client, world.alice)
    html = client.get("/clusters/local/").content.decode()
    assert "local-sim-0" in html and "GPU 7" in html
    assert f'href="/jobs/{held.pk}/"' in html and "vision · vision-half (0.5)" in html
    assert "other department" in html and "nlp-whole" not in html
    assert "free" in html

    listing = client.get("/clusters/").content.decode()
    assert 'href="/clusters/local/"' in listing and "1.5 of 8" in listing
    assert client.get("/clusters/nowhere/").status_code == 404


def test_every_page_renders_for_a_platform_admin_in_no_department(client, world):
    signed_in(client, world.admin)
    for url in ["/", "/jobs/", "/jobs/new/", "/queue/", "/clusters/", "/clusters/local/"]:
        assert client.get(url).status_code == 200, url


@pytest.mark.parametrize("url", ["/", "/jobs/", "/jobs/new/", "/queue/", "/clusters/local/"])
def test_pages_speak_simplified_chinese_markup(client, world, url):
    response = signed_in(client, world.alice).get(url, HTTP_ACCEPT_LANGUAGE="zh-hans")
    assert response.status_code == 200
    assert 'lang="zh-hans"' in response.content.decode()
