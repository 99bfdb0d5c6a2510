"""The router, end to end: the real portal (uvicorn) in front of real model servers.

Requests go over HTTP to /serve/<deployment>/predict with an async httpx client; the router's counters
reach the database through its periodic flush, so the metrics are polled with a deadline.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections import Counter

import httpx
import pytest

from serving import services
from serving.models import Deployment
from tests.models_registry.test_serving import INSTANCES, ab, create, poll, portal, register  # noqa: F401 - fixture
from tests.processes import Processes
from tests.test_metrics import scrape, value

LATENCY = "portal_router_latency_seconds"

pytestmark = pytest.mark.django_db(transaction=True)


FAST_PORTAL = """from config.asgi import application as portal
from serving.router import asgi_fast_path

application = asgi_fast_path(portal)
"""


def start_web(tmp_path, app: str) -> tuple[Processes, str]:
    """uvicorn serving the portal, or the portal behind the router's ASGI fast path (router.asgi_fast_path)."""
    processes = Processes(tmp_path)
    if app == "django":
        port = processes.web()
    else:
        (tmp_path / "fast_portal.py").write_text(FAST_PORTAL)
        port = processes.web({"PYTHONPATH": str(tmp_path)}, app="fast_portal:application")
    return processes, f"http://127.0.0.1:{port}"


@pytest.fixture
def web(portal, tmp_path):
    """The portal's web process (uvicorn) on the test database; its base URL."""
    processes, url = start_web(tmp_path, "django")
    yield url
    processes.stop()
    print(processes.logs())  # shown when the test failed


@pytest.fixture(params=["django", "fast"])
def any_web(request, portal, tmp_path):
    """The same through Django's views and through the ASGI fast path (router.asgi_fast_path)."""
    processes, url = start_web(tmp_path, request.param)
    yield url
    processes.stop()
    print(processes.logs())


def token(portal, user) -> dict:
    return {"Authorization": portal.api(user)._credentials["HTTP_AUTHORIZATION"]}


def call(web: str, deployment: str, headers: dict, *, count: int, concurrency: int = 16, keys=None, body=None) -> list:
    """``count`` predictions at ``concurrency``; [(status, json, seconds)] in the order they were sent."""

    async def run():
        results = [None] * count
        queue = list(range(count))
        async with httpx.AsyncClient(base_url=web, timeout=30) as client:

            async def worker():
                while queue:
                    index = queue.pop()
                    extra = {"X-Routing-Key": keys[index]} if keys else {}
                    started = time.perf_counter()
                    response = await client.post(
                        f"/serve/{deployment}/predict", json=body or {"instances": INSTANCES}, headers=headers | extra
                    )
                    results[index] = (response.status_code, response.json(), time.perf_counter() - started)

            await asyncio.gather(*(worker() for _ in range(concurrency)))
        return results

    return asyncio.run(run())


def metrics(portal, name: str) -> dict:
    return {
        v["variant"]: v for v in portal.api(portal.alice).get(f"/api/v1/deployments/{name}/metrics/").json()["variants"]
    }


def test_a_50_50_split_holds_within_statistical_tolerance_over_2000_requests(portal, web):
    register("iris", 1), register("iris", 2, flip=True)
    create(portal, ab("split", sticky=False))
    results = call(web, "split", token(portal, portal.alice), count=2000)
    assert {status for status, _, _ in results} == {200}
    split = Counter(body["variant"] for _, body, _ in results)
    # Binomial(2000, 0.5) has a standard deviation of 22.4: 4.5 of them either side.
    assert 900 <= split["a"] <= 1100, split
    for _, body, _ in results:
        assert body["predictions"] == ([1, 0] if body["variant"] == "a" else [0, 1])
        assert body["model_version"] == (1 if body["variant"] == "a" else 2) and len(body["request_id"]) == 32
    counted = poll(
        lambda: (m := metrics(portal, "split")) and m["a"]["requests"] + m["b"]["requests"] == 2000 and m,
        what="the router to flush its counters",
    )
    assert (counted["a"]["requests"], counted["a"]["errors"]) == (split["a"], 0)
    assert 0 < counted["a"]["latency_ms"]["p50"] <= counted["a"]["latency_ms"]["p99"]


def test_sticky_keys_always_land_on_the_same_variant(portal, any_web):
    web = any_web
    register("iris", 1), register("iris", 2)
    create(portal, ab("sticky"))
    keys = [f"user-{i % 100}" for i in range(400)]
    results = call(web, "sticky", token(portal, portal.alice), count=400, keys=keys)
    seen: dict[str, set] = {}
    for key, (status, body, _) in zip(keys, results, strict=True):
        assert status == 200
        seen.setdefault(key, set()).add(body["variant"])
    assert all(len(variants) == 1 for variants in seen.values())
    assert {variant for variants in seen.values() for variant in variants} == {"a", "b"}


def test_a_shadow_never_changes_the_answer_nor_adds_its_latency(portal, web):
    register("iris", 1), register("iris", 2, flip=True, tags={"fault.delay_ms": 1000})
    create(
        portal,
        {
            "name": "mirror",
            "department": "vision",
            "model": "iris",
            "strategy": "shadow",
            "variants": [
                {"name": "live", "version": 1, "weight": 100},
                {"name": "shadow", "version": 2, "weight": 0, "shadow": True},
            ],
        },
    )
    call(
        web, "mirror", token(portal, portal.alice), count=8, concurrency=4
    )  # the web process's first requests load its code
    results = call(web, "mirror", token(portal, portal.alice), count=60, concurrency=4)
    assert {(status, body["variant"], tuple(body["predictions"])) for status, body, _ in results} == {
        (200, "live", (1, 0))
    }
    slowest = max(seconds for _, _, seconds in results)
    assert slowest < 0.8, f"a response took {slowest:.3f} s: the shadow's 1 s delay leaked into it"
    assert sorted(seconds for _, _, seconds in results)[30] < 0.2
    seen = poll(
        lambda: (m := metrics(portal, "mirror")) and m["shadow"]["requests"] == 68 and m,
        what="the shadow's copies to be counted",
        timeout=30,
    )
    assert seen["shadow"]["agreement"] == {"compared": 68, "agreed": 0, "rate": 0.0}  # the flipped model disagrees
    # its 1 s is recorded (histogram buckets are ~18 % wide), apart from the primary's
    assert seen["shadow"]["latency_ms"]["p50"] >= 840 > 200 > seen["live"]["latency_ms"]["p99"]


def test_a_canary_whose_variant_fails_rolls_back_by_itself(portal, web):
    register("iris", 1), register("iris", 2, tags={"fault.fail_rate": 1.0})
    create(
        portal,
        {
            "name": "canary",
            "department": "vision",
            "model": "iris",
            "strategy": "canary",
            "variants": [
                {"name": "stable", "version": 1, "weight": 100},
                {"name": "canary", "version": 2, "weight": 0},
            ],
            "rollout": {"steps": [50, 100], "min_requests": 20, "step_seconds": 0},
        },
    )
    assert {v.name: v.weight for v in Deployment.objects.get().variants.all()} == {"stable": 50, "canary": 50}
    headers = token(portal, portal.alice)
    results = call(web, "canary", headers, count=200)
    assert Counter(status for status, _, _ in results).keys() == {200, 502}

    def rolled_back():
        services.deployments_progress()
        return Deployment.objects.get().status == "rolled_back"

    poll(rolled_back, what="the canary to be rolled back", timeout=30)
    deployment = Deployment.objects.get()
    assert {v.name: v.weight for v in deployment.variants.all()} == {"stable": 100, "canary": 0}
    assert "error rate" in deployment.rollout["state"]["reason"]
    poll(
        lambda: {(s, b.get("variant")) for s, b, _ in call(web, "canary", headers, count=40)} == {(200, "stable")},
        what="the router to send everything to the stable variant",
    )


def test_a_rolling_upgrade_moves_traffic_step_by_step_once_the_new_server_is_ready(portal, web):
    register("iris", 1), register("iris", 2)
    create(
        portal,
        {
            "name": "rolling",
            "department": "vision",
            "model": "iris",
            "strategy": "rolling",
            "variants": [{"name": "old", "version": 1, "weight": 100}, {"name": "new", "version": 2, "weight": 0}],
            # the same model on both sides: only an error guardrail, p95 noise of a few requests is no signal
            "rollout": {
                "step_percent": 50,
                "min_requests": 10,
                "step_seconds": 0,
                "guardrails": {"max_p95_latency_ratio": 1000},
            },
        },
    )
    headers = token(portal, portal.alice)
    weights = [{v.name: v.weight for v in Deployment.objects.get().variants.all()}]

    def step():
        call(web, "rolling", headers, count=60)
        services.deployments_progress()
        deployment = Deployment.objects.get()
        current = {v.name: v.weight for v in deployment.variants.all()}
        if weights[-1] != current:
            weights.append(current)
        assert deployment.status != "rolled_back", deployment.rollout["state"]["reason"]
        return deployment.status == "active"

    poll(step, what="the rolling upgrade to complete", timeout=60)
    assert weights == [{"old": 100, "new": 0}, {"old": 50, "new": 50}, {"old": 0, "new": 100}]
    assert Deployment.objects.get().rollout["state"]["status"] == "completed"


def test_promote_and_rollback_are_atomic_for_requests_in_flight(portal, web):
    register("iris", 1), register("iris", 2, flip=True)
    create(portal, ab("atomic", weights=(90, 10), sticky=False))
    headers = token(portal, portal.alice)
    batches: list = []  # (when the batch was sent, when its last answer came, its results)
    stop = threading.Event()

    def traffic():
        while not stop.is_set():
            sent = time.monotonic()
            results = call(web, "atomic", headers, count=40, concurrency=8)
            batches.append((sent, time.monotonic(), results))

    sender = threading.Thread(target=traffic)
    sender.start()
    client = portal.api(portal.alice)
    try:
        poll(lambda: len(batches) >= 2, what="traffic before the promote")
        assert client.post("/api/v1/deployments/atomic/promote/", {"variant": "b"}, format="json").status_code == 200
        promoted = time.monotonic()
        poll(lambda: batches[-1][0] > promoted + 2, what="traffic after the promote")
        assert client.post("/api/v1/deployments/atomic/rollback/").status_code == 200
        rolled_back = time.monotonic()
        poll(lambda: batches[-1][0] > rolled_back + 2, what="traffic after the rollback")
    finally:
        stop.set()
        sender.join()
    results = [result for _, _, batch in batches for result in batch]
    # Every request was answered by a whole routing: a variant with its own version and predictions, no errors.
    answers = {
        (status, body["variant"], body["model_version"], tuple(body["predictions"])) for status, body, _ in results
    }
    assert answers <= {(200, "a", 1, (1, 0)), (200, "b", 2, (0, 1))}, answers
    # Routers look at the revision once a second: a second after each change only the new routing answers.
    settled = [
        body["variant"]
        for sent, done, batch in batches
        if promoted + 1.5 < sent and done < rolled_back
        for _, body, _ in batch
    ]
    assert settled and set(settled) == {"b"}
    assert "a" in {body["variant"] for sent, _, batch in batches if sent > rolled_back + 1.5 for _, body, _ in batch}
    assert Deployment.objects.get().revision == 3


def test_outsiders_cannot_call_and_anonymous_gets_401(portal, any_web):
    web = any_web
    register("iris", 1)
    create(
        portal,
        {
            "name": "private",
            "department": "vision",
            "model": "iris",
            "variants": [{"name": "a", "version": 1, "weight": 100}],
        },
    )
    with httpx.Client(base_url=web, timeout=10) as client:
        body = {"instances": INSTANCES}
        answer = client.post("/serve/private/predict", json=body, headers=token(portal, portal.alice))
        assert answer.status_code == 200
        request_id = answer.json()["request_id"]
        bob = token(portal, portal.bob)
        assert client.post("/serve/private/predict", json=body, headers=bob).status_code == 404
        assert client.post("/serve/nothing/predict", json=body, headers=bob).status_code == 404
        assert (
            client.post(
                "/serve/private/feedback", json={"request_id": request_id, "success": True}, headers=bob
            ).status_code
            == 404
        )
        anonymous = client.post("/serve/private/predict", json=body)
        assert (anonymous.status_code, anonymous.headers["WWW-Authenticate"]) == (401, "Token")
        assert (
            client.post("/serve/private/predict", json=body, headers={"Authorization": "Token nope"}).status_code == 401
        )
        bad = client.post("/serve/private/predict", json={"rows": []}, headers=token(portal, portal.alice))
        assert bad.status_code == 400 and "instances" in bad.json()
        # Feedback from a member counts once as an outcome of the variant that answered.
        carol = token(portal, portal.carol)
        assert (
            client.post(
                "/serve/private/feedback", json={"request_id": request_id, "success": True}, headers=carol
            ).status_code
            == 200
        )
        assert (
            client.post(
                "/serve/private/feedback", json={"request_id": request_id, "success": True}, headers=carol
            ).status_code
            == 404
        )
    poll(
        lambda: metrics(portal, "private")["a"]["outcomes"] == {"count": 1, "successes": 1, "rate": 1.0},
        what="the outcome to be counted",
    )


def test_a_request_adds_its_latency_to_the_histograms_sum(portal, web):
    """portal_router_latency_seconds: a 300 ms answer grows _sum by about 0.3 s (exact, not from the buckets) and
    _count by one."""
    register("iris", 1, tags={"fault.delay_ms": 300})
    variants = [{"name": "a", "version": 1, "weight": 100}]
    create(portal, {"name": "slow", "department": "vision", "model": "iris", "variants": variants})
    headers, labels = token(portal, portal.alice), {"deployment": "slow", "variant": "a"}

    def latency(requests: int) -> tuple[float, float] | None:
        if metrics(portal, "slow")["a"]["requests"] != requests:
            return None  # not flushed yet
        samples = scrape()
        return value(samples, f"{LATENCY}_sum", **labels), value(samples, f"{LATENCY}_count", **labels)

    assert {status for status, _, _ in call(web, "slow", headers, count=1)} == {200}  # the web process warms up
    before = poll(lambda: latency(1), what="the router to flush its counters")
    (status, _, seconds), *_ = call(web, "slow", headers, count=1)
    after = poll(lambda: latency(2), what="the router to flush its counters")
    assert status == 200 and after[1] == before[1] + 1 == 2
    assert 0.3 <= after[0] - before[0] <= seconds  # the server's delay, at most what the caller waited
