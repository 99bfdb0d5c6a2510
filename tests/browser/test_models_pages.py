"""Models and deployments in the browser: a model version's own page (lineage, metrics with the best marked,
aliases, files, the deployments serving it), and promote / roll back on a deployment's page, each confirmed
first, with every revision kept in its history and the variant table refreshing by itself.

The model, its versions and the deployment are made by a separate Python process on the portal's database
(this one may not touch the database while the browser runs: tests/browser/conftest.py); the deployment's
model servers are the portal's own (its beat starts them) and are stopped by deleting the deployment at the end.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections.abc import Iterator

import pytest
from playwright.sync_api import Page, expect

from tests.browser.conftest import ROOT, Portal, screenshot

MODEL, DEPLOYMENT = "digits-pages", "digits-pages-ab"
COMMIT = "3f2c1e9a4b5d6e7f8091a2b3c4d5e6f708192a3b"

SEED = """
import json, sys
from pathlib import Path

import django
django.setup()

import joblib
import numpy as np
from django.conf import settings
from django.contrib.auth import get_user_model
from sklearn.linear_model import LogisticRegression

from accounts.models import Department
from jobs.models import Job
from models_registry import artifacts
from models_registry.models import ModelAlias, ModelVersion, RegisteredModel
from serving import services

given = json.loads(sys.argv[1])
job = Job.objects.select_related("image").get(pk=given["job"])
alice = get_user_model().objects.get(username="alice")
model = RegisteredModel.objects.create(
    name=given["model"], department=Department.objects.get(slug="vision"), created_by=alice
)
metrics = {1: {"accuracy/test": 0.97333336, "loss/train": 0.0812}, 2: {"accuracy/test": 0.95, "loss/train": 0.07}}
for number in (1, 2):
    rng = np.random.RandomState(number)
    x = rng.rand(100, 2)
    folder = Path(settings.PORTAL_ARTIFACT_ROOT) / model.name / str(number)
    folder.mkdir(parents=True, exist_ok=True)
    joblib.dump(LogisticRegression().fit(x, (x[:, 0] > x[:, 1]).astype(int)), folder / "model.joblib")
    version = ModelVersion.objects.create(
        model=model,
        version=number,
        artifact_uri=artifacts.store_uri(model.name, number, "model.joblib"),
        artifact_sha256=artifacts.sha256_of(folder / "model.joblib"),
        source_job=job,
        created_by=alice,
        metrics=metrics[number],
        tags={"dataset": f"digits-v{number}"},
        lineage={
            "job": job.pk,
            "job_name": job.name,
            "code_url": "https://git.example.com/team/digits.git",
            "code_ref": "main",
            "commit": given["commit"],
            "image": job.image.name,
            "image_ref": job.image.image,
            "command": "python train.py",
            "requirements": ["scikit-learn"],
        },
    )
    if number == 1:
        ModelAlias.objects.create(model=model, name="champion", version=version)
services.deployment_create(
    user=alice,
    name=given["deployment"],
    department="vision",
    model=model.name,
    strategy="ab",
    variants=[{"name": "a", "version": 1, "weight": 80}, {"name": "b", "version": 2, "weight": 20}],
)
"""

CHANGE_WEIGHTS = """
import json, sys

import django
django.setup()

from django.contrib.auth import get_user_model

from serving import services
from serving.models import Deployment

given = json.loads(sys.argv[1])
services.deployment_update(
    user=get_user_model().objects.get(username="carol"),
    deployment=Deployment.objects.get(name=given["deployment"]),
    variants=given["variants"],
    reason="weights changed elsewhere",
)
"""

CLEAN_UP = """
import json, sys, time

import django
django.setup()

from serving import servers
from serving.models import Deployment, Variant
from models_registry.models import RegisteredModel

given = json.loads(sys.argv[1])
ids = set(Variant.objects.filter(deployment__name=given["deployment"]).values_list("pk", flat=True))
Deployment.objects.filter(name=given["deployment"]).delete()
RegisteredModel.objects.filter(name=given["model"]).delete()
deadline = time.monotonic() + 30
while True:
    servers.servers_reconcile()  # stops the servers whose variant is gone, as the beat does
    left = ids & set(servers.serving_backend().running())
    if not left:
        break
    if time.monotonic() > deadline:
        sys.exit(f"model servers of variants {sorted(left)} still run")
    time.sleep(0.2)
"""


def in_portal(portal: Portal, script: str, **given) -> None:
    """Run ``script`` in a Python process of its own on the portal's database and data root."""
    env = portal.processes.env() | {"DJANGO_SETTINGS_MODULE": "config.settings"}
    done = subprocess.run(
        [sys.executable, "-c", script, json.dumps(given)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr


@pytest.fixture(scope="module")
def deployed(portal) -> Iterator[Portal]:
    in_portal(portal, SEED, job=portal.vision_job_id, model=MODEL, deployment=DEPLOYMENT, commit=COMMIT)
    try:
        yield portal
    finally:
        in_portal(portal, CLEAN_UP, model=MODEL, deployment=DEPLOYMENT)


def variant_row(page: Page, name: str):
    return page.locator(f"#deployment-live tr[data-variant='{name}']")


def test_a_model_version_has_its_own_page(visitor, deployed):
    page = visitor.sign_in("alice")
    page.goto(f"/models/{MODEL}/")
    page.get_by_role("link", name="v1", exact=True).first.click()
    expect(page).to_have_url(f"{deployed.url}/models/{MODEL}/versions/1/")
    expect(page.get_by_role("heading", level=1)).to_have_text(f"{MODEL} version 1")

    lineage = page.locator("section", has=page.get_by_role("heading", name="Lineage"))
    expect(lineage.get_by_role("link", name=f"job #{deployed.vision_job_id}")).to_have_attribute(
        "href", f"/jobs/{deployed.vision_job_id}/"
    )
    expect(lineage.get_by_role("link", name=COMMIT)).to_have_attribute(
        "href", f"https://git.example.com/team/digits/commit/{COMMIT}"
    )
    expect(lineage).to_contain_text("https://git.example.com/team/digits.git @ main")
    expect(lineage).to_contain_text("by alice")

    metrics = page.locator("table.version-metrics tbody tr")
    expect(metrics.filter(has_text="accuracy/test")).to_contain_text("0.9733")  # 4 significant digits
    expect(metrics.filter(has_text="accuracy/test")).to_contain_text("this version is the best")
    expect(metrics.filter(has_text="loss/train")).to_contain_text("0.0812")
    expect(metrics.filter(has_text="loss/train").get_by_role("link", name="v2")).to_be_visible()  # lower loss

    expect(page.locator(".alias")).to_have_text(["champion"])
    expect(page.locator(".tag")).to_have_text(["dataset=digits-v1"])
    files = page.locator("table.artifact-files tbody tr")
    expect(files).to_have_count(1)
    expect(files.first).to_contain_text("model.joblib")
    expect(files.first.locator("td").nth(1)).to_have_text(re.compile(r"^\d+(\.\d)?\s(bytes|KB)$"))
    serving = page.locator("table.version-deployments tbody tr")
    expect(serving).to_have_count(1)
    expect(serving.get_by_role("link", name=DEPLOYMENT)).to_have_attribute("href", f"/deployments/{DEPLOYMENT}/")
    expect(serving).to_contain_text("80%")
    screenshot(page, "11-model-version")

    page.get_by_role("button", name="Make challenger").click()
    expect(page).to_have_url(f"{deployed.url}/models/{MODEL}/versions/1/")
    expect(page.locator(".messages")).to_contain_text("challenger now points to version 1.")
    expect(page.locator(".alias")).to_have_text(["challenger", "champion"])
    page.get_by_role("button", name="Remove alias challenger").click()
    expect(page.locator(".alias")).to_have_text(["champion"])

    page.get_by_role("button", name="简体中文").click()
    expect(page.locator("html")).to_have_attribute("lang", "zh-hans")
    screenshot(page, "11-model-version-zh")
    page.get_by_role("button", name="English").click()
    expect(page.locator("html")).to_have_attribute("lang", "en")

    outsider = visitor.sign_in("bob")
    response = outsider.goto(f"/models/{MODEL}/versions/1/")
    assert response is not None and response.status == 404


def test_promote_and_rollback_ask_first_and_the_history_keeps_every_revision(visitor, deployed):
    page = visitor.sign_in("alice")
    page.goto(f"/deployments/{DEPLOYMENT}/")
    expect(variant_row(page, "a")).to_contain_text("80%")
    expect(page.locator("#deployment-rps")).to_contain_text("No traffic yet")
    expect(page.locator("#deployment-rps canvas")).to_have_count(0)  # no empty chart box
    expect(page.locator("#deployment-history tbody tr")).to_have_count(1)
    screenshot(page, "12-deployment")

    asked = []

    def answer(accept: bool):
        def handle(dialog):
            asked.append(dialog.message)
            if accept:
                dialog.accept()
            else:
                dialog.dismiss()

        page.once("dialog", handle)

    answer(False)
    page.get_by_role("button", name="Promote b to 100%").click()
    expect(variant_row(page, "b")).to_contain_text("20%")  # dismissed: nothing changed
    assert asked and asked[-1].startswith("Send all traffic to variant b (version 2)?"), asked

    answer(True)
    page.get_by_role("button", name="Promote b to 100%").click()
    expect(page.locator(".messages")).to_contain_text("Variant b now gets all the traffic.")
    expect(variant_row(page, "b")).to_contain_text("100%")
    expect(page.locator("#deployment-history tbody tr")).to_have_count(2)

    answer(True)
    page.get_by_role("button", name="Roll back to revision 1").click()
    expect(page.locator(".messages")).to_contain_text("Rolled back to the previous variants.")
    assert asked[-1].startswith("Roll back to the variants of revision 1?"), asked
    expect(variant_row(page, "b")).to_contain_text("20%")
    expect(page.locator("#deployment-live")).to_contain_text("revision 3 · rolled back")
    history = page.locator("#deployment-history tbody tr")
    expect(history).to_have_count(3)  # the promote is still there after the rollback
    expect(history.nth(0)).to_contain_text("rollback to revision 1")
    expect(history.nth(1)).to_contain_text("promote b")
    expect(history.nth(2)).to_contain_text("created")
    screenshot(page, "12-deployment-after-rollback")
    # The deployment page in both languages for the suite's screenshots of every page (test_screenshots.py
    # cannot take it: this module's deployment is gone by then, with its model servers).
    screenshot(page, "en-deployment")
    page.get_by_role("button", name="简体中文").click()
    expect(page.locator("html")).to_have_attribute("lang", "zh-hans")
    screenshot(page, "zh-deployment")
    page.get_by_role("button", name="English").click()
    expect(page.locator("html")).to_have_attribute("lang", "en")

    # A change made elsewhere (the API, a rollout step) shows without a reload.
    in_portal(
        deployed,
        CHANGE_WEIGHTS,
        deployment=DEPLOYMENT,
        variants=[{"name": "a", "version": 1, "weight": 30}, {"name": "b", "version": 2, "weight": 70}],
    )
    expect(variant_row(page, "b")).to_contain_text("70%")
    expect(page.locator("#deployment-history tbody tr")).to_have_count(4)
    expect(page.locator("#deployment-history tbody tr").first).to_contain_text("weights changed elsewhere")

    # Traffic: the charts replace their "No traffic yet" with the lines and a legend of the variants.
    expect(variant_row(page, "a").locator(".status")).to_have_text("ready", timeout=60_000)
    expect(variant_row(page, "b").locator(".status")).to_have_text("ready", timeout=60_000)
    statuses = page.evaluate(
        """async (url) => {
            const token = document.querySelector("input[name=csrfmiddlewaretoken]").value;
            const answers = [];
            for (let i = 0; i < 5; i++) {
                const response = await fetch(url, {method: "POST", credentials: "same-origin",
                    headers: {"Content-Type": "application/json", "X-CSRFToken": token},
                    body: JSON.stringify({instances: [[0.9, 0.1]]})});
                answers.push(response.status);
            }
            return answers;
        }""",
        f"/serve/{DEPLOYMENT}/predict",
    )
    assert statuses == [200] * 5, statuses
    rps = page.locator("#deployment-rps")
    expect(rps.locator("canvas")).to_have_count(1, timeout=30_000)  # the routers flush their counts periodically
    expect(rps).not_to_contain_text("No traffic yet")
    expect(rps.locator(".chart-legend li")).to_have_text(["a", "b"])
    expect(page.locator(".u-legend")).to_have_count(0)  # not uPlot's table of raw values
    screenshot(page, "12-deployment-with-traffic")
