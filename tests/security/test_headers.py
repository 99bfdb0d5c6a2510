"""Headers and cookies (issue 16 item 6): a Content-Security-Policy on every page that the pages live with, and
Secure cookies and HSTS switched on by PORTAL_HTTPS (off for `make run` on http://127.0.0.1).

What an attacker would notice: a script injected into a page (no nonce) is not run, a foreign site cannot frame
the portal, the CSRF cookie is not readable from script, and over HTTPS the browser is told to keep to HTTPS and
never sends the cookies in clear. The browser test (tests/browser/test_csp.py) shows no page breaks the policy.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path

import httpx
import pytest
from django.test import Client
from django.urls import reverse

from tests.processes import Processes
from tests.security.objects import build_objects

ROOT = Path(__file__).resolve().parents[2]


def policy_of(response) -> dict[str, list[str]]:
    header = response.headers.get("Content-Security-Policy")
    assert header, f"{response.request['PATH_INFO']} has no Content-Security-Policy"
    return {name: values for name, *values in (part.split() for part in header.split(";") if part.strip())}


class InlineCode(HTMLParser):
    """Inline scripts and styles of a page, and style="" attributes: what the policy would refuse without a nonce."""

    def __init__(self):
        super().__init__()
        self.scripts: list[dict] = []
        self.styles: list[dict] = []
        self.style_attributes: list[str] = []
        self.handlers: list[str] = []

    def handle_starttag(self, tag, attrs):
        attributes = dict(attrs)
        if tag == "script" and "src" not in attributes and attributes.get("type") != "application/json":
            self.scripts.append(attributes)
        if tag == "style":
            self.styles.append(attributes)
        if "style" in attributes:
            self.style_attributes.append(tag)
        self.handlers += [name for name in attributes if name.startswith("on")]


def pages(objects, world) -> list[str]:
    return [
        "/",
        "/jobs/",
        "/jobs/new/",
        f"/jobs/{objects.job.pk}/",
        "/queue/",
        "/clusters/",
        "/clusters/local/",
        "/tokens/",
        "/models/",
        "/models/vis-secret-model/",
        "/deployments/",
        f"/deployments/{objects.deployment_name}/",
        "/images/",
        "/console/",
        "/console/usage/",
        "/console/departments/vision/members/",
        "/console/departments/vision/quotas/",
        "/console/departments/vision/storage/",
        "/console/departments/vision/webhooks/",
        "/console/audit/",
        "/console/priorities/",
        reverse("api-docs"),
    ]


@pytest.fixture
def objects(world, settings, tmp_path):
    settings.PORTAL_DATA_ROOT = tmp_path / "portal"
    settings.PORTAL_ARTIFACT_ROOT = tmp_path / "artifacts"
    return build_objects(world, tmp_path / "artifacts")


@pytest.mark.django_db(transaction=True, databases="__all__")
@pytest.mark.parametrize("who", ["carol", "admin"])
def test_every_page_has_the_policy_and_no_inline_code_without_its_nonce(world, objects, who):
    client = Client()
    client.force_login(getattr(world, who))
    staff_only = (
        ["/admin/", "/admin/accounts/department/", f"/admin/auth/user/{world.alice.pk}/change/"]
        if who == "admin"
        else []
    )
    for path in [*pages(objects, world), *staff_only, "/login/"]:
        response = client.get(path, follow=path == "/login/")
        assert response.status_code == 200, f"{who} {path}: {response.status_code}"
        policy = policy_of(response)
        assert policy["default-src"] == ["'self'"]
        assert policy["object-src"] == ["'none'"]
        assert policy["frame-ancestors"] == ["'self'"]
        assert policy["base-uri"] == ["'self'"] and policy["form-action"] == ["'self'"]
        assert "'unsafe-inline'" not in policy["script-src"] and "'unsafe-eval'" not in policy["script-src"]
        assert "'unsafe-inline'" not in policy["style-src"]
        assert policy["connect-src"] == ["'self'", "ws://testserver"]
        nonces = {value[len("'nonce-") : -1] for value in policy["script-src"] if value.startswith("'nonce-")}
        found = InlineCode()
        found.feed(response.content.decode())
        for script in found.scripts:
            assert script.get("nonce") in nonces, f"{path}: an inline script without the page's nonce"
        for style in found.styles:
            assert style.get("nonce") and f"'nonce-{style['nonce']}'" in policy["style-src"], f"{path}: <style>"
        assert not found.style_attributes, f"{path}: style attributes on {found.style_attributes}"
        assert not found.handlers, f"{path}: event handler attributes {found.handlers}"


@pytest.mark.django_db
def test_a_nonce_is_used_once(world):
    client = Client()
    client.force_login(world.alice)
    first, second = (policy_of(client.get(reverse("api-docs")))["script-src"] for _ in range(2))
    assert first != second and any(value.startswith("'nonce-") for value in first)


@pytest.mark.django_db
def test_plain_http_defaults_no_secure_cookies_no_hsts_and_a_csrf_cookie_script_cannot_read(world):
    response = Client().get("/login/", secure=True)
    assert "Strict-Transport-Security" not in response.headers  # make run: nothing to pin to HTTPS
    cookie = response.cookies["csrftoken"]
    assert not cookie["secure"]
    assert cookie["httponly"], "the CSRF cookie is readable from script"
    assert response.headers["X-Content-Type-Options"] == "nosniff"
    assert response.headers["Referrer-Policy"] == "same-origin"
    assert response.headers["X-Frame-Options"] == "SAMEORIGIN"


def settings_with(tmp_path, **env) -> subprocess.CompletedProcess:
    environ = {k: v for k, v in os.environ.items() if not k.startswith(("PORTAL_", "DJANGO_"))}
    environ.update(PORTAL_DATA_ROOT=str(tmp_path), **env)
    names = [
        "SESSION_COOKIE_SECURE",
        "CSRF_COOKIE_SECURE",
        "SECURE_HSTS_SECONDS",
        "SECURE_HSTS_INCLUDE_SUBDOMAINS",
        "SECURE_HSTS_PRELOAD",
        "SECURE_SSL_REDIRECT",
    ]
    code = f"from django.conf import settings; import json; print(json.dumps({{n: getattr(settings, n) for n in {names}}}))"
    return subprocess.run(
        [sys.executable, "manage.py", "shell", "-c", code], cwd=ROOT, env=environ, capture_output=True, text=True
    )


def test_the_https_settings_follow_the_environment(tmp_path):
    default = json.loads(settings_with(tmp_path).stdout.strip().splitlines()[-1])
    assert not any(default.values()), default
    served = settings_with(
        tmp_path,
        PORTAL_HTTPS="true",
        PORTAL_HSTS_SECONDS="31536000",
        PORTAL_HSTS_INCLUDE_SUBDOMAINS="true",
        PORTAL_HSTS_PRELOAD="true",
        PORTAL_SSL_REDIRECT="yes",
    )
    assert json.loads(served.stdout.strip().splitlines()[-1]) == {
        "SESSION_COOKIE_SECURE": True,
        "CSRF_COOKIE_SECURE": True,
        "SECURE_HSTS_SECONDS": 31536000,
        "SECURE_HSTS_INCLUDE_SUBDOMAINS": True,
        "SECURE_HSTS_PRELOAD": True,
        "SECURE_SSL_REDIRECT": True,
    }
    preload_too_short = settings_with(tmp_path, PORTAL_HTTPS="true", PORTAL_HSTS_PRELOAD="true")
    assert preload_too_short.returncode != 0
    assert "PORTAL_HSTS_PRELOAD=true needs PORTAL_HSTS_INCLUDE_SUBDOMAINS=true" in preload_too_short.stderr
    redirect_without_https = settings_with(tmp_path, PORTAL_SSL_REDIRECT="true")
    assert "PORTAL_SSL_REDIRECT=true needs PORTAL_HTTPS=true" in redirect_without_https.stderr


@pytest.mark.django_db(transaction=True)
def test_behind_a_tls_proxy_the_browser_is_pinned_to_https_and_cookies_stay_secure(world, tmp_path):
    """The real web process behind a trusted proxy on 127.0.0.1 that terminates TLS (X-Forwarded-Proto)."""
    processes = Processes(tmp_path)
    env = {
        "PORTAL_HTTPS": "true",
        "PORTAL_HSTS_SECONDS": "600",
        "PORTAL_HSTS_INCLUDE_SUBDOMAINS": "true",
        "PORTAL_SSL_REDIRECT": "true",
        "PORTAL_TRUSTED_PROXIES": "127.0.0.1/32",
    }
    try:
        url = f"http://127.0.0.1:{processes.web(env=env)}"
        with httpx.Client(base_url=url, timeout=30) as client:
            over_tls = client.get("/login/", headers={"X-Forwarded-Proto": "https"})
            assert over_tls.status_code == 200
            assert over_tls.headers["Strict-Transport-Security"] == "max-age=600; includeSubDomains"
            csrf_cookie = over_tls.headers["set-cookie"]
            assert re.search(r"csrftoken=.*; HttpOnly;.*; Secure", csrf_cookie), csrf_cookie
            assert "wss://127.0.0.1:" in over_tls.headers["Content-Security-Policy"]
            plain = client.get("/login/")
            assert plain.status_code == 301
            assert plain.headers["Location"] == f"https://{url.removeprefix('http://')}/login/"
            assert "Strict-Transport-Security" not in plain.headers  # HSTS only ever comes over HTTPS
            assert client.get("/healthz").status_code != 301  # probes speak plain HTTP inside the cluster
    finally:
        processes.stop()
