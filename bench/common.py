"""What every benchmark shares: percentiles and printing / saving its report."""

from __future__ import annotations

import json
from pathlib import Path


def percentile(values: list[float], q: float) -> float:
    """Nearest-rank percentile, ``q`` in [0, 1]."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def emit(report: dict, *, summary: str, json_path: Path | None) -> dict:
    """Print the report and a one-line summary against its baseline; save it as JSON when asked."""
    print(json.dumps(report, indent=2))
    print(summary)
    if json_path:
        json_path.write_text(json.dumps(report, indent=2))
    return report
