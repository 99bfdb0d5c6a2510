"""The researcher's pages: dashboard, submit form, jobs list, job page, queue and clusters.

Jobs are submitted through the same service as the API; admission happens in
the request, launching after commit, which these tests do not run.
"""

import re

import pytest

from jobs import services
from jobs.api import parse_job_input
from jobs.models import Job

LABELS = [
    "Name",
    "Department",
    "Cluster",
    "Code URL",
    "Code ref",
    "Command",
    "Image",
    "Requirements",
    "Workers",
    "GPUs per worker",
    "GPU type",
    "Priority",
    "Mounts",
    "Environment",
    "TensorBoard",
    "Max runtime",
]
REPO = "https://git.example.com/team/repo.git"


def submit(user, **fields):
    """Submit as the API does (its defaults filled in)."""
    values, type_errors = parse_job_input(
        {"name": "digits", "department": "vision", "code_url": REPO, "command": "python train.py"} | fields
    )
    job, _ = services.job_submit(user=user, data=values, type_errors=type_errors)
    return job


def signed_in(client, user):
    client.force_login(user)
    return client


def field_html(html: str, name: str) -> str:
    """The markup of one form field's group: its label, input, errors and help."""
    start = html.index(f'id="field-{name}"')
    following = html.find('id="field-', start + 1)
    return html[start : following if following != -1 else len(html)]


def form_as_browser_sends_it(response) -> dict:
    """What a browser posts for an untouched form: every field's initial value."""
    data = {}
    for bound in response.context["form"]:
        value = bound.value()
        if value is True:
            data[bound.name] = "on"
        elif value not in (None, False):
            data[bound.name] = value
    return data


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


# --- Submit form ---------------------------------------------------------------------


def test_the_submit_form_has_the_labelled_fields_and_sensible_defaults(client, world):
    response = signed_in(client, world.alice).get("/jobs/new/")
    html = response.content.decode()
    for label in LABELS:
        assert re.search(rf"<label[^>]*>{re.escape(label)}</label>", html), label
    assert '<button type="submit">Submit job</button>' in html
    form = response.context["form"]
    assert {
        name: form[name].value()
        for name in (
            "department",
            "cluster",
            "image",
            "workers",
            "gpus_per_worker",
            "gpu_type",
            "priority",
            "tensorboard",
        )
    } == {
        "department": "vision",
        "cluster": "local",
        "image": "python",
        "workers": 1,
        "gpus_per_worker": 1,
        "gpu_type": "sim",
        "priority": "normal",
        "tensorboard": True,
    }
    assert [value for value, _ in form.fields["department"].choices] == ["vision"]


def test_the_form_offers_only_what_the_user_may_use(client, world):
    response = signed_in(client, world.bob).get("/jobs/new/")
    form = response.context["form"]
    assert [value for value, _ in form.fields["department"].choices] == ["nlp"]
    assert '<option value="vision"' not in response.content.decode()


def test_a_name_a_code_url_and_a_command_are_enough_to_submit(client, world):
    signed_in(client, world.alice)
    data = form_as_browser_sends_it(client.get("/jobs/new/"))
    data |= {"name": "digits", "code_url": REPO, "command": "python train.py --epochs 3"}
    response = client.post("/jobs/new/", data)
    job = Job.objects.get()
    assert response.status_code == 302 and response["Location"] == f"/jobs/{job.pk}/"
    assert (
        job.name,
        job.department.slug,
        job.cluster.name,
        job.pool.gpu_type,
        job.image.name,
        job.workers,
        job.gpus_per_worker,
        job.priority.name,
        job.tensorboard,
        job.submitted_by,
    ) == ("digits", "vision", "local", "sim", "python", 1, 1.0, "normal", True, world.alice)
    assert job.status == "admitted"
    page = client.get(response["Location"]).content.decode()
    assert "Job digits submitted." in page


def test_it_turns_the_text_fields_into_lists_and_mappings(client, world):
    signed_in(client, world.alice)
    data = form_as_browser_sends_it(client.get("/jobs/new/"))
    data |= {
        "name": "full",
        "code_url": REPO,
        "command": "python train.py",
        "requirements": "numpy==2.1.0\n\nscipy",
        "mounts": "vision-datasets:/data:ro",
        "env": "SEED=1\nMODE=a=b",
        "max_runtime": "2",
        "code_ref": "v1",
    }
    response = client.post("/jobs/new/", data)
    assert response.status_code == 302, response.context["form"].errors
    job = Job.objects.get()
    assert job.requirements == ["numpy==2.1.0", "scipy"]
    assert job.mounts == [{"storage": "vision-datasets", "path": "/data", "read_only": True}]
    assert job.env == {"SEED": "1", "MODE": "a=b"}
    assert (job.max_runtime_seconds, job.code_ref) == (7200, "v1")


def test_validation_errors_appear_beside_their_fields(client, world):
    signed_in(client, world.alice)
    data = form_as_browser_sends_it(client.get("/jobs/new/"))
    data |= {
        "name": "Bad_Name",
        "code_url": "ftp://example.com/repo.git",
        "command": "",
        "workers": "100",
        "env": "no equals sign",
        "mounts": "nlp-corpora:/data",
    }
    response = client.post("/jobs/new/", data)
    assert response.status_code == 200
    html = response.content.decode()
    assert "The job was not submitted. Fix the fields marked below." in html
    assert "DNS-1035" in field_html(html, "name")
    assert "Code URLs with &#x27;ftp://&#x27; are not accepted" in field_html(html, "code_url")
    assert "This field is required." in field_html(html, "command")
    assert "Use between 1 and 64 workers." in field_html(html, "workers")  # a rule of the service, not the form
    assert "Line 1: write NAME=value" in field_html(html, "env")
    assert "vision has no storage called &#x27;nlp-corpora&#x27;" in field_html(html, "mounts")
    assert "DNS-1035" not in field_html(html, "code_url")
    assert 'value="Bad_Name"' in field_html(html, "name")  # what was typed stays
    assert Job.objects.count() == 0


def test_someone_in_no_department_is_told_why_they_cannot_submit(client, world, django_user_model):
    loner = django_user_model.objects.create_user("loner", password="x")
    html = signed_in(client, loner).get("/jobs/new/").content.decode()
    assert "You belong to no department yet, so you cannot submit jobs." in html
    assert "Submit job</button>" not in html


def test_clone_prefills_the_form_from_a_visible_job(client, world):
    source = submit(
        world.alice,
        name="tuned",
        command="python train.py --lr 0.1",
        requirements=["numpy==2.1.0"],
        env={"SEED": "7"},
        mounts=[{"storage": "vision-datasets", "path": "/data", "read_only": True}],
        max_runtime_seconds=5400,
        gpus_per_worker=0.5,
    )
    response = signed_in(client, world.carol).get(f"/jobs/new/?clone={source.pk}")
    assert response.status_code == 200
    form = response.context["form"]
    assert {
        name: form[name].value()
        for name in ("name", "command", "requirements", "env", "mounts", "max_runtime", "gpus_per_worker", "code_url")
    } == {
        "name": "tuned",
        "command": "python train.py --lr 0.1",
        "requirements": "numpy==2.1.0",
        "env": "SEED=7",
        "mounts": "vision-datasets:/data:ro",
        "max_runtime": "1.5",
        "gpus_per_worker": "0.5",
        "code_url": REPO,
    }
    assert f"Cloned from job tuned #{source.pk}" in response.content.decode()
    client.post("/jobs/new/", form_as_browser_sends_it(response))
    clone = Job.objects.exclude(pk=source.pk).get()
    assert (clone.submitted_by, clone.command, clone.env, clone.gpus_per_worker) == (
        world.carol,
        source.command,
        {"SEED": "7"},
        0.5,
    )


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
    assert f"<code>{waiting.pending_reason}</code>" in html
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
    assert first.pending_reason and f'<code class="small">{first.pending_reason}</code>' in html
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
