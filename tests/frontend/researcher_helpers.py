"""Helpers of the researcher pages' tests (tests/frontend/test_researcher_*.py): jobs submitted as the API does,
a signed-in client, and the submit form's markup and values as a browser would send them.
"""

from jobs import services
from jobs.api import parse_job_input

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
