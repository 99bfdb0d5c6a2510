"""quotas.scheduler.compiled: the compiled core is used only where it was built from exactly these sources, for this
Python, and not switched off; anything else runs the sources (and a stale build says so)."""

from __future__ import annotations

import json
import logging
import sys

import pytest

from quotas.scheduler import compiled


@pytest.fixture
def build(tmp_path, monkeypatch):
    """An empty build folder in place of .build/scheduler; write(manifest) puts a manifest in it."""
    monkeypatch.setattr(compiled, "BUILD", tmp_path)
    monkeypatch.delenv(compiled.SWITCH, raising=False)

    def write(sources=None, tag=None):
        manifest = {"tag": compiled.python_tag() if tag is None else tag, "sources": compiled.source_hashes()}
        manifest["sources"].update(sources or {})
        (tmp_path / compiled.MANIFEST).write_text(json.dumps(manifest))

    return write


def test_a_build_of_exactly_these_sources_for_this_python_is_used(build):
    build()
    assert compiled.usable()


def test_without_a_build_the_sources_run(build):
    assert not compiled.usable()


def test_a_build_of_other_sources_is_not_used_and_the_log_names_what_changed(build, caplog):
    build(sources={"room.py": "0" * 64})
    with caplog.at_level(logging.WARNING, logger=compiled.__name__):
        assert not compiled.usable()
    assert "room.py" in caplog.text and "make install" in caplog.text


def test_a_build_for_another_python_is_not_used(build, caplog):
    build(tag="cpython-312 .cpython-312-x86_64-linux-gnu.so")
    with caplog.at_level(logging.WARNING, logger=compiled.__name__):
        assert not compiled.usable()
    assert "another Python" in caplog.text


def test_the_switch_runs_the_sources_even_with_a_good_build(build, monkeypatch):
    build()
    monkeypatch.setenv(compiled.SWITCH, "0")
    assert not compiled.usable()


def test_an_unreadable_manifest_runs_the_sources(build, tmp_path):
    (tmp_path / compiled.MANIFEST).write_text("{not json")
    assert not compiled.usable()


def test_where_it_is_used_its_folders_come_first_on_the_packages_path(build, tmp_path, monkeypatch):
    monkeypatch.setattr(compiled, "_state", {"active": True})
    monkeypatch.setattr(sys, "path", list(sys.path))
    path = ["/src/quotas/scheduler"]
    compiled.use(path)
    compiled.use(path)  # a second import changes nothing
    assert path == [str(tmp_path / "quotas" / "scheduler" / ""), "/src/quotas/scheduler"]
    placement = ["/src/quotas/scheduler/placement"]
    compiled.use(placement, "placement")
    assert placement[0] == str(tmp_path / "quotas" / "scheduler" / "placement")
    assert sys.path.count(str(tmp_path)) == 1  # the modules' shared library


def test_where_it_is_not_used_the_path_stays_as_it_is(monkeypatch):
    monkeypatch.setattr(compiled, "_state", {"active": False})
    path = ["/src/quotas/scheduler"]
    compiled.use(path)
    assert path == ["/src/quotas/scheduler"]
