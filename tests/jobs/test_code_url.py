"""The one code-URL rule (core.code_url): the API, the executors and image builds all ask it."""

import pytest

from core.code_url import MAX_CODE_URL, code_url_problem, is_local_code
from jobs.models import Job
from tests.jobs.test_submit_api import submit

OK = None


@pytest.mark.parametrize(
    ("url", "allow_local", "problem"),
    [
        ("https://git.example.com/team/repo.git", False, OK),
        ("ssh://git@git.example.com/team/repo.git", False, OK),
        ("git://git.example.com/team/repo.git", False, OK),
        ("git@github.com:team/repo.git", False, OK),  # scp-like
        ("GIT@github.com:team/repo.git", False, OK),
        (
            "github.com:team/repo.git",
            False,
            "Code URLs with this form are not accepted; use https://, ssh://, git:// or git@host:path.",
        ),  # scp-like needs the user
        ("file:///srv/repo", True, OK),
        ("/srv/repo", True, OK),
        ("file:///srv/repo", False, "this cluster does not run code from local paths; use an https, ssh or git URL."),
        ("/srv/repo", False, "this cluster does not run code from local paths; use an https, ssh or git URL."),
        (
            "./repo",
            True,
            "Code URLs with this form are not accepted; use https://, ssh://, git:// or git@host:path "
            "(or a local path on this cluster).",
        ),  # relative paths: never
        (
            "http://git.example.com/repo.git",
            False,
            "Code URLs with 'http://' are not accepted; use https://, ssh://, git:// or git@host:path.",
        ),
        ("ext::sh -c touch% /tmp/pwned", True, "A code URL cannot start with '-' or contain spaces."),
        (
            "ext::sh",
            True,
            "Code URLs with this form are not accepted; use https://, ssh://, git:// or git@host:path "
            "(or a local path on this cluster).",
        ),
        (
            "git@host:ext::sh",
            False,
            "A code URL cannot contain '::' (git's transport syntax); use https://, ssh://, git:// or git@host:path.",
        ),
        (
            "/srv/a::b",
            True,
            "A code URL cannot contain '::' (git's transport syntax); use https://, ssh://, git:// or git@host:path.",
        ),
        ("--upload-pack=touch /tmp/x", False, "A code URL cannot start with '-' or contain spaces."),
        ("", False, "Give the git URL of the code, e.g. https://git.example.com/team/repo.git."),
        ("https://h/" + "r" * (MAX_CODE_URL - 10), False, OK),
        ("https://h/" + "r" * (MAX_CODE_URL - 9), False, "Keep the code URL under 500 characters."),
    ],
)
def test_the_rule(url, allow_local, problem):
    assert code_url_problem(url, allow_local=allow_local) == problem


@pytest.mark.parametrize(
    ("url", "problem"),
    [
        ("https://git.example.com/team/images.git", OK),
        (
            "git@github.com:team/images.git",
            "Kaniko fetches repositories over https; give an https:// URL, e.g. "
            "https://git.example.com/team/images.git.",
        ),
        (
            "https:///team/images.git",
            "Kaniko fetches repositories over https; give an https:// URL, e.g. "
            "https://git.example.com/team/images.git.",
        ),
        ("https://h/r.git#main", "A repository URL cannot contain spaces or '#' or start with '-'."),
        ("https://h/" + "r" * MAX_CODE_URL, "Keep the repository URL under 500 characters."),
    ],
)
def test_the_rule_for_kaniko_contexts(url, problem):
    assert code_url_problem(url, allow_local=False, https_only=True) == problem


def test_local_code_is_what_git_reads_from_disk():
    assert not is_local_code("https://github.com/org/repo.git") and not is_local_code("git@github.com:org/repo.git")
    assert is_local_code("file:///srv/repo") and is_local_code("/srv/repo") and is_local_code("./repo")


@pytest.mark.parametrize("length", [501, 2001, 100_000])
def test_a_long_code_url_is_a_400_naming_the_limit(world, length):
    response = submit(world, world.alice, code_url="https://h/" + "r" * (length - 10))
    assert response.status_code == 400
    assert response.json() == {"code_url": ["Keep the code URL under 500 characters."]}
    assert Job.objects.count() == 0
