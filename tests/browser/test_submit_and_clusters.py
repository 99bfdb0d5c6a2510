"""Cluster health and the sized submit form in the browser (issue 17 items 1 and 5): a cluster that cannot be
reached is shown so and refused at submit with its message; the GPU-type list follows the chosen cluster; the
department's free quota and the pool's idle GPUs are shown beside the GPU fields.

The portal's world gets the demo's rendering-only ``k8s-demo`` and a second local cluster ``lab`` (A100 GPUs)
for this module, through ``manage.py shell`` on the portal's database (this process may not touch it while the
browser runs); both are removed at the end.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
from playwright.sync_api import Page, expect

from tests.browser.conftest import screenshot

ROOT = Path(__file__).resolve().parents[2]

ADD_CLUSTERS = """
from pathlib import Path
from accounts.models import Department
from clusters.inventory import SIMULATED
from clusters.models import Cluster, GpuPool
from demo.data import demo_load
from quotas.models import Quota
demo_load(data_root=Path({data_root!r}), pools=[SIMULATED], password=None, with_kubernetes=True)
lab = Cluster.objects.create(name="lab", backend="local", settings={{"allow_local_code": True}})
pool = GpuPool.objects.create(cluster=lab, gpu_type="A100", gpu_memory_gb=80, nodes=1, gpus_per_node=4)
Quota.objects.create(department=Department.objects.get(slug="vision"), pool=pool, nominal=2, borrowing_limit=0)
"""
REMOVE_CLUSTERS = """
from clusters.models import Cluster
Cluster.objects.filter(name__in=["lab", "k8s-demo"]).delete()
"""


def portal_shell(portal, code: str) -> None:
    """Run Django code in a process of the portal's own (its database and data root)."""
    subprocess.run(
        [sys.executable, "manage.py", "shell", "-c", code],
        cwd=ROOT,
        env=portal.processes.env(),
        check=True,
        timeout=120,
        capture_output=True,
    )


@pytest.fixture(scope="module", autouse=True)
def clusters(portal):
    portal_shell(portal, ADD_CLUSTERS.format(data_root=str(portal.data_root)))
    yield
    portal_shell(portal, REMOVE_CLUSTERS)


def option_texts(page: Page, field: str) -> list[str]:
    return page.locator(f"#id_{field} option").all_inner_texts()


def test_the_type_list_follows_the_cluster_with_free_quota_and_idle_gpus_beside_it(visitor):
    page = visitor.sign_in("alice")
    page.goto("/jobs/new/")
    cluster = page.get_by_label("Cluster", exact=True)
    expect(cluster).to_have_value("local")
    demo = page.locator('#id_cluster option[value="k8s-demo"]')
    expect(demo).to_be_disabled()
    expect(demo).to_have_text(re.compile(r"^k8s-demo \(rendering-only example"))
    assert option_texts(page, "gpu_type") == ["sim"]
    sizing = page.locator("#job-sizing")
    expect(sizing).to_contain_text("Room on local for sim GPUs")
    expect(sizing).to_contain_text(re.compile(r"Free quota of vision: [\d.]+ of 4 GPUs"))
    expect(sizing).to_contain_text(re.compile(r"Idle in pool local/sim: [\d.]+ of 8 GPUs"))

    cluster.select_option("lab")  # no reload: the lists and the panel follow
    page.evaluate("window.__notReloaded = true")
    expect(page.locator("#id_gpu_type option")).to_have_text(["A100"])
    expect(sizing).to_contain_text("Room on lab for A100 GPUs")
    expect(sizing).to_contain_text("Free quota of vision: 2 of 2 GPUs (0 in use, 0 waiting in the queue).")
    expect(sizing).to_contain_text("It may not borrow beyond it.")
    expect(sizing).to_contain_text("Idle in pool lab/A100: 4 of 4 GPUs")
    assert "python" in option_texts(page, "image")
    assert page.evaluate("window.__notReloaded") is True
    screenshot(page, "20-submit-form-sized")

    cluster.select_option("local")
    expect(page.locator("#id_gpu_type option")).to_have_text(["sim"])
    expect(sizing).to_contain_text("Room on local for sim GPUs")


def test_the_clusters_pages_say_which_cluster_cannot_be_used(visitor):
    page = visitor.sign_in("alice")
    page.goto("/clusters/")
    demo = page.locator('section[data-cluster="k8s-demo"]')
    expect(demo).to_contain_text("Rendering-only example")
    expect(demo).to_contain_text("Its manifests can be previewed")
    expect(page.locator('section[data-cluster="local"] .cluster-health')).to_contain_text("Reachable")
    screenshot(page, "21-clusters-health")
    page.get_by_role("link", name="k8s-demo", exact=True).click()
    expect(page.locator(".cluster-health")).to_contain_text("Rendering-only example")


def test_an_unreachable_cluster_is_refused_at_submit_with_its_message(visitor, portal):
    page = visitor.sign_in("alice")
    page.goto("/jobs/new/")
    page.get_by_label("Cluster", exact=True).select_option("lab")
    expect(page.locator("#id_gpu_type option")).to_have_text(["A100"])
    page.get_by_label("Name", exact=True).fill("lab-run")
    page.get_by_label("Code URL", exact=True).fill(portal.example_repo)
    page.get_by_label("Command", exact=True).fill("python train.py --epochs 1")
    # While the page is open, the cluster loses its connection: an admin makes it a Kubernetes cluster
    # without connection settings.
    portal_shell(
        portal,
        "from clusters.models import Cluster; Cluster.objects.filter(name='lab').update(backend='kubernetes', settings={})",
    )
    try:
        page.get_by_role("button", name="Submit job").click()
        expect(page.locator(".error-summary")).to_contain_text("The job was not submitted.")
        expect(page.locator("#field-cluster .errorlist")).to_contain_text(
            "Cluster lab is unreachable (no connection settings): it takes no jobs now."
        )
        lab = page.locator('#id_cluster option[value="lab"]')
        expect(lab).to_be_disabled()
        expect(lab).to_have_text("lab (unreachable: no connection settings)")
        screenshot(page, "22-submit-refused-unreachable")
    finally:
        portal_shell(
            portal,
            "from clusters.models import Cluster; Cluster.objects.filter(name='lab').update(backend='local', settings={})",
        )
