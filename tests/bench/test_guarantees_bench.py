"""Smoke run of bench.guarantees on a cut ITP trace."""

import json
from pathlib import Path

from bench import guarantees

TRACES = Path(__file__).resolve().parents[3] / "shared" / "data" / "traces" / "microsoft-itp"


def test_sweep_runs_on_a_cut_trace(tmp_path: Path, capsys) -> None:
    for cluster in ("01", "03"):
        lines = (TRACES / f"cluster{cluster}.csv").read_text().splitlines()[:60]
        (tmp_path / f"cluster{cluster}.csv").write_text("\n".join(lines) + "\n")
    out = tmp_path / "sweep.json"
    rows = guarantees.main(
        [
            "--dir",
            str(tmp_path),
            "--clusters",
            "01,03",
            "--sizes",
            "64",
            "--seeds",
            "1",
            "--combos",
            "all",
            "--json",
            str(out),
        ]
    )
    assert [r["config"] for r in rows] == ["01@64/s1", "03@64/s1", "01+03@64/s1"]
    assert json.loads(out.read_text()) == rows
    for row in rows:
        assert row["jobs"] > 0
        assert sum(row["violations_by_reason"].values()) == row["violations"]
    assert "configurations" in capsys.readouterr().out


def test_combos() -> None:
    assert guarantees.combos("singles", ["01", "02"]) == [("01",), ("02",)]
    assert guarantees.combos("pooled", ["01", "02"]) == [("01", "02")]
    assert guarantees.combos("01+02,03", ["01"]) == [("01", "02"), ("03",)]
