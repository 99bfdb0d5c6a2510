"""The Images page (catalogue, the department's builds, the build form) and a build's page, in a browser's
terms: what is shown, what a wrong form says, who may see what, and the page in Chinese."""

from images import services
from images.models import ImageBuild
from tests.builds.conftest import DOCKERFILE

FORM = {
    "name": "torch-audio",
    "department": "vision",
    "cluster": "k8s",
    "framework": "pytorch",
    "dockerfile": DOCKERFILE,
    "base_packages": "torch==2.4.0\n",
}


def signed_in(client, user):
    client.force_login(user)
    return client


def test_the_nav_leads_to_the_catalogue_and_the_form(world, cluster, client):
    page = signed_in(client, world.alice).get("/").content.decode()
    assert 'href="/images/"' in page
    page = client.get("/images/").content.decode()
    assert "Catalogue" in page and "pytorch" in page and "Build an image" in page
    assert '<option value="k8s"' in page and '<option value="local"' not in page


def test_it_submits_a_build_and_shows_its_page(world, cluster, client):
    response = signed_in(client, world.alice).post("/images/", FORM)
    build = ImageBuild.objects.get()
    assert response.status_code == 302 and response["Location"] == f"/images/builds/{build.pk}/"
    assert build.base_packages == ["torch==2.4.0"] and build.framework == "pytorch"
    page = client.get(response["Location"]).content.decode()
    assert "torch-audio" in page and "Queued" in page and "Cancel build" in page
    assert 'hx-trigger="every 3s"' in page  # refreshes itself while the build runs
    listing = client.get("/images/").content.decode()
    assert f'href="/images/builds/{build.pk}/"' in listing


def test_a_wrong_form_says_what_to_fix_beside_each_field(world, cluster, client):
    response = signed_in(client, world.alice).post("/images/", {**FORM, "name": "Bad Name", "dockerfile": "RUN x"})
    assert response.status_code == 400
    page = response.content.decode()
    assert "The build was not submitted. Fix the fields marked below." in page
    assert "A Dockerfile needs a FROM line naming its base image" in page
    assert "Use lower-case letters, digits and" in page
    assert ImageBuild.objects.count() == 0


def test_outsiders_get_404_and_members_cancel_from_the_page(world, cluster, client):
    build = services.build_submit(user=world.alice, data={**FORM, "base_packages": []})
    assert signed_in(client, world.bob).get(f"/images/builds/{build.pk}/").status_code == 404
    assert client.post(f"/images/builds/{build.pk}/cancel/").status_code == 404
    assert f"/images/builds/{build.pk}/" not in client.get("/images/").content.decode()
    response = signed_in(client, world.carol).post(f"/images/builds/{build.pk}/cancel/", follow=True)
    page = response.content.decode()
    assert "Build of image torch-audio cancelled." in page and "Cancelled" in page and "Cancel build" not in page
    assert "hx-trigger" not in page.split('id="build-live"')[1].split(">")[0]


def test_the_images_page_speaks_chinese(world, cluster, client):
    signed_in(client, world.alice)
    client.cookies["django_language"] = "zh-hans"
    page = client.get("/images/").content.decode()
    assert "镜像目录" in page and "构建镜像" in page
