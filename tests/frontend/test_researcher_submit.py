"""The researcher's submit form: its fields and defaults, what it offers, submitting, errors and clone.

Jobs are submitted through the same service as the API; admission happens in
the request, launching after commit, which these tests do not run.
"""

import re

from jobs.models import Job
from tests.frontend.researcher_helpers import REPO, field_html, form_as_browser_sends_it, signed_in, submit

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
    assert "starting with a letter and not ending with" in field_html(html, "name")
    assert "DNS-1035" not in field_html(html, "name")  # words a researcher knows
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
