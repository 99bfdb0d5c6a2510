"""How a cluster contains its jobs (isolation, setup_timeout_seconds): checked wherever settings are written, and
said loudly on the cluster page, the submit form and at `make run` when jobs run unisolated or cannot be sandboxed."""

import shutil
from io import StringIO

import pytest
from django.core.management import call_command

from accounts.models import Department
from clusters.models import Cluster, GpuPool
from clusters.sandbox_check import sandbox_problems
from core.errors import InvalidInput
from quotas.isolation import cluster_save
from quotas.models import Quota

LAPTOP = {"allow_local_code": True, "isolation": "none"}


@pytest.fixture
def host_without_bubblewrap(monkeypatch, tmp_path):
    """A PATH with git (the demo publishes its example repository) and neither bwrap nor slirp4netns."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "git").symlink_to(shutil.which("git"))
    monkeypatch.setenv("PATH", str(bin_dir))
    sandbox_problems.cache_clear()
    yield
    sandbox_problems.cache_clear()


def laptop(world, settings=LAPTOP):
    """A one-department cluster: vision's own machine."""
    cluster = Cluster.objects.create(name="laptop", backend=Cluster.Backend.LOCAL, settings=settings)
    pool = GpuPool.objects.create(cluster=cluster, gpu_type="rtx", nodes=1, gpus_per_node=2)
    Quota.objects.create(department=Department.objects.get(slug="vision"), pool=pool, nominal=2)
    return cluster


def quotas_body(*extra):
    return [{"cluster": "local", "gpu_type": "sim", "nominal": 4}, *extra]


def test_the_demo_cluster_sandboxes_the_two_departments_it_serves_and_limits_setup(world):
    local = Cluster.objects.get(name="local")
    assert (local.settings["isolation"], local.settings["setup_timeout_seconds"]) == ("sandbox", 1800)
    assert set(Quota.objects.filter(pool__cluster=local).values_list("department__slug", flat=True)) == {
        "vision",
        "nlp",
    }


@pytest.mark.parametrize(
    ("written", "message"),
    [
        ({"setup_timeout_seconds": 10}, "setup_timeout_seconds must be a whole number of seconds from 30 to 86400"),
        ({"setup_timeout_seconds": 86401}, "it is 86401"),
        ({"setup_timeout_seconds": "1800"}, 'it is "1800"'),
        ({"setup_timeout_seconds": True}, "it is True"),
        ({"isolation": "off"}, 'isolation must be "sandbox" (each job in its own sandbox) or "none"'),
        ([], "Settings must be a JSON object"),
    ],
)
def test_it_refuses_cluster_settings_a_person_mistyped_and_says_what_to_give(world, written, message):
    local = Cluster.objects.get(name="local")
    local.settings = written
    with pytest.raises(InvalidInput) as refused:
        cluster_save(actor=world.admin, cluster=local)
    assert message in " ".join(refused.value.errors["settings"])
    assert Cluster.objects.get(name="local").settings["setup_timeout_seconds"] == 1800


def test_jobs_run_unisolated_only_on_a_cluster_of_one_department(world):
    local = Cluster.objects.get(name="local")
    local.settings = {**local.settings, "isolation": "none"}
    with pytest.raises(InvalidInput) as refused:
        cluster_save(actor=world.admin, cluster=local)
    assert "serves one department only; quotas here name nlp, vision" in refused.value.errors["settings"][0]
    assert Cluster.objects.get(name="local").settings["isolation"] == "sandbox"

    own = laptop(world, settings={})
    own.settings = LAPTOP
    cluster_save(actor=world.admin, cluster=own)
    assert Cluster.objects.get(name="laptop").settings["isolation"] == "none"


def test_a_second_department_gets_no_quota_on_a_cluster_that_runs_jobs_unisolated(world):
    laptop(world)
    body = quotas_body({"cluster": "laptop", "gpu_type": "rtx", "nominal": 1})
    refused = world.api(world.admin).put("/api/v1/departments/nlp/quotas/", body, format="json")
    assert refused.status_code == 400
    assert 'runs jobs unisolated (isolation "none") for vision only' in refused.json()["quotas"][1]["cluster"][0]
    assert not Quota.objects.filter(department__slug="nlp", pool__cluster__name="laptop").exists()
    # vision itself may change its own quota there
    mine = world.api(world.admin).put(
        "/api/v1/departments/vision/quotas/",
        quotas_body({"cluster": "laptop", "gpu_type": "rtx", "nominal": 1}),
        format="json",
    )
    assert mine.status_code == 200, mine.json()


def test_the_admin_refuses_bad_cluster_settings_on_the_form(client, world):
    local = Cluster.objects.get(name="local")
    client.force_login(world.admin)
    form = {
        "name": "local",
        "backend": "local",
        "settings": '{"isolation": "none", "setup_timeout_seconds": 1800}',
        "pools-TOTAL_FORMS": "0",
        "pools-INITIAL_FORMS": "0",
        "pools-MIN_NUM_FORMS": "0",
        "pools-MAX_NUM_FORMS": "1000",
    }
    response = client.post(f"/admin/clusters/cluster/{local.pk}/change/", form)
    assert response.status_code == 200
    assert "serves one department only" in response.content.decode()
    assert Cluster.objects.get(name="local").settings["isolation"] == "sandbox"
    form["settings"] = '{"isolation": "sandbox", "setup_timeout_seconds": 600}'
    assert client.post(f"/admin/clusters/cluster/{local.pk}/change/", form).status_code == 302
    assert Cluster.objects.get(name="local").settings == {"isolation": "sandbox", "setup_timeout_seconds": 600}


def test_the_cluster_page_and_the_submit_form_say_loudly_that_jobs_run_unisolated(client, world):
    laptop(world)
    client.force_login(world.alice)
    page = client.get("/clusters/laptop/").content.decode()
    assert 'role="alert"' in page and "Jobs on cluster laptop run UNISOLATED" in page
    assert "run UNISOLATED" not in client.get("/clusters/local/").content.decode()
    form = client.get("/jobs/new/").content.decode()
    assert "Jobs on cluster laptop run unisolated" in form and "Jobs on cluster local run" not in form


def test_this_host_can_sandbox_jobs(world):
    assert sandbox_problems() == []


def test_the_cluster_page_says_when_this_host_cannot_sandbox(client, world, host_without_bubblewrap):
    problems = sandbox_problems()
    assert any("`bwrap` is not on PATH: install the Debian package bubblewrap" in p for p in problems)
    assert any("slirp4netns" in p for p in problems)
    client.force_login(world.alice)
    page = client.get("/clusters/local/").content.decode()
    assert "Cluster local is set to sandbox its jobs, but this host cannot" in page and "bubblewrap" in page


def test_make_run_warns_about_unisolated_clusters_and_a_host_that_cannot_sandbox(world, host_without_bubblewrap):
    laptop(world)
    out = StringIO()
    call_command("demo", stdout=out)
    lines = [line for line in out.getvalue().splitlines() if "WARNING" in line]
    assert any("Jobs on cluster laptop run UNISOLATED" in line for line in lines), lines
    assert any("Cluster local is set to sandbox its jobs, but this host cannot" in line for line in lines), lines
