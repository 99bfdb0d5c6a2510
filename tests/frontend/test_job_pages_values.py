"""The job pages as people read them (issue 17): run time and GPU time so far while a job runs, times and reasons
as words, the jobs list's duration, finished time and sorting, bulk cancel with its confirmation, registering a
model version from a succeeded job's page, and the log and TensorBoard panels of jobs that have nothing to show.

Jobs are submitted through the API's service; what the executor would record (a start, an ending, output files)
is written to the rows and folders directly.
"""

from __future__ import annotations

import re
import shutil
from datetime import timedelta

from django.utils import timezone

from jobs import selectors, usage
from jobs.models import Job
from models_registry.models import ModelVersion, RegisteredModel
from tests.frontend.researcher_helpers import signed_in, submit
from tests.models_registry.test_registry import registry, run_dir, succeeded_job  # noqa: F401  (registry: a fixture)


def _running(job: Job, *, admitted_ago: timedelta, started_ago: timedelta, gpu_seconds: float = 0.0) -> Job:
    now = timezone.now()
    Job.objects.filter(pk=job.pk).update(
        status="running", admitted_at=now - admitted_ago, started_at=now - started_ago, gpu_seconds=gpu_seconds
    )
    job.refresh_from_db()
    return job


def _ended(job: Job, *, status: str = "succeeded", ran: timedelta, gpu_seconds: float, ago: timedelta) -> Job:
    end = timezone.now() - ago
    Job.objects.filter(pk=job.pk).update(
        status=status, started_at=end - ran, finished_at=end, gpu_seconds=gpu_seconds, placement=[], exit_code=0
    )
    job.refresh_from_db()
    return job


def _names_in_order(html: str, names: list[str]) -> list[str]:
    body = html[html.index('id="job-rows"') :]
    found = sorted((body.index(f">{name}</a>"), name) for name in names)
    return [name for _position, name in found]


# --- Values for people ----------------------------------------------------------------------------


def test_a_running_job_shows_how_long_it_has_run_and_its_gpu_time_so_far(client, world):
    job = submit(world.alice, name="long-run", gpus_per_worker=2)
    # Earlier runs recorded 1800 GPU-seconds; this run holds 2 GPUs since 1 h ago and started 55 min ago.
    job = _running(job, admitted_ago=timedelta(hours=1), started_ago=timedelta(minutes=55), gpu_seconds=1800)
    so_far = usage.gpu_seconds_so_far(job, now=timezone.now())
    assert 1800 + 7200 <= so_far < 1800 + 7200 + 60

    html = signed_in(client, world.alice).get(f"/jobs/{job.pk}/").content.decode()
    assert "running for 55 min" in html
    run_time = re.search(r'data-fact="run-time">(.*?)</dd>', html).group(1)
    assert run_time.startswith("55 min") and "so far" in run_time
    gpu_time = re.search(r'data-fact="gpu-time" title="(\d+) GPU-seconds">(.*?)</dd>', html)
    assert 9000 <= int(gpu_time.group(1)) < 9060
    assert gpu_time.group(2).startswith("2.5 GPU-hours") and "so far" in gpu_time.group(2)
    assert not re.search(r"(?<![\d.,])0 GPU-seconds", html), "a running job must not show 0 GPU-seconds"

    # The lists count the same "so far" in the database.
    listed = selectors.with_progress(Job.objects.filter(pk=job.pk), now=timezone.now()).get()
    assert abs(listed.gpu_seconds_now - so_far) < 5
    assert abs(listed.run_seconds - 55 * 60) < 5
    row = signed_in(client, world.alice).get("/jobs/").content.decode()
    assert "55 min" in row and "2.5 GPU-hours" in row


def test_an_ended_job_shows_its_times_in_the_readers_zone_and_its_gpu_hours_rounded(client, world):
    job = _ended(
        submit(world.alice, name="done"), ran=timedelta(hours=2, minutes=5), gpu_seconds=736.4, ago=timedelta(0)
    )
    client.cookies["portal_tz"] = "Asia/Shanghai"
    html = signed_in(client, world.alice).get(f"/jobs/{job.pk}/").content.decode()
    assert "2 h 05 min" in html
    assert "0.205 GPU-hours" in html  # 736.4 GPU-seconds
    local = timezone.localtime(job.finished_at, timezone=__import__("zoneinfo").ZoneInfo("Asia/Shanghai"))
    assert f"{local:%H:%M}" in html
    assert f'datetime="{job.finished_at.isoformat()}"' in html
    assert "+00:00</" not in html and "736.4" not in html


def test_the_timeline_and_the_queue_show_words_not_codes(client, world):
    submit(world.alice, name="big", gpus_per_worker=8)
    waiting = submit(world.alice, name="waiting")
    signed_in(client, world.alice)
    page = client.get(f"/jobs/{waiting.pk}/").content.decode()
    assert f'<span class="reason" title="{waiting.pending_reason}">' in page
    assert f"<code>{waiting.pending_reason}</code>" not in page
    timeline = page[page.index('class="timeline"') :]
    assert "<strong>queued</strong>" in timeline and "<time datetime=" in timeline
    for url in ("/", "/queue/", "/jobs/"):
        html = client.get(url).content.decode()
        assert f'title="{waiting.pending_reason}"' in html, url
        assert f">{waiting.pending_reason}<" not in html, url


# --- The jobs list: columns and sorting ---------------------------------------------------------


def test_the_jobs_list_sorts_by_each_column_from_its_header(client, world):
    short = _ended(
        submit(world.alice, name="short", gpus_per_worker=0),
        ran=timedelta(minutes=5),
        gpu_seconds=300,
        ago=timedelta(hours=3),
    )
    long = _ended(
        submit(world.alice, name="long", gpus_per_worker=0),
        ran=timedelta(hours=3),
        gpu_seconds=10_800,
        ago=timedelta(hours=1),
    )
    busy = _running(
        submit(world.alice, name="busy", gpus_per_worker=4),
        admitted_ago=timedelta(hours=1),
        started_ago=timedelta(minutes=30),
    )
    waiting = submit(world.alice, name="waiting", gpus_per_worker=8)  # nothing left: it waits, no duration
    names = ["short", "long", "busy", "waiting"]
    signed_in(client, world.alice)

    newest_first = client.get("/jobs/").content.decode()
    assert _names_in_order(newest_first, names) == ["waiting", "busy", "long", "short"]
    assert "Finished" in newest_first and "Duration" in newest_first
    assert "3 h 00 min" in newest_first and "30 min" in newest_first
    assert re.search(r'aria-sort="descending"><a class="sort" href="\?sort=submitted"', newest_first)

    by_name = client.get("/jobs/?sort=name").content.decode()
    assert _names_in_order(by_name, names) == ["busy", "long", "short", "waiting"]
    assert 'aria-sort="ascending"><a class="sort" href="?sort=-name"' in by_name
    assert _names_in_order(client.get("/jobs/?sort=-name").content.decode(), names) == [
        "waiting",
        "short",
        "long",
        "busy",
    ]
    # The longest first; a job that never started has no duration and comes last either way.
    assert _names_in_order(client.get("/jobs/?sort=-duration").content.decode(), names) == [
        "long",
        "busy",
        "short",
        "waiting",
    ]
    assert _names_in_order(client.get("/jobs/?sort=duration").content.decode(), names) == [
        "short",
        "busy",
        "long",
        "waiting",
    ]
    # busy holds 4 GPUs for an hour so far: 4 GPU-hours, more than long's 3.
    assert _names_in_order(client.get("/jobs/?sort=-gpu_hours").content.decode(), names) == [
        "busy",
        "long",
        "short",
        "waiting",
    ]
    assert _names_in_order(client.get("/jobs/?sort=status").content.decode(), names) == [
        "waiting",
        "busy",
        "long",
        "short",
    ]

    filtered = client.get("/jobs/?user=alice&sort=name").content.decode()
    assert 'href="?user=alice&amp;sort=-name"' in filtered  # the filters stay when the sort changes
    assert 'href="?user=alice&amp;sort=-submitted"' in filtered

    bogus = client.get("/jobs/?sort=color").content.decode()
    assert "The jobs cannot be sorted by color; they are shown newest first." in bogus
    assert _names_in_order(bogus, names) == ["waiting", "busy", "long", "short"]
    assert {job.pk for job in (short, long, busy, waiting)} == set(Job.objects.values_list("pk", flat=True))


# --- Bulk cancel ------------------------------------------------------------------------------


def test_bulk_cancel_names_the_jobs_asks_first_and_reports_what_it_did(client, world):
    admitted = submit(world.alice, name="first")
    queued = submit(world.alice, name="second", gpus_per_worker=8)
    ended = _ended(
        submit(world.carol, name="ended", gpus_per_worker=0),
        status="failed",
        ran=timedelta(minutes=1),
        gpu_seconds=0,
        ago=timedelta(0),
    )
    others = submit(world.bob, name="nlp-job", department="nlp")
    signed_in(client, world.alice)

    listing = client.get("/jobs/").content.decode()
    assert re.search(rf'value="{admitted.pk}" name="job" form="bulk-cancel" data-cancellable', listing)
    assert not re.search(rf'value="{ended.pk}" name="job"', listing)  # an ended job is not offered
    assert 'id="bulk-cancel"' in listing and 'action="/jobs/cancel/"' in listing

    selection = {"job": [admitted.pk, queued.pk, ended.pk, others.pk], "back": "/jobs/?sort=name"}
    confirm = client.post("/jobs/cancel/", selection)
    html = confirm.content.decode()
    assert confirm.status_code == 200
    assert "Cancel 2 jobs?" in html and ">Cancel 2 jobs</button>" in html
    assert "first" in html and "second" in html
    assert "1 selected job will not be cancelled:" in html and "it has already ended" in html
    assert "1 selected job is not in your departments and is left alone." in html
    assert "nlp-job" not in html  # another department's job is not even named
    assert set(Job.objects.filter(pk__in=[admitted.pk, queued.pk]).values_list("status", flat=True)) == {
        "admitted",
        "queued",
    }

    done = client.post("/jobs/cancel/", {**selection, "confirm": "yes"})
    assert done.status_code == 302 and done["Location"] == "/jobs/?sort=name"
    assert Job.objects.get(pk=admitted.pk).status == "cancelled"
    assert Job.objects.get(pk=queued.pk).status in {"cancelled", "admitted"}  # it may have been admitted meanwhile
    assert Job.objects.get(pk=others.pk).status == others.status
    report = client.get(done["Location"]).content.decode()
    assert f"Cancel requested for 2 jobs: first #{admitted.pk}, second #{queued.pk}." in report
    assert f"Not cancelled: ended #{ended.pk} (it has already ended)" in report
    assert "1 selected job is not in your departments and was left alone." in report


def test_bulk_cancel_without_a_selection_or_with_a_foreign_back_link_goes_back_to_the_list(client, world):
    signed_in(client, world.alice)
    empty = client.post("/jobs/cancel/", {"back": "https://evil.example.com/"}, follow=True)
    assert empty.redirect_chain[-1][0] == "/jobs/"
    assert "Select the jobs to cancel first" in empty.content.decode()
    assert client.get("/jobs/cancel/").status_code == 405


# --- Register as model version ---------------------------------------------------------------


def test_a_succeeded_job_page_registers_a_version_from_its_output_files(client, registry, settings):
    job = succeeded_job(registry, settings, files={"model.joblib": b"a model!", "extra/notes.txt": b"hi"})
    signed_in(client, registry.alice)
    page = client.get(f"/jobs/{job.pk}/").content.decode()
    form = page[page.index('id="register"') :]
    assert f'action="/jobs/{job.pk}/register/"' in form
    assert 'value="model.joblib" checked' in form and "8\xa0bytes" in form
    assert 'value="extra/notes.txt"' in form and 'value="extra"' in form and "(folder)" in form
    for framework in ("sklearn", "pytorch", "onnx"):
        assert f'<option value="{framework}"' in form
    assert f'href="/jobs/{job.pk}/?register=1#register"' in page  # the toolbar's way there

    response = client.post(
        f"/jobs/{job.pk}/register/",
        {"model": "digits-from-job", "artifact_path": "model.joblib", "framework": "sklearn"},
    )
    assert response.status_code == 302 and response["Location"] == "/models/digits-from-job/versions/1/"
    model = RegisteredModel.objects.get(name="digits-from-job")
    assert model.department.slug == "vision"
    version = ModelVersion.objects.get(model=model)
    assert (version.version, version.source_job_id, version.framework) == (1, job.pk, "sklearn")

    again = client.post(
        f"/jobs/{job.pk}/register/", {"model": "digits-from-job", "artifact_path": "extra", "framework": "other"}
    )
    assert again["Location"] == "/models/digits-from-job/versions/2/"


def test_registering_from_the_job_page_shows_errors_on_the_form_and_keeps_what_was_typed(client, registry, settings):
    job = succeeded_job(registry, settings)
    signed_in(client, registry.alice)
    missing = client.post(
        f"/jobs/{job.pk}/register/", {"model": "kept-name", "artifact_path": "missing.bin", "framework": "onnx"}
    )
    html = missing.content.decode()
    assert missing.status_code == 400
    assert "The version was not registered." in html
    assert "&#x27;missing.bin&#x27; does not exist in the output folder of job" in html
    assert 'value="kept-name"' in html and '<option value="onnx" selected>' in html
    assert not RegisteredModel.objects.filter(name="kept-name").exists()  # no empty model left behind

    bad = client.post(
        f"/jobs/{job.pk}/register/", {"model": "Not A Name", "artifact_path": "model.joblib", "framework": "sklearn"}
    )
    assert bad.status_code == 400
    assert "is not a valid model name" in bad.content.decode() and 'value="Not A Name"' in bad.content.decode()
    nothing = client.post(
        f"/jobs/{job.pk}/register/", {"model": "", "artifact_path": "", "framework": "caffe"}
    ).content.decode()
    assert "Name the model" in nothing and "Pick the file or folder" in nothing and "Pick the framework" in nothing
    assert not ModelVersion.objects.exists()


def test_only_succeeded_jobs_of_ones_departments_offer_registration(client, registry, settings):
    job = succeeded_job(registry, settings)
    signed_in(client, registry.bob)
    assert client.post(f"/jobs/{job.pk}/register/", {"model": "x", "artifact_path": "model.joblib"}).status_code == 404
    running = submit(registry.alice, name="still-going")
    signed_in(client, registry.alice)
    assert 'id="register"' not in client.get(f"/jobs/{running.pk}/").content.decode()
    refused = client.post(
        f"/jobs/{running.pk}/register/",
        {"model": "x", "artifact_path": "model.joblib", "framework": "sklearn"},
        follow=True,
    )
    assert "Only the output of a succeeded job can be registered; this one is admitted." in refused.content.decode()
    assert not RegisteredModel.objects.filter(name="x").exists()


def test_a_succeeded_job_without_output_says_so_instead_of_a_form(client, registry, settings):
    job = succeeded_job(registry, settings, files={})
    html = signed_in(client, registry.alice).get(f"/jobs/{job.pk}/").content.decode()
    assert "The job left nothing in its output folder" in html
    assert f'action="/jobs/{job.pk}/register/"' not in html


# --- Panels with nothing to show yet ---------------------------------------------------------


def test_a_job_that_has_not_started_says_when_its_log_and_tensorboard_come(client, world):
    submit(world.alice, name="big", gpus_per_worker=8)
    waiting = submit(world.alice, name="waiting")
    html = signed_in(client, world.alice).get(f"/jobs/{waiting.pk}/").content.decode()
    assert "The log starts when the job starts." in html and "data-logs-waiting" in html
    assert "data-tensorboard-when-running" in html
    assert re.search(r"<button type=\"button\" data-tensorboard-open hidden>", html)
    assert "TensorBoard can be opened once the job runs" in html

    Job.objects.filter(pk=waiting.pk).update(status="cancelled", finished_at=timezone.now())
    ended = client.get(f"/jobs/{waiting.pk}/").content.decode()
    assert "This job ended before it started: it has no log." in ended
    assert "data-logs-follow" not in ended


def test_open_tensorboard_is_offered_only_when_there_are_events_to_show(client, registry, settings):
    with_events = succeeded_job(registry, settings)
    without = succeeded_job(registry, settings, scalars={})
    shutil.rmtree(run_dir(settings, without) / "tensorboard")
    signed_in(client, registry.alice)
    offered = client.get(f"/jobs/{with_events.pk}/").content.decode()
    assert '<button type="button" data-tensorboard-open>' in offered
    silent = client.get(f"/jobs/{without.pk}/").content.decode()
    assert "data-tensorboard-open" not in silent
    assert "this job wrote no event files to TENSORBOARD_LOG_DIR" in silent
    running = _running(
        submit(registry.alice, name="now"), admitted_ago=timedelta(minutes=2), started_ago=timedelta(minutes=1)
    )
    assert '<button type="button" data-tensorboard-open>' in client.get(f"/jobs/{running.pk}/").content.decode()
