"""NUL and other control characters in the address, a query parameter or a form field are a 400 naming it
(config/parameters.py), on every list endpoint of the OpenAPI schema and every page with a query parameter.
PostgreSQL refuses a NUL in a query (a 500 before this check); run the module on PostgreSQL too."""

from __future__ import annotations

import pytest
from django.test import Client
from drf_spectacular.generators import SchemaGenerator

pytestmark = pytest.mark.django_db

PATH_VALUES = {"{job_id}": "1", "{name}": "iris", "{webhook_id}": "1"}
# Pages that read query parameters (frontend/views.py, frontend/console/, serving/views.py, models_registry/views.py).
PAGES = {
    "/jobs/": ["department", "status", "user", "q", "page"],
    "/jobs/new/": ["clone"],
    "/queue/": ["cluster", "gpu_type"],
    "/console/usage/": ["department", "from", "to"],
    "/console/audit/": ["department", "action", "page"],
    "/deployments/": ["department"],
    "/models/": ["q", "department", "compare"],
}


def api_list_parameters() -> list[tuple[str, str]]:
    """(path, query parameter) of every GET of the schema that takes query parameters."""
    schema = SchemaGenerator().get_schema(request=None, public=True)
    found = []
    for path, operations in schema["paths"].items():
        for parameter in operations.get("get", {}).get("parameters", []):
            if parameter["in"] == "query":
                for placeholder, value in PATH_VALUES.items():
                    path = path.replace(placeholder, value)
                found.append((path, parameter["name"]))
    return found


def refusal(name: str, code: str) -> str:
    kind = "a NUL character" if code == "\\x00" else "a control character"
    return (
        f"The query parameter '{name}' contains {kind} ({code}), which the portal does not accept. "
        "Remove it and try again."
    )


def test_every_api_list_parameter_with_a_nul_is_a_400_naming_it(world):
    api = world.api(world.admin)
    api.raise_request_exception = False  # a 500 is listed with the others
    cases = api_list_parameters()
    assert len(cases) > 40 and ("/api/v1/jobs/", "search") in cases
    wrong = []
    for path, name in cases:
        response = api.get(f"{path}?{name}=a%00b")
        answer = response.json() if response["Content-Type"] == "application/json" else response.content[:200]
        if response.status_code != 400 or answer != {"detail": refusal(name, "\\x00")}:
            wrong.append((path, name, response.status_code, answer))
    assert not wrong, "\n".join(str(case[:3]) for case in wrong)


def test_every_page_parameter_with_a_nul_is_a_400_page_naming_it(world):
    browser = Client(raise_request_exception=False)
    browser.force_login(world.admin)
    wrong = []
    for path, names in PAGES.items():
        for name in names:
            response = browser.get(f"{path}?{name}=%00")
            expected = refusal(name, "\\x00").replace("'", "&#x27;").encode()
            if response.status_code != 400 or expected not in response.content:
                wrong.append((path, name, response.status_code, response.content[:200]))
    assert not wrong, "\n".join(str(case[:3]) for case in wrong)


def test_other_control_characters_are_refused_but_tab_and_newlines_in_values_pass(world):
    api = world.api(world.alice)
    assert api.get("/api/v1/jobs/?search=%1b[31m").json() == {"detail": refusal("search", "\\x1b")}
    for allowed in ("%09", "%0a", "%0d"):
        assert api.get(f"/api/v1/jobs/?search=a{allowed}b").status_code == 200
    response = api.get("/api/v1/jobs/?sea%09rch=x")
    assert response.status_code == 400
    assert response.json()["detail"].startswith("The name of the query parameter 'sea\\x09rch' contains a control")


def test_a_nul_in_the_address_or_a_form_field_is_refused(world):
    response = world.api(world.alice).get("/api/v1/models/ir%00is/")
    assert response.status_code == 400
    assert response.json()["detail"].startswith("The address '/api/v1/models/ir\\x00is/' contains a NUL character")
    page = Client().post("/login/", {"username": "alice\x00", "password": "x"})
    assert page.status_code == 400 and page["Content-Type"].startswith("text/html")
    assert b"The form field &#x27;username&#x27; contains a NUL character" in page.content
