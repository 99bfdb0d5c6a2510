"""English and Simplified Chinese: the language switch, the pages in Chinese, and the catalogues.

The catalogues live in locale/zh_Hans/LC_MESSAGES/ and are refreshed with

    manage.py makemessages -l zh_Hans -i .venv -i var -i tests -i bench -i control -i platform
    manage.py makemessages -d djangojs -l zh_Hans -i frontend/static/frontend/vendor -i .venv -i var -i control
    manage.py compilemessages -l zh_Hans -i .venv -i var -i control

The compiled .mo files are committed (a machine without gettext serves Chinese too), so these tests
check, without gettext's tools, that every marked string is in a catalogue, translated, and compiled.
"""

from __future__ import annotations

import ast
import gettext
import json
import re
from pathlib import Path

import pytest
from django.conf import settings
from django.utils.translation.template import templatize

from jobs import services
from jobs.api import parse_job_input

ROOT = Path(settings.BASE_DIR)
CATALOGUES = ROOT / "locale" / "zh_Hans" / "LC_MESSAGES"
PYTHON_SOURCES = ["frontend", "quotas", "jobs", "models_registry", "builds", "webhooks", "config"]
TEMPLATES = [ROOT / app / "templates" for app in PYTHON_SOURCES if (ROOT / app / "templates").is_dir()]
SCRIPT = ROOT / "frontend" / "static" / "frontend" / "portal.js"
HAN = re.compile(r"[\u4e00-\u9fff]")
# pending_reason -> (label in Chinese, in English)
REASONS = {
    "quota_exhausted": ("配额已用完", "Quota used up"),
    "borrowing_limit": ("已达借用上限", "Borrowing limit reached"),
    "no_capacity": ("空闲 GPU 不足", "Not enough free GPUs"),
    "gang_does_not_fit": ("空闲 GPU 的分布容纳不下全部工作进程", "The workers do not fit on the free GPUs"),
    "lower_in_queue": ("在队列中排在其他任务之后", "Behind other jobs in the queue"),
    "preemption_in_progress": ("等待被抢占的任务停止", "Waiting for preempted jobs to stop"),
}


def submit(user, **fields):
    values, type_errors = parse_job_input(
        {
            "name": "digits",
            "department": "vision",
            "code_url": "https://git.example.com/t/r.git",
            "command": "python t.py",
        }
        | fields
    )
    return services.job_submit(user=user, data=values, type_errors=type_errors)[0]


def switch(client, language: str, next_url: str = "/"):
    """Press the language switch's button, as the browser posts it."""
    return client.post("/i18n/setlang/", {"language": language, "next": next_url})


@pytest.fixture
def chinese(client, world):
    client.force_login(world.alice)
    response = switch(client, "zh-hans")
    assert response.status_code == 302 and response["Location"] == "/"
    return client


def page(client, url: str) -> str:
    response = client.get(url)
    assert response.status_code == 200, url
    return response.content.decode()


# --- The switch --------------------------------------------------------------------------


def test_the_switch_offers_both_languages_and_comes_back_to_the_page(client, world):
    html = page(client, "/login/?next=/jobs/")
    switcher = html[html.index('action="/i18n/setlang/"') :]
    switcher = switcher[: switcher.index("</form>")]
    assert 'name="next" value="/login/?next=/jobs/"' in switcher
    assert '<button type="submit" name="language" value="en" lang="en" aria-pressed="true">English</button>' in switcher
    assert 'value="zh-hans" lang="zh-hans" aria-pressed="false">简体中文</button>' in switcher
    response = switch(client, "zh-hans", "/login/?next=/jobs/")
    assert response.status_code == 302 and response["Location"] == "/login/?next=/jobs/"
    html = page(client, "/login/?next=/jobs/")
    assert '<html lang="zh-hans">' in html and "<h1>登录</h1>" in html
    assert 'value="zh-hans" lang="zh-hans" aria-pressed="true">简体中文</button>' in html


def test_switching_back_gives_english(chinese):
    assert "欢迎，alice" in page(chinese, "/")
    switch(chinese, "en")
    html = page(chinese, "/")
    assert '<html lang="en">' in html and "Welcome, alice" in html and "My recent jobs" in html
    assert not HAN.search(html.replace("简体中文", ""))


def test_the_head_links_the_favicon_and_the_javascript_catalogue(client, world):
    html = page(client, "/login/")
    assert '<link rel="icon" href="/static/frontend/favicon.svg" type="image/svg+xml">' in html
    assert html.index('<script src="/jsi18n/" defer></script>') < html.index("portal.js")
    favicon = client.get("/static/frontend/favicon.svg")
    assert favicon.status_code == 200 and favicon["Content-Type"] == "image/svg+xml"
    assert b"<svg" in b"".join(favicon.streaming_content)


def test_the_javascript_catalogue_follows_the_language(client, world):
    entry = f"{json.dumps('Following the log…')}: {json.dumps('正在跟踪日志…')}"  # as the catalogue escapes it
    english = client.get("/jsi18n/")
    assert english.status_code == 200 and "javascript" in english["Content-Type"]
    assert json.dumps("Following the log…") not in english.content.decode()
    switch(client, "zh-hans")
    script = client.get("/jsi18n/").content.decode()
    assert entry in script and json.dumps("TensorBoard of this job") in script


# --- The pages in Chinese ------------------------------------------------------------------


def test_the_dashboard_speaks_chinese(chinese, world):
    submit(world.alice, name="big", gpus_per_worker=8)
    submit(world.alice, name="waiting")
    html = page(chinese, "/")
    assert '<html lang="zh-hans">' in html
    for text in [
        "欢迎，alice",
        "概览",
        "我最近的任务",
        "我排队中的任务",
        "各部门 GPU 用量",
        "等待原因",
        "已准入",
        "排队中",
        "保障配额 4，已用 8，借用 4；资源池共 8；等待 1",
        "<td>成员</td>",
    ]:
        assert text in html, text
    assert "Welcome" not in html and "My recent jobs" not in html


def test_the_submit_form_labels_are_chinese_and_english_stays_exact(chinese):
    html = page(chinese, "/jobs/new/")
    for label in [
        "名称",
        "部门",
        "集群",
        "代码地址",
        "代码版本",
        "启动命令",
        "镜像",
        "依赖包",
        "工作进程数",
        "每个工作进程的 GPU 数",
        "GPU 类型",
        "优先级",
        "存储挂载",
        "环境变量",
        "TensorBoard",
        "最长运行时间",
    ]:
        assert f">{label}</label>" in html, label
    assert '<button type="submit">提交任务</button>' in html
    switch(chinese, "en")
    html = page(chinese, "/jobs/new/")
    assert ">Code URL</label>" in html and '<button type="submit">Submit job</button>' in html


def test_a_rejected_submission_explains_itself_in_chinese(chinese):
    response = chinese.post(
        "/jobs/new/",
        {"name": "x", "department": "vision", "code_url": "", "command": "", "mounts": "no-colon", "env": "NOCOLON"},
    )
    html = response.content.decode()
    assert "任务未提交。请修改下方标出的字段。" in html
    assert "第 1 行：应写成 存储名:/路径（只读则加 :ro），而不是 &#x27;no-colon&#x27;。" in html
    assert "<li>该字段是必填项。</li>" in html  # Django's own messages come in Chinese too


def test_the_jobs_list_and_job_page_speak_chinese(chinese, world):
    big = submit(world.alice, name="big", gpus_per_worker=8)
    waiting = submit(world.alice, name="waiting")
    html = page(chinese, "/jobs/")
    for text in [
        "提交任务",
        "我的全部部门",
        "任意状态",
        "筛选",
        "在 TensorBoard 中对比",
        "已准入",
        "排队中",
        "第 1 页，共 1 页（2 个任务）",
    ]:
        assert text in html, text
    html = page(chinese, f"/jobs/{big.pk}/")
    for text in [
        "克隆",
        "取消任务",
        "资源分配",
        "时间线",
        "排队中 → <strong>已准入</strong>",
        "日志",
        "跟踪",
        "打开 TensorBoard",
    ]:
        assert text in html, text
    html = page(chinese, f"/jobs/{waiting.pk}/")
    assert "队列第 1 位" in html and "尚未分配" in html
    assert (
        f'<strong>等待原因：</strong> <span class="reason" title="{waiting.pending_reason}">'
        f"{REASONS[waiting.pending_reason][0]}</span>" in html
    )


def test_the_queue_names_why_jobs_wait_in_chinese_and_english(chinese, world):
    submit(world.alice, name="big", gpus_per_worker=8)
    waiting = submit(world.alice, name="waiting")
    zh, en = REASONS[waiting.pending_reason]
    assert f'<span class="reason" title="{waiting.pending_reason}">{zh}</span>' in page(chinese, "/queue/")
    switch(chinese, "en")
    assert f'<span class="reason" title="{waiting.pending_reason}">{en}</span>' in page(chinese, "/queue/")


def test_the_console_and_tokens_pages_speak_chinese(client, world):
    client.force_login(world.carol)
    switch(client, "zh-hans")
    html = page(client, "/console/")
    assert "管理控制台" in html and "你管理的部门" in html and "成员与角色" in html
    html = page(client, "/console/departments/vision/quotas/")
    assert "配额与实时用量" in html and "保障配额" in html and "借用上限" in html
    html = page(client, "/console/usage/")
    assert "GPU 用量" in html and "下载 CSV：" in html
    html = page(client, "/tokens/")
    assert "API 令牌" in html and "创建令牌" in html and "你还没有 API 令牌" in html
    response = client.post("/tokens/", {"name": ""})
    assert "请为令牌命名" in response.content.decode()


# --- The catalogues --------------------------------------------------------------------------


def po_entries(path: Path) -> dict[tuple[str | None, str], dict]:
    """{(msgctxt, msgid): {"plural": msgid_plural, "strs": [msgstr ...], "fuzzy": bool}}; header and obsolete left out."""
    entries, entry, field = {}, None, None

    def close():
        if entry and entry.get("msgid"):
            key = (entry.get("msgctxt"), entry["msgid"])
            strs = [entry[k] for k in sorted(k for k in entry if k.startswith("msgstr"))]
            entries[key] = {"plural": entry.get("msgid_plural"), "strs": strs, "fuzzy": entry.get("fuzzy", False)}

    for line in path.read_text(encoding="utf-8").splitlines() + [""]:
        if not line.strip() or line.startswith("#~"):
            close()
            entry, field = None, None
            continue
        if line.startswith("#"):
            if line.startswith("#,") and "fuzzy" in line:
                entry = entry or {}
                entry["fuzzy"] = True
            continue
        keyword, _, rest = line.partition(" ")
        if line.startswith('"'):
            entry[field] += ast.literal_eval(line)
            continue
        if keyword in ("msgctxt", "msgid") and entry and any(k.startswith("msgstr") for k in entry):
            close()
            entry = None
        entry = entry if entry is not None else {}
        field = keyword
        entry[field] = ast.literal_eval(rest)
    return entries


def source_messages() -> tuple[set, set]:
    """(context, msgid) of every marked string: (templates and Python, portal.js)."""
    call = re.compile(r"\b(n?p?gettext(?:_lazy)?)\(((?:u?'(?:[^'\\]|\\.)*'|u?\"(?:[^\"\\]|\\.)*\"|,\s*)+)")
    django = set()
    for template in (path for folder in TEMPLATES for path in folder.rglob("*.html")):
        for name, args in call.findall(templatize(template.read_text(encoding="utf-8"), origin=str(template))):
            strings = ast.literal_eval(f"[{args.rstrip(', ')}]")
            django.add((strings[0], strings[1]) if name.startswith(("pgettext", "npgettext")) else (None, strings[0]))
    for folder in PYTHON_SOURCES:
        for module in (ROOT / folder).rglob("*.py"):
            for node in ast.walk(ast.parse(module.read_text(encoding="utf-8"))):
                if not isinstance(node, ast.Call) or not node.args:
                    continue
                name = getattr(node.func, "id", getattr(node.func, "attr", ""))
                strings = [
                    arg.value for arg in node.args if isinstance(arg, ast.Constant) and isinstance(arg.value, str)
                ]
                if name in ("_", "gettext", "gettext_lazy", "ngettext", "ngettext_lazy") and strings:
                    django.add((None, strings[0]))
                elif name in ("pgettext", "pgettext_lazy", "npgettext", "npgettext_lazy") and len(strings) >= 2:
                    django.add((strings[0], strings[1]))
    script = {
        (None, ast.literal_eval(text))
        for text in re.findall(r"\bgettext\((\"(?:[^\"\\]|\\.)*\")\)", SCRIPT.read_text())
    }
    return django, script


@pytest.mark.parametrize("domain", ["django", "djangojs"])
def test_every_entry_is_translated_and_the_compiled_catalogue_matches(domain):
    entries = po_entries(CATALOGUES / f"{domain}.po")
    assert entries
    untranslated = [key for key, entry in entries.items() if entry["fuzzy"] or not all(entry["strs"])]
    assert untranslated == []
    placeholders = re.compile(r"%\(\w+\)[sdr]")
    mismatched = [
        key
        for key, entry in entries.items()
        if any(sorted(placeholders.findall(s)) != sorted(placeholders.findall(key[1])) for s in entry["strs"])
    ]
    assert mismatched == []
    with (CATALOGUES / f"{domain}.mo").open("rb") as compiled:
        mo = gettext.GNUTranslations(compiled)
    stale = []
    for (context, msgid), entry in entries.items():
        if entry["plural"] is not None:
            found = [
                mo.npgettext(context, msgid, entry["plural"], n) if context else mo.ngettext(msgid, entry["plural"], n)
                for n in (1, 2)
            ]
            expected = [entry["strs"][0]] * 2  # Chinese has one plural form
        else:
            found = mo.pgettext(context, msgid) if context else mo.gettext(msgid)
            expected = entry["strs"][0]
        if found != expected:
            stale.append(msgid)
    assert stale == [], "run manage.py compilemessages: the .mo is older than the .po"


def test_every_marked_string_of_the_portal_is_in_a_catalogue():
    django, script = source_messages()
    assert (
        (None, "Submit job") in django and ("job status", "queued") in django and (None, "Following the log…") in script
    )
    assert sorted(django - set(po_entries(CATALOGUES / "django.po"))) == [], "run manage.py makemessages"
    assert sorted(script - set(po_entries(CATALOGUES / "djangojs.po"))) == [], "run manage.py makemessages -d djangojs"
