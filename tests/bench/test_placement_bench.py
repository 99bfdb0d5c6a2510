"""bench.placement on a tiny synthetic trace: the JSON keys and figures in [0, 100]."""

from __future__ import annotations

import json

import pytest

from bench import placement

NODES = "sn,cpu_milli,memory_mib,gpu,model\n" + "".join(
    f"node-{i},{32000 if i % 2 else 64000},131072,{2 if i % 3 else 4},{'T4' if i % 2 else 'V100'}\n" for i in range(60)
)
PODS = (
    "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,deletion_time,scheduled_time\n"
    + "".join(
        f"pod-{i:03d},{4000 + 1000 * (i % 5)},8192,{[1, 1, 1, 0, 2][i % 5]},{[1000, 470, 250, 0, 1000][i % 5]},"
        f"{'T4' if i % 7 == 0 else ''},LS,Running,0,10,0\n"
        for i in range(40)
    )
)


@pytest.fixture
def trace(tmp_path):
    (tmp_path / "nodes.csv").write_text(NODES)
    (tmp_path / "pods.csv").write_text(PODS)
    return tmp_path


@pytest.mark.parametrize("policy", placement.POLICIES)
def test_one_percentage(trace, policy, capsys):
    out = trace / "out.json"
    summary = placement.main(
        [
            "--pods",
            str(trace / "pods.csv"),
            "--nodes",
            str(trace / "nodes.csv"),
            "--arrived-pct",
            "100",
            "--seeds",
            "42-44",
            "--policy",
            policy,
            "--json",
            str(out),
            "--workers",
            "1",
        ]
    )
    assert json.loads(out.read_text()) == summary
    assert set(summary) == {"gpu_alloc_pct_mean", "gpu_alloc_pct_std", "per_seed"}
    assert set(summary["per_seed"]) == {"42", "43", "44"}
    assert 0 <= summary["gpu_alloc_pct_mean"] <= 100 and summary["gpu_alloc_pct_std"] >= 0
    assert all(0 <= v <= 100 for v in summary["per_seed"].values())
    out = capsys.readouterr().out
    assert "baseline not found" in out
    live = {"portal": "fragmentation"}.get(policy, policy)
    if live in ("fragmentation", "binpack", "spread"):
        assert f"measures: the live quotas.scheduler placement policy '{live}'" in out
    else:
        assert f"measures: the protocol baseline '{policy}'" in out


def test_portal_is_the_live_fragmentation_policy(trace):
    args = [
        "--pods",
        str(trace / "pods.csv"),
        "--nodes",
        str(trace / "nodes.csv"),
        "--seeds",
        "42-43",
        "--workers",
        "1",
    ]
    assert placement.main([*args, "--policy", "portal"]) == placement.main([*args, "--policy", "fragmentation"])


def test_several_percentages(trace):
    summary = placement.main(
        [
            "--pods",
            str(trace / "pods.csv"),
            "--nodes",
            str(trace / "nodes.csv"),
            "--arrived-pct",
            "80,90,100,110,130",
            "--seeds",
            "42,45",
            "--policy",
            "portal",
            "--workers",
            "1",
        ]
    )
    assert set(summary) == {"80", "90", "100", "110", "130"}
    for figures in summary.values():
        assert set(figures) == {"gpu_alloc_pct_mean", "gpu_alloc_pct_std", "per_seed"}
        assert set(figures["per_seed"]) == {"42", "45"}
        assert all(v is None or 0 <= v <= 100 for v in figures["per_seed"].values())


def test_arguments_and_rounding():
    assert placement.parse_seeds("42-45") == [42, 43, 44, 45]
    assert placement.parse_seeds("1,5,7-8") == [1, 5, 7, 8]
    assert placement.parse_pcts("80,100") == [80, 100]
    assert placement.round_half_even(1005, 10) == 100 and placement.round_half_even(1015, 10) == 102
