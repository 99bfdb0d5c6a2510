"""The real portal in a real browser: uvicorn + Celery worker + beat on the test database, driven by Chromium.

One portal per package (``scope="package"``): starting the processes and building the example job's
virtualenv takes most of the time, so every browser test shares them. The demo world is committed to the
test database (the processes read it from other connections), and at the end the processes, the jobs and
TensorBoards they started are stopped and the database is flushed for the tests that come after.

Playwright's sync API runs an asyncio loop in this thread (in a greenlet) for as long as it is started, and
Django refuses ORM calls while a loop runs here (SynchronousOnlyOperation). So the database is touched only
before the browser starts and after it stops: tests look at the portal through the browser alone.

Screenshots of the main pages go to ``$PORTAL_DATA_ROOT/screenshots/`` of the test run.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from datetime import time as day_time
from pathlib import Path

import pytest
from django.conf import settings
from django.core.management import call_command
from django.db import DEFAULT_DB_ALIAS, connections
from django.test import override_settings
from playwright.sync_api import Browser, Locator, Page, expect, sync_playwright

from tests.conftest import PASSWORD
from tests.processes import Processes, process_env

ROOT = Path(__file__).resolve().parents[2]
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
VIEWPORT = {"width": 1366, "height": 900}  # a laptop screen

expect.set_options(timeout=15_000)


def screenshots_dir() -> Path:
    return Path(settings.PORTAL_DATA_ROOT) / "screenshots"


class PortalProcesses(Processes):
    """The portal's processes on their own data root (job files, broker, channel layer, secret key)."""

    def __init__(self, log_dir: Path, data_root: Path):
        super().__init__(log_dir)
        self.data_root = data_root

    def env(self) -> dict[str, str]:
        return process_env() | {"PORTAL_DATA_ROOT": str(self.data_root)}

    def start(self, name: str, argv: list[str], env: dict[str, str] | None = None) -> subprocess.Popen:
        with open(self.log_dir / f"{name}.log", "wb") as log:
            process = subprocess.Popen(
                argv, cwd=ROOT, env=self.env() | (env or {}), stdout=log, stderr=subprocess.STDOUT
            )
        self.running.append((name, process))
        return process

    def prepare(self) -> None:
        """The channel layer's own database (embedded configuration) and an empty broker queue."""
        if "channels" in settings.DATABASES:
            subprocess.run(
                [sys.executable, "manage.py", "migrate", "--database", "channels", "-v0"],
                cwd=ROOT,
                env=self.env(),
                check=True,
                timeout=120,
            )
        if not settings.CELERY_BROKER_URL.startswith("filesystem://"):
            from core.celery import app

            app.control.purge()  # the broker folder of a fresh data root is empty already


@dataclass
class Portal:
    url: str
    data_root: Path
    example_repo: str  # file:// URL of examples/digits published as a git repository
    vision_job_id: int  # a finished job of vision (carol's), 6 GPU-hours yesterday
    processes: PortalProcesses


def _seed_usage(world) -> int:
    """A vision job that held 2 GPUs for 3 hours yesterday: 6 GPU-hours in carol's name."""
    from tests.quotas.test_usage_api import held

    yesterday = datetime.combine(datetime.now(UTC).date() - timedelta(days=1), day_time(1), tzinfo=UTC)
    return held(world.carol, "vision", gpus=2, runs=[(yesterday, yesterday + timedelta(hours=3))]).pk


def _stop_jobs_and_boards(data_root: Path) -> None:
    """What the portal left running on this machine: job workers (detached supervisors) and TensorBoards."""
    from clusters import local_procs
    from jobs import lifecycle
    from jobs.executors.base import FINAL_PHASES
    from jobs.models import Job
    from jobs.running import executor_for
    from tensorboards import services as boards
    from tensorboards.models import TensorBoard

    with override_settings(PORTAL_DATA_ROOT=data_root):
        for job in Job.objects.exclude(status__in=lifecycle.FINAL).exclude(launched_at=None).exclude(run_id=""):
            executor = executor_for(job.cluster)
            executor.cancel(job.run_id, 0)
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline and executor.poll([job.run_id])[job.run_id].phase not in FINAL_PHASES:
                time.sleep(0.2)
        for board in TensorBoard.objects.exclude(pid=None):
            boards.board_stop(board=board)
            deadline = time.monotonic() + 15
            while time.monotonic() < deadline and local_procs.alive(
                board.pid, int(board.handle) if board.handle else None
            ):
                time.sleep(0.1)


def _other_tests_use_the_database(items) -> bool:
    # The rule pytest-django follows to decide whether django_db_setup creates the test database.
    uses = {"db", "transactional_db", "live_server"}
    return any(item.get_closest_marker("django_db") or uses & set(getattr(item, "fixturenames", ())) for item in items)


@contextmanager
def _test_database(items) -> Iterator[None]:
    """The test database. pytest-django creates it only when a collected test is marked for the database,
    and these tests are not (a per-test transaction or flush would hide or wipe the portal's world)."""
    from django.test.utils import setup_databases, teardown_databases

    if _other_tests_use_the_database(items):
        yield  # django_db_setup created it
        return
    created = setup_databases(verbosity=0, interactive=False, aliases={DEFAULT_DB_ALIAS})
    try:
        yield
    finally:
        teardown_databases(created, verbosity=0)


@pytest.fixture(scope="package")
def portal(request, django_db_setup, django_db_blocker, tmp_path_factory) -> Iterator[Portal]:
    from demo.data import publish_example_repo
    from tests.conftest import World

    data_root = Path(settings.PORTAL_DATA_ROOT) / "browser-portal"
    shutil.rmtree(data_root, ignore_errors=True)
    data_root.mkdir(parents=True)
    shutil.rmtree(screenshots_dir(), ignore_errors=True)
    screenshots_dir().mkdir(parents=True)
    log_dir = tmp_path_factory.mktemp("browser-portal-logs")
    processes = PortalProcesses(log_dir, data_root)
    with django_db_blocker.unblock(), _test_database(request.session.items):
        try:
            world = World(data_root)
            vision_job_id = _seed_usage(world)
            repo = publish_example_repo(source=ROOT / "examples" / "digits", target=data_root / "repos" / "digits")
        finally:
            connections.close_all()
        try:
            processes.prepare()
            port = processes.web()
            processes.worker()
            processes.beat()
            yield Portal(f"http://127.0.0.1:{port}", data_root, repo, vision_job_id, processes)
        finally:
            processes.stop()
            try:
                _stop_jobs_and_boards(data_root)
            finally:
                # The next tests expect an empty database, as after any transactional test.
                call_command("flush", interactive=False, verbosity=0)
                connections.close_all()


@pytest.fixture(scope="package")
def browser(portal) -> Iterator[Browser]:
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
        try:
            yield browser
        finally:
            browser.close()


@pytest.fixture(autouse=True)
def _evidence_on_failure(request, portal, browser):
    """A failing browser test leaves a screenshot of every open page and shows what the portal's processes said."""
    yield
    report = getattr(request.node, "rep_call", None)
    if report is not None and report.failed:
        name = re.sub(r"[^\w.-]+", "-", request.node.name)
        for index, page in enumerate(page for context in browser.contexts for page in context.pages):
            page.screenshot(path=str(screenshots_dir() / f"failed-{name}-{index}.png"), full_page=True)
        print(portal.processes.logs()[-20_000:])


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_makereport(item, call):
    report = yield
    setattr(item, f"rep_{report.when}", report)
    return report


class Visitor:
    """Open pages as one signed-in user (each visitor has its own cookies)."""

    def __init__(self, browser: Browser, portal: Portal):
        self.browser = browser
        self.portal = portal
        self.contexts = []

    def page(self) -> Page:
        context = self.browser.new_context(base_url=self.portal.url, viewport=VIEWPORT, locale="en-US")
        self.contexts.append(context)
        return context.new_page()

    def sign_in(self, username: str, password: str = PASSWORD) -> Page:
        page = self.page()
        page.goto("/login/")
        page.get_by_label("Username").fill(username)
        page.get_by_label("Password").fill(password)
        page.get_by_role("button", name="Sign in").click()
        expect(page.locator("header.topbar form.signout span").first).to_have_text(username)
        return page

    def close(self) -> None:
        for context in self.contexts:
            context.close()


@pytest.fixture
def visitor(browser, portal) -> Iterator[Visitor]:
    visitor = Visitor(browser, portal)
    yield visitor
    visitor.close()


def screenshot(target: Page | Locator, name: str) -> Path:
    """The whole page, or one part of it, as ``<screenshots>/<name>.png``."""
    path = screenshots_dir() / f"{name}.png"
    if isinstance(target, Locator):
        target.screenshot(path=str(path))
    else:
        target.screenshot(path=str(path), full_page=True)
    return path


def pytest_terminal_summary(terminalreporter):
    folder = screenshots_dir()
    if folder.is_dir() and any(folder.glob("*.png")):
        terminalreporter.write_line(f"Browser test screenshots: {folder}")
