"""A model server speaking the KServe V1 protocol, one process per deployment variant.

    python -m serving.backends.server --model-name NAME --artifact PATH --port P

- ``GET /v1/models/<name>``            -> ``{"name": ..., "ready": true}`` (readiness)
- ``POST /v1/models/<name>:predict``   ``{"instances": [...]}`` -> ``{"predictions": [...]}``
- ``GET /``                            -> ``{"status": "alive"}`` (liveness)

Loads scikit-learn / joblib artifacts, and only from the portal's artifact store (``--store`` or
PORTAL_ARTIFACT_ROOT): a path outside it is refused before anything is unpickled, since unpickling runs code.
A bare ASGI app on uvicorn (uvloop + httptools when installed): no framework between the socket and the
model, because this process is on every prediction's path. Predictions run on the event loop while they
are quick (a small sklearn model answers in tens of microseconds, a thread hop costs more) and move to a
thread pool once they are measured to be slow.

``--delay-ms`` and ``--fail-rate`` inject latency and errors (tests of shadows and canary rollbacks).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

SLOW_SECONDS = 0.002  # mean predict time above which inference leaves the event loop
ARTIFACT_NAMES = ("model.joblib", "model.pkl")
MAX_BODY = 64 * 1024 * 1024


class Refused(Exception):
    pass


def resolve_artifact(artifact: str, store: str | None) -> Path:
    """The model file to load, when it lies inside the store; Refused otherwise."""
    if not store:
        raise Refused("No artifact store given: set PORTAL_ARTIFACT_ROOT or pass --store.")
    root = Path(store).resolve()
    path = Path(artifact).resolve()
    if not path.is_relative_to(root):
        raise Refused(f"{artifact} is outside the portal's artifact store {root}; only registered versions are served.")
    if path.is_dir():
        found = [path / name for name in ARTIFACT_NAMES if (path / name).is_file()] or sorted(path.glob("*.joblib"))
        if not found:
            raise Refused(f"{artifact} is a folder without a model.joblib or model.pkl.")
        path = found[0].resolve()
        if not path.is_relative_to(root):
            raise Refused(f"{artifact} links outside the portal's artifact store.")
    if not path.is_file():
        raise Refused(f"{artifact} does not exist.")
    return path


def load_model(path: Path):
    import joblib

    model = joblib.load(path)
    if not hasattr(model, "predict"):
        raise Refused(f"{path.name} holds a {type(model).__name__}, which has no predict().")
    return model


class ModelApp:
    """The ASGI application: three routes, JSON in and out."""

    def __init__(self, name: str, model, *, delay_ms: float = 0, fail_rate: float = 0, threads: int = 4):
        self.name = name
        self.model = model
        self.delay = delay_ms / 1000
        self.fail_rate = fail_rate
        self.pool = ThreadPoolExecutor(max_workers=threads, thread_name_prefix="predict")
        self.mean_seconds = 0.0
        self.ready_path = f"/v1/models/{name}"
        self.predict_path = f"/v1/models/{name}:predict"
        self.ready_body = json.dumps({"name": name, "ready": True}).encode()

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":  # uvicorn runs with lifespan="off"
            return
        path, method = scope["path"], scope["method"]
        if path == self.predict_path:
            if method != "POST":
                return await _reply(send, 405, {"error": "Use POST."})
            body = await _body(receive)
            if body is None:
                return await _reply(send, 413, {"error": "The request body is too large."})
            status, payload = await self.predict(body)
            return await _reply(send, status, payload)
        if path == self.ready_path and method == "GET":
            return await _reply(send, 200, self.ready_body)
        if path == "/" and method == "GET":
            return await _reply(send, 200, {"status": "alive"})
        if path.startswith("/v1/models/"):
            return await _reply(send, 404, {"error": f"This server serves model {self.name!r} only."})
        return await _reply(send, 404, {"error": "Not found."})

    async def predict(self, body: bytes) -> tuple[int, dict]:
        try:
            instances = json.loads(body)["instances"]
            if not isinstance(instances, list) or not instances:
                raise ValueError
        except (ValueError, KeyError, TypeError):
            return 400, {"error": 'Send {"instances": [...]} with at least one instance.'}
        if self.delay:
            await asyncio.sleep(self.delay)
        if self.fail_rate and random.random() < self.fail_rate:
            return 500, {"error": "Injected failure (--fail-rate)."}
        try:
            if self.mean_seconds > SLOW_SECONDS:
                predictions = await asyncio.get_running_loop().run_in_executor(self.pool, self._predict, instances)
            else:
                predictions = self._predict(instances)
        except Exception as exc:  # noqa: BLE001 - the model's own complaint (wrong shape, wrong type) is the caller's to fix
            return 400, {"error": f"The model could not predict: {exc}"}
        return 200, {"predictions": predictions}

    def _predict(self, instances: list):
        started = time.perf_counter()
        result = self.model.predict(instances)
        self.mean_seconds = 0.9 * self.mean_seconds + 0.1 * (time.perf_counter() - started)
        return result.tolist() if hasattr(result, "tolist") else list(result)


async def _body(receive) -> bytes | None:
    chunks, size = [], 0
    while True:
        message = await receive()
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > MAX_BODY:
            return None
        chunks.append(chunk)
        if not message.get("more_body"):
            return b"".join(chunks)


async def _reply(send, status: int, payload) -> None:
    body = payload if isinstance(payload, bytes) else json.dumps(payload, separators=(",", ":")).encode()
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())],
        }
    )
    await send({"type": "http.response.body", "body": body})


def _installed(module: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(module) is not None


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model-name", required=True)
    parser.add_argument("--artifact", required=True)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--store", default=os.environ.get("PORTAL_ARTIFACT_ROOT"))
    parser.add_argument("--threads", type=int, default=4)
    parser.add_argument("--delay-ms", type=float, default=0)
    parser.add_argument("--fail-rate", type=float, default=0)
    args = parser.parse_args(argv)
    try:
        model = load_model(resolve_artifact(args.artifact, args.store))
    except Refused as exc:
        print(f"refused: {exc}", file=sys.stderr, flush=True)
        raise SystemExit(2) from None
    except Exception as exc:  # noqa: BLE001 - unpickling errors, a missing library of the model
        print(f"cannot load {args.artifact}: {exc.__class__.__name__}: {exc}", file=sys.stderr, flush=True)
        raise SystemExit(3) from None
    import uvicorn

    app = ModelApp(args.model_name, model, delay_ms=args.delay_ms, fail_rate=args.fail_rate, threads=args.threads)
    print(f"serving {args.model_name} from {args.artifact} on http://{args.host}:{args.port}", flush=True)
    uvicorn.run(
        app,
        host=args.host,
        port=args.port,
        log_level="warning",
        access_log=False,
        lifespan="off",
        loop="uvloop" if _installed("uvloop") else "asyncio",
        http="httptools" if _installed("httptools") else "h11",
        timeout_keep_alive=75,
    )


if __name__ == "__main__":
    main()
