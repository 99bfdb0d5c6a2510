import re

from django.core.management import call_command


def test_it_generates_the_openapi_schema_without_warnings(tmp_path):
    out = tmp_path / "schema.yaml"
    # --fail-on-warn turns every drf-spectacular warning or error into a failure.
    call_command("spectacular", "--validate", "--fail-on-warn", "--file", str(out))
    text = out.read_text()
    for path in ["/api/v1/auth/token/", "/api/v1/me/", "/api/v1/departments/{slug}/quotas/", "/api/v1/clusters/"]:
        assert f"{path}:" in text


def test_it_serves_the_schema_and_interactive_docs_from_its_own_assets(client, db):
    assert client.get("/api/v1/schema/").status_code == 200
    page = client.get("/api/v1/docs/")
    assert page.status_code == 200
    html = page.content.decode()
    assets = re.findall(r'(?:src|href)="([^"]+\.(?:js|css))"', html)
    assert assets, html
    for asset in assets:
        assert asset.startswith("/static/"), f"{asset} is not served by the portal"
        response = client.get(asset)
        assert response.status_code == 200
        assert b"".join(response.streaming_content)
        response.close()
