"""What GPUs this host has: ``nvidia-smi`` when present, else a configured simulation."""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass


@dataclass(frozen=True)
class DetectedPool:
    gpu_type: str
    gpu_memory_gb: int
    gpus: int
    simulated: bool


SIMULATED = DetectedPool(gpu_type="sim", gpu_memory_gb=16, gpus=8, simulated=True)


def parse_nvidia_smi(output: str) -> list[DetectedPool]:
    """Parse ``nvidia-smi --query-gpu=name,memory.total --format=csv,noheader,nounits``.

    One pool per GPU model, e.g. "NVIDIA A100-SXM4-80GB, 81920" -> A100-SXM4-80GB, 80 GB.
    """
    counts: dict[tuple[str, int], int] = {}
    for line in output.splitlines():
        if not line.strip():
            continue
        name, _, memory = line.rpartition(",")
        gpu_type = name.strip().removeprefix("NVIDIA ").replace(" ", "-") or "gpu"
        memory_gb = round(int(memory.strip()) / 1024)
        counts[(gpu_type, memory_gb)] = counts.get((gpu_type, memory_gb), 0) + 1
    return [DetectedPool(t, m, n, simulated=False) for (t, m), n in sorted(counts.items())]


def detect_local_gpus() -> list[DetectedPool]:
    binary = shutil.which("nvidia-smi")
    if binary:
        try:
            result = subprocess.run(
                [binary, "--query-gpu=name,memory.total", "--format=csv,noheader,nounits"],
                capture_output=True,
                text=True,
                timeout=20,
                check=True,
            )
            pools = parse_nvidia_smi(result.stdout)
            if pools:
                return pools
        except (subprocess.SubprocessError, OSError, ValueError):
            pass
    return [SIMULATED]
