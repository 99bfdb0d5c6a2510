"""No page breaks the Content-Security-Policy (issue 16 item 6): every main page, as a researcher and as a
platform admin, in Chromium, with its scripts, htmx's polling, the live-update websockets, uPlot's charts and
Swagger UI running. Any violation the browser reports (a `securitypolicyviolation` event, or the console's
"Refused to ..." message) fails the test with the page and what was refused.
"""

from __future__ import annotations

from playwright.sync_api import Page, expect

# Before any script of the page: every violation of this document and of its frames is kept.
RECORD_VIOLATIONS = """
window.__cspViolations = [];
document.addEventListener("securitypolicyviolation", function (event) {
  window.__cspViolations.push(event.violatedDirective + " " + (event.blockedURI || "inline") + " "
                              + (event.sourceFile || "") + ":" + (event.lineNumber || ""));
});
"""

RESEARCHER_PAGES = [
    ("/", "Welcome, alice"),
    ("/jobs/", None),
    ("/jobs/new/", None),
    ("/queue/", None),
    ("/clusters/", None),
    ("/clusters/local/", None),
    ("/tokens/", "API tokens"),
    ("/models/", None),
    ("/deployments/", None),
    ("/images/", None),
]
ADMIN_PAGES = [
    ("/console/", None),
    ("/console/usage/", "GPU usage"),
    ("/console/departments/vision/quotas/", None),
    ("/console/audit/", None),
    ("/admin/", None),
]


def watch(page: Page) -> list[str]:
    refused: list[str] = []
    page.add_init_script(RECORD_VIOLATIONS)
    page.on(
        "console", lambda message: refused.append(message.text) if "Content Security Policy" in message.text else None
    )
    return refused


def visit(page: Page, path: str, heading: str | None, refused: list[str]) -> None:
    page.goto(path)
    if heading:
        expect(page.get_by_role("heading", level=1)).to_have_text(heading)
    # htmx is running (its first poll or trigger swaps the live part) and portal.js has wired the page.
    page.wait_for_load_state("networkidle")
    violations = page.evaluate("window.__cspViolations")
    assert not violations and not refused, f"{path}: {violations} {refused}"


def test_a_researchers_pages_live_with_the_policy(visitor, portal):
    page = visitor.sign_in("alice")
    refused = watch(page)
    for path, heading in [*RESEARCHER_PAGES, (f"/jobs/{portal.vision_job_id}/", None)]:
        visit(page, path, heading, refused)
    # The job page's live-update socket connects (connect-src) and hears the consumer's hello.
    with page.expect_websocket(lambda socket: "/ws/jobs/" in socket.url) as opened:
        page.reload()
    socket = opened.value
    socket.wait_for_event("framereceived")  # the consumer's hello
    assert not page.evaluate("window.__cspViolations") and not refused


def test_the_api_docs_and_an_admins_pages_live_with_the_policy(visitor):
    page = visitor.sign_in("admin")
    refused = watch(page)
    for path, heading in ADMIN_PAGES:
        visit(page, path, heading, refused)
    page.goto("/console/usage/")
    expect(page.locator("#usage-chart canvas").first).to_be_visible()  # uPlot, from its static file
    page.goto("/api/v1/docs/")
    expect(page.locator(".swagger-ui .info .title")).to_contain_text("GPU Portal API")  # Swagger UI ran
    expect(page.locator(".opblock").first).to_be_visible()
    violations = page.evaluate("window.__cspViolations")
    assert not violations and not refused, f"API docs: {violations} {refused}"
