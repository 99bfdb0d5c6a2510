"""What the router adds: the same model server called directly and through /serve/<deployment>/predict.

Starts the real portal (uvicorn, a Celery worker and beat, as `make run` does) on a fresh data root with
SQLite, trains a small scikit-learn model, registers it (copied into the artifact store) and deploys it;
the portal starts the model server. Then the server is called directly (KServe V1) and through the
router, interleaved in rounds of ROUND requests, each mode at the given concurrency over keep-alive
connections of a lean HTTP/1.1 client (so that the client's own cost stays small and equal for both).

    python -m bench.router [--requests 5000] [--concurrency 32] [--json OUT.json]

Goal (issue 6): added p50 <= 1 ms and router_rps >= 0.8 x direct_rps.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.common import emit, percentile
from bench.job_start import Api, _free_port
from bench.web_server import APPLICATION, uvicorn_argv

ROOT = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent
ROUND = 250
GOAL_ADDED_P50_MS = 1.0
GOAL_RPS_RATIO = 0.8
PASSWORD = "bench-password-1"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--requests", type=int, default=5000, help="per mode")
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--json", type=Path)
    parser.add_argument(
        "--asgi-app",
        default=APPLICATION,
        help="the ASGI application uvicorn serves (to compare front ends; PYTHONPATH reaches it)",
    )
    args = parser.parse_args()
    data_root = Path(tempfile.mkdtemp(prefix="portal-bench-"))
    env = {k: v for k, v in os.environ.items() if k not in {"DATABASE_URL", "REDIS_URL"}}
    env.update(
        PORTAL_DATA_ROOT=str(data_root),
        PORTAL_DEMO_PASSWORD=PASSWORD,
        PORTAL_LOG_LEVEL="WARNING",
        PORTAL_THROTTLE_USER="1000000/minute",
        PORTAL_ARTIFACT_IMPORT_DIRS=str(data_root / "outputs"),
    )
    processes = []
    try:
        manage = [sys.executable, "manage.py"]
        for argv in (["migrate", "-v0"], ["migrate", "--database", "channels", "-v0"], ["demo"]):
            subprocess.run(manage + argv, cwd=ROOT, env=env, check=True, capture_output=True)
        artifact = _train(data_root / "outputs")
        port = _free_port()
        logs = open(data_root / "processes.log", "wb")  # noqa: SIM115
        for argv in (
            # No access log line per request, as in production behind a proxy that keeps its own.
            uvicorn_argv(port, args.asgi_app),
            [str(BIN / "celery"), "--app", "config", "worker", "--concurrency", "1", "--loglevel", "WARNING"],
            [str(BIN / "celery"), "--app", "config", "beat", "--loglevel", "WARNING"],
        ):
            processes.append(subprocess.Popen(argv, cwd=ROOT, env=env, stdout=logs, stderr=subprocess.STDOUT))
        api = Api(f"http://127.0.0.1:{port}")
        api.wait_up()
        api.token = api.post("/api/v1/auth/token/", {"username": "alice", "password": PASSWORD})["token"]
        api.post("/api/v1/models/", {"name": "bench-model", "department": "vision", "description": "bench.router"})
        api.post("/api/v1/models/bench-model/versions/", {"artifact_uri": f"file://{artifact}", "framework": "sklearn"})
        api.post(
            "/api/v1/deployments/",
            {
                "name": "bench",
                "department": "vision",
                "model": "bench-model",
                "strategy": "ab",
                "variants": [{"name": "a", "version": 1, "weight": 100}],
            },
        )
        server_url = _wait_ready(api)
        direct = Target(server_url, "/v1/models/bench-model:predict", {})
        routed = Target(f"http://127.0.0.1:{port}", "/serve/bench/predict", {"Authorization": f"Token {api.token}"})
        report = asyncio.run(_measure(direct, routed, requests=args.requests, concurrency=args.concurrency))
    finally:
        for process in processes:
            process.terminate()
        for process in processes:
            process.wait(timeout=30)
        _stop_model_servers(data_root)
        shutil.rmtree(data_root, ignore_errors=True)
    ratio = report["router_rps"] / report["direct_rps"]
    report |= {"rps_ratio": round(ratio, 3), "goal_added_p50_ms": GOAL_ADDED_P50_MS, "goal_rps_ratio": GOAL_RPS_RATIO}
    verdicts = [
        ("meets" if report["added_p50_ms"] <= GOAL_ADDED_P50_MS else "MISSES")
        + f" added p50 <= {GOAL_ADDED_P50_MS} ms",
        ("meets" if ratio >= GOAL_RPS_RATIO else "MISSES") + f" router_rps >= {GOAL_RPS_RATIO} x direct_rps",
    ]
    emit(
        report,
        json_path=args.json,
        summary=f"added p50 {report['added_p50_ms']} ms, p99 {report['added_p99_ms']} ms; router {report['router_rps']} rps "
        f"vs direct {report['direct_rps']} rps ({ratio:.2f}x): {verdicts[0]}; {verdicts[1]}",
    )


def _train(folder: Path) -> Path:
    import joblib
    import numpy as np
    from sklearn.linear_model import LogisticRegression

    folder.mkdir(parents=True)
    rng = np.random.RandomState(0)
    x = rng.rand(1000, 4)
    y = (x @ [1.0, -2.0, 0.5, 0.3] > 0).astype(int)
    joblib.dump(LogisticRegression().fit(x, y), folder / "model.joblib")
    return folder / "model.joblib"


def _wait_ready(api: Api, timeout: float = 60) -> str:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        variant = api.get("/api/v1/deployments/bench/")["variants"][0]
        if variant["server"]["status"] == "ready":
            return variant["server"]["url"]
        time.sleep(0.2)
    raise SystemExit(f"the model server did not become ready: {variant['server']}")


def _stop_model_servers(data_root: Path) -> None:
    """The portal's model servers are detached (they outlive the worker that started them): end them here."""
    from serving.backends.local import LocalServingBackend

    backend = LocalServingBackend(data_root / "serving")
    for process in backend.running().values():
        backend.stop(process)


class Target:
    def __init__(self, base: str, path: str, headers: dict):
        host, port = base.removeprefix("http://").rsplit(":", 1)
        self.host, self.port = host, int(port)
        body = json.dumps({"instances": [[0.2, 0.1, 0.7, 0.4]]}).encode()
        head = "".join(f"{k}: {v}\r\n" for k, v in headers.items())
        self.request = (
            f"POST {path} HTTP/1.1\r\nHost: {host}:{port}\r\nContent-Type: application/json\r\n{head}"
            f"Content-Length: {len(body)}\r\n\r\n"
        ).encode() + body


class Connection:
    """One keep-alive HTTP/1.1 connection that sends the same request again and again."""

    def __init__(self, target: Target):
        self.target = target
        self.reader = self.writer = None

    async def call(self) -> int:
        if self.writer is None:
            self.reader, self.writer = await asyncio.open_connection(self.target.host, self.target.port)
        self.writer.write(self.target.request)
        head = await self.reader.readuntil(b"\r\n\r\n")
        status = int(head[9:12])
        length = 0
        for line in head.split(b"\r\n"):
            if line[:15].lower() == b"content-length:":
                length = int(line[15:])
        await self.reader.readexactly(length)
        return status

    async def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
            await self.writer.wait_closed()


async def _round(connections: list[Connection], count: int, latencies: list[float]) -> float:
    remaining = [count]

    async def worker(connection: Connection):
        while remaining[0] > 0:
            remaining[0] -= 1
            started = time.perf_counter()
            status = await connection.call()
            latencies.append((time.perf_counter() - started) * 1000)
            if status != 200:
                raise SystemExit(f"a request failed with {status}")

    started = time.perf_counter()
    await asyncio.gather(*(worker(c) for c in connections))
    return time.perf_counter() - started


async def _measure(direct: Target, routed: Target, *, requests: int, concurrency: int) -> dict:
    pools = {
        name: [Connection(target) for _ in range(concurrency)]
        for name, target in (("direct", direct), ("router", routed))
    }
    for pool in pools.values():  # warm-up: connections, the router's routing table and token cache
        await _round(pool, concurrency * 4, [])
    latencies: dict[str, list[float]] = {"direct": [], "router": []}
    seconds = {"direct": 0.0, "router": 0.0}
    done = 0
    while done < requests:
        count = min(ROUND, requests - done)
        for name in ("direct", "router"):
            seconds[name] += await _round(pools[name], count, latencies[name])
        done += count
    for pool in pools.values():
        for connection in pool:
            await connection.close()
    p50 = {name: statistics.median(values) for name, values in latencies.items()}
    p99 = {name: percentile(values, 0.99) for name, values in latencies.items()}
    return {
        "requests_per_mode": requests,
        "concurrency": concurrency,
        "direct_rps": round(requests / seconds["direct"], 1),
        "router_rps": round(requests / seconds["router"], 1),
        "direct_p50_ms": round(p50["direct"], 3),
        "router_p50_ms": round(p50["router"], 3),
        "direct_p99_ms": round(p99["direct"], 3),
        "router_p99_ms": round(p99["router"], 3),
        "added_p50_ms": round(p50["router"] - p50["direct"], 3),
        "added_p99_ms": round(p99["router"] - p99["direct"], 3),
    }


if __name__ == "__main__":
    main()
