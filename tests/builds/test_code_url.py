"""Image builds check a repository URL with the one code-URL rule (core.code_url, https only for Kaniko)."""

from images.models import ImageBuild
from tests.builds.test_api import submit


def test_a_long_repository_url_is_a_400_naming_the_limit(world):
    response = submit(world, world.alice, dockerfile="", code_url="https://h/" + "r" * 1991)
    assert response.status_code == 400
    assert response.json()["code_url"] == ["Keep the repository URL under 500 characters."]
    assert ImageBuild.objects.count() == 0
