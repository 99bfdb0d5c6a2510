"""The layout a laptop shows (issue 17, item 6): the header on one line at 1280 px for every demo user, in
English and in Chinese, with nothing pushed out of the window; the usage chart's last day whole."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from playwright.sync_api import Page, expect

from tests.browser.conftest import screenshot

LAPTOP = {"width": 1280, "height": 800}

# Every link, button and name in the header: their boxes, and the header's.
HEADER_BOXES = """() => {
  const header = document.querySelector("header.topbar");
  const items = [...header.querySelectorAll("a, button, form.signout > span, .brand")]
    .map((item) => ({ text: item.textContent.trim(), box: item.getBoundingClientRect() }))
    .filter((item) => item.box.width > 0 && item.box.height > 0);
  const box = header.getBoundingClientRect();
  return {
    header: { top: box.top, height: box.height, scrollWidth: header.scrollWidth, clientWidth: header.clientWidth },
    items: items.map(({ text, box }) => ({ text, top: box.top, bottom: box.bottom, left: box.left, right: box.right })),
    window: window.innerWidth,
  };
}"""


def header_lines(page: Page) -> dict:
    return page.evaluate(HEADER_BOXES)


def assert_one_line(page: Page, who: str) -> None:
    found = header_lines(page)
    items = found["items"]
    assert len(items) >= 6, found
    tallest = max(item["bottom"] - item["top"] for item in items)
    centres = [(item["top"] + item["bottom"]) / 2 for item in items]
    # One line: every item's middle at the same height, and the header no taller than its tallest item allows.
    assert max(centres) - min(centres) <= 4, (who, sorted(items, key=lambda item: item["top"]))
    assert found["header"]["height"] <= tallest + 28, (who, found["header"], tallest)
    # Nothing cut off or pushed out of the window to keep it on one line.
    outside = [item for item in items if item["right"] > found["window"] or item["left"] < 0]
    assert not outside, (who, outside)
    assert found["header"]["scrollWidth"] <= found["header"]["clientWidth"], (who, found["header"])


@pytest.mark.parametrize("username", ["alice", "carol", "bob", "admin"])
def test_the_header_is_one_line_at_1280_px_for_every_demo_user_in_english_and_chinese(visitor, username):
    page = visitor.sign_in(username)
    page.set_viewport_size(LAPTOP)
    for path in ("/", "/jobs/", "/console/" if username in ("carol", "admin") else "/models/"):
        page.goto(path)
        assert_one_line(page, f"{username} on {path} in English")
    screenshot(page.locator("header.topbar"), f"header-en-{username}")
    page.get_by_role("button", name="简体中文").click()
    expect(page.locator("html")).to_have_attribute("lang", "zh-hans")
    for path in ("/", "/jobs/"):
        page.goto(path)
        assert_one_line(page, f"{username} on {path} in Chinese")
    screenshot(page.locator("header.topbar"), f"header-zh-{username}")
    page.get_by_role("button", name="English").click()
    expect(page.locator("html")).to_have_attribute("lang", "en")


# The coloured runs (bars) along one row of the usage chart's canvas just above its x axis, and the plot area.
BAR_RUNS = """() => {
  const box = document.getElementById("usage-chart");
  const canvas = box && box.querySelector("canvas");
  const overlay = box && box.querySelector(".u-over");
  if (!canvas || !overlay) return null;
  const area = overlay.getBoundingClientRect(), frame = canvas.getBoundingClientRect();
  const ratio = canvas.width / frame.width;
  const row = canvas.getContext("2d").getImageData(0, Math.round((area.bottom - frame.top - 3) * ratio), canvas.width, 1).data;
  const runs = [];
  let start = null;
  for (let x = 0; x <= canvas.width; x++) {
    const [r, g, b, a] = x < canvas.width ? row.slice(x * 4, x * 4 + 4) : [0, 0, 0, 0];
    const coloured = a > 0 && Math.max(Math.abs(r - g), Math.abs(g - b), Math.abs(r - b)) > 40;
    if (coloured && start === null) start = x;
    if (!coloured && start !== null) { runs.push([frame.left + start / ratio, frame.left + x / ratio]); start = null; }
  }
  return runs.length ? {runs, left: area.left, right: area.right} : null;
}"""


def assert_last_day_whole(page: Page, days: int, who: str) -> None:
    page.wait_for_function(BAR_RUNS)
    found = page.evaluate(BAR_RUNS)
    slot = (found["right"] - found["left"]) / days
    left, right = found["runs"][-1]
    # The last day (yesterday, with the seeded 6 GPU-hours of vision) is a whole bar, centred in its slot,
    # as wide as a bar is (70 % of a day, 48 px at most), and entirely inside the plot.
    assert right <= found["right"] + 0.5 and left >= found["left"], (who, found)
    assert abs((left + right) / 2 - (found["right"] - slot / 2)) <= 2, (who, found, slot)
    assert right - left >= 0.9 * min(0.7 * slot, 48) - 2, (who, found, slot)


@pytest.mark.parametrize(("username", "department"), [("carol", "vision"), ("admin", "")])
def test_the_usage_chart_shows_the_last_day_whole_as_bars_for_one_department_and_for_all(visitor, username, department):
    yesterday = datetime.now(UTC).date() - timedelta(days=1)
    page = visitor.sign_in(username)
    page.set_viewport_size(LAPTOP)
    query = f"from={yesterday - timedelta(days=6)}&to={yesterday}" + (f"&department={department}" if department else "")
    page.goto(f"/console/usage/?{query}")
    chart = page.locator("#usage-chart")
    expect(chart.locator("canvas").first).to_be_visible()
    expect(chart).to_contain_text("vision")
    if not department:
        expect(chart).to_contain_text("nlp")  # every department a series of the same bars, stacked
    assert_last_day_whole(page, 7, username)
    screenshot(chart, f"usage-chart-{username}")
