"""The hostile job (tests/security/conftest.py) and the portal's processes: their secrets and environ, what it
sees of the host's processes, and the daemons it leaves, which must not outlive it (nor keep its GPUs)."""

from __future__ import annotations

import json
import os
import sys

import pytest

from tests.security import hostile
from tests.security.hostile import refused, stolen

# The database mark makes pytest-django create the test database even when only scenario tests are selected.
pytestmark = [
    pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the local executor needs Linux"),
    pytest.mark.django_db,
]


def test_1_it_cannot_read_the_portals_secrets_nor_see_its_processes(attack):
    v = attack.verdict
    assert attack.attack["status"] == "succeeded", attack.attack_log
    assert "demo_password" in attack.hints["secret_files"]
    if attack.sandboxed:
        assert all(refused(r, "ENOENT") for r in v["environ"].values()), v["environ"]
        assert not any(stolen(r) for r in v["secret_files"].values()), v["secret_files"]
        assert v["processes"] and all("/portal/init.py" in p or "probe.py" in p for p in v["processes"]), v["processes"]
        if os.geteuid() == 0:  # (an ordinary portal user gets a user namespace and keeps its uid)
            uids = json.loads((hostile.executor_root() / "uids.json").read_text())
            assert v["whoami"]["uid"] == uids["nlp"] != os.geteuid(), "the job runs as its department's uid"
    else:
        assert all(r["ok"] for r in v["environ"].values()), v["environ"]
        assert "DATABASE_URL" in v["environ"]["worker"]["value"]
        assert all(stolen(r) for r in v["secret_files"].values()), v["secret_files"]
        assert any("celery" in p for p in v["processes"]), v["processes"]


def test_6_nothing_it_starts_outlives_it_and_its_gpus_come_back(attack):
    assert attack.verdict["daemons_started"] == {"setsid": True, "chain": True}
    assert attack.nlp_in_use_after_attack == 0
    assert attack.allocated_at_end == 0
    # Sandboxed, the PID namespace ends with the launcher; unisolated, the launcher is the subreaper of whatever
    # the workers leave and the runner lets it sweep them, generation by generation, before it goes. (Checked to
    # fail: with that sweep off, the chain's end and the setsid daemon outlive the job, writing on.)
    assert attack.left_behind == [], attack.left_behind
    assert not attack.heartbeat_went_on
