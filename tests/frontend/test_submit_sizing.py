"""The submit form sizes the job: GPU types and images of the chosen cluster, the department's free quota and the
pool's idle GPUs (the sizing endpoint the form's script asks), hints in words a researcher knows, and a clone
that does not show the default runtime as if it had been asked for."""

from __future__ import annotations

from accounts.models import Department
from clusters.models import Cluster, GpuPool
from images.models import FrameworkImage, ImageBuild
from quotas.models import Quota
from tests.frontend.researcher_helpers import REPO, field_html, form_as_browser_sends_it, signed_in, submit


def lab(world, backend=Cluster.Backend.LOCAL, **settings) -> Cluster:
    cluster = Cluster.objects.create(name="lab", backend=backend, settings=settings)
    pool = GpuPool.objects.create(cluster=cluster, gpu_type="A100", nodes=2, gpus_per_node=4)
    Quota.objects.create(department=Department.objects.get(slug="vision"), pool=pool, nominal=3, borrowing_limit=2)
    return cluster


def sizing(client, **query):
    response = client.get("/jobs/new/sizing/", {"department": "vision"} | query)
    assert response.status_code == 200
    return response.json()


def test_the_types_follow_the_cluster_with_the_free_quota_and_idle_gpus(client, world):
    lab(world)
    signed_in(client, world.alice)
    submit(world.alice, cluster="lab", gpu_type="A100", gpus_per_worker=2)  # admitted: 2 of vision's 3 in use
    found = sizing(client, cluster="lab", gpu_type="sim")
    assert (found["gpu_types"], found["gpu_type"]) == (["A100"], "A100")  # sim is not offered on lab
    assert "Free quota of vision: 1 of 3 GPUs (2 in use, 0 waiting in the queue)." in found["html"]
    assert "may borrow up to 2 idle GPUs of other departments" in found["html"]
    assert "Idle in pool lab/A100: 6 of 8 GPUs" in found["html"]
    local = sizing(client, cluster="local")
    assert local["gpu_types"] == ["sim"] and "Room on local for sim GPUs" in local["html"]


def test_the_sizing_shows_only_the_callers_departments(client, world):
    lab(world)
    found = sizing(signed_in(client, world.bob), cluster="lab")  # nlp has no quota on lab
    assert found["gpu_types"] == [] and "no GPU quota on this cluster" in found["html"]
    found = sizing(signed_in(client, world.bob), department="vision", cluster="local")  # not bob's department
    assert found["gpu_types"] == [] and "Free quota" not in found["html"]


def test_images_built_on_another_kubernetes_cluster_are_not_offered_there_and_are_refused(client, world, kube):
    vision = Department.objects.get(slug="vision")
    other = Cluster.objects.create(name="other", backend=Cluster.Backend.KUBERNETES, settings={"kube_url": kube.url})
    image = FrameworkImage.objects.create(name="audio", framework="pytorch", image="reg/audio:1", department=vision)
    ImageBuild.objects.create(
        department=vision, cluster=other, requested_by=world.alice, name="audio", image=image, dockerfile="FROM x"
    )
    lab(world, backend=Cluster.Backend.KUBERNETES, kube_url=kube.url)
    signed_in(client, world.alice)
    assert "audio" not in sizing(client, cluster="lab")["images"]
    assert "audio" in sizing(client, cluster="local")["images"]  # local runs its packages in a virtualenv
    data = form_as_browser_sends_it(client.get("/jobs/new/")) | {
        "name": "speech",
        "code_url": REPO,
        "command": "python train.py",
        "cluster": "lab",
        "gpu_type": "A100",
        "image": "audio",
    }
    html = client.post("/jobs/new/", data).content.decode()
    assert "Image audio was built on cluster other and is pulled from its registry" in field_html(html, "image")


def test_a_gpu_type_of_another_cluster_is_refused_with_a_clear_message(client, world):
    lab(world)
    signed_in(client, world.alice)
    data = form_as_browser_sends_it(client.get("/jobs/new/")) | {
        "name": "mismatch",
        "code_url": REPO,
        "command": "python train.py",
        "cluster": "local",
        "gpu_type": "A100",
    }
    html = client.post("/jobs/new/", data).content.decode()
    assert "has no quota for &#x27;A100&#x27; GPUs on cluster local; it has quota for: sim." in field_html(
        html, "gpu_type"
    )


def test_the_hints_speak_of_local_code_and_plain_name_rules(client, world):
    html = signed_in(client, world.alice).get("/jobs/new/").content.decode()
    assert "file:// URL or a local path" in field_html(html, "code_url")
    assert "starting with a letter" in field_html(html, "name")


def test_a_clone_of_a_job_without_a_runtime_leaves_the_runtime_empty(client, world):
    source = submit(world.alice)  # no max runtime: the default 7 days
    form = signed_in(client, world.alice).get(f"/jobs/new/?clone={source.pk}").context["form"]
    assert form["max_runtime"].value() == ""
    timed = submit(world.alice, name="timed", max_runtime_seconds=7200)
    form = client.get(f"/jobs/new/?clone={timed.pk}").context["form"]
    assert form["max_runtime"].value() == "2"
