"""The hostile job (tests/security/conftest.py) on the network: the broker and the datastores on the host's
loopback, and another department's TensorBoard (reaching it, and signalling its process)."""

from __future__ import annotations

import sys

import pytest

from tests.security.hostile import refused, stolen

# The database mark makes pytest-django create the test database even when only scenario tests are selected.
pytestmark = [
    pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the local executor needs Linux"),
    pytest.mark.django_db,
]


def test_4_it_cannot_reach_the_broker_nor_the_datastores(attack):
    network, files = attack.verdict["network"], attack.verdict["broker_files"]
    assert network or files, "nothing to attack: neither a datastore on loopback nor the embedded broker"
    if attack.sandboxed:
        assert all(refused(r) for r in network.values()), network
        assert all(refused(r, "ENOENT") for r in files.values()), files
    else:
        assert all(r["ok"] for target, r in network.items() if target.startswith("127.0.0.1:")), network
        assert all(stolen(r) for r in files.values()), files


def test_5_it_cannot_reach_nor_kill_another_departments_tensorboard(attack):
    board = attack.verdict["board"]
    if attack.sandboxed:
        assert refused(board["connect"], "ECONNREFUSED"), board
        assert refused(board["kill"], "ESRCH"), board
        assert attack.board_alive_after, "alice's TensorBoard was killed"
        assert attack.board_proxy_status == 200
    else:
        assert board["connect"]["ok"] and board["kill"]["ok"], board
        assert not attack.board_alive_after
