"""REST API under load: job submissions and job-list reads against a bare Django view on the same server.

Starts the real portal (uvicorn, as `make run` does; no worker, so admitted jobs stay admitted and the rest
queue) on PostgreSQL, in a database of its own that it (re)creates, with the demo world plus N historical
jobs spread over departments, users and final statuses. Then this process (not the server's) drives three
endpoints in interleaved time slices, each at the same concurrency over keep-alive HTTP/1.1 connections:
POST /api/v1/jobs/ (valid submissions), GET /api/v1/jobs/ (first page, as a member), and GET /bench/bare
(mounted by PORTAL_BENCH=true: the cheapest Django view, the ceiling).

    python -m bench.api --duration 30 --json OUT.json [--jobs 100000] [--concurrency 8] [--profile]

DATABASE_URL names the database (default postgres://postgres@127.0.0.1:5432/portal_bench); it is dropped
and created again, and only if it is missing or this benchmark made it. REDIS_URL is used when set.
--url runs the load against a portal that is already up (demo world, PORTAL_BENCH=true, PORTAL_DEMO_PASSWORD).
--profile then counts the queries of each API call and profiles 200 of each in-process (pyinstrument).

Goal (issue 8): submit_rps and list_rps each >= 0.5 x bare_rps.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

from bench.common import emit, percentile
from bench.job_start import Api, _free_port
from bench.router import Connection
from bench.web_server import parse_server, server_argv

ROOT = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent
DEFAULT_DATABASE_URL = "postgres://postgres@127.0.0.1:5432/portal_bench"
MARK = "made by bench.api"  # the comment on a database this benchmark may drop
PASSWORD = "bench-password-1"
GOAL_RATIO = 0.5
SUBMISSION = {
    "name": "bench",
    "department": "vision",
    "code_url": "https://git.example.com/team/bench.git",
    "command": "python train.py --epochs 1",
    "gpus_per_worker": 1,
}
ENDPOINTS = ("submit", "list", "bare")


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--duration", type=float, default=30, help="seconds of load, over the three endpoints")
    parser.add_argument("--jobs", type=int, default=100_000, help="historical jobs in the table")
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--json", type=Path)
    parser.add_argument("--url", help="a running portal to drive instead of starting one")
    parser.add_argument("--profile", action="store_true", help="query counts and pyinstrument of both API calls")
    parser.add_argument(
        "--server",
        default="uvicorn",
        help="uvicorn (one worker, as make run today), uvicorn-workers:N, daphne or gunicorn-uvicorn:N",
    )
    parser.add_argument(
        "--compare",
        help="servers (comma-separated, as --server) measured in one run on one database, in interleaved rounds",
    )
    parser.add_argument("--rounds", type=int, default=2, help="with --compare: rounds per server, interleaved")
    args = parser.parse_args(argv)
    servers = [s.strip() for s in args.compare.split(",")] if args.compare else [args.server]
    for spec in servers:
        try:
            parse_server(spec)
        except ValueError as error:
            parser.error(str(error))
    if args.compare and args.url:
        parser.error("--compare starts its own servers; it cannot drive --url")
    database_url = os.environ.get("DATABASE_URL") or DEFAULT_DATABASE_URL
    data_root = Path(tempfile.mkdtemp(prefix="portal-bench-"))
    env = {
        **os.environ,
        "DATABASE_URL": database_url,
        "PORTAL_DATA_ROOT": str(data_root),
        "PORTAL_BENCH": "true",
        "PORTAL_DEMO_PASSWORD": PASSWORD,
        "PORTAL_LOG_LEVEL": "WARNING",
        "PORTAL_THROTTLE_USER": "100000000/minute",
    }
    try:
        if args.url:
            report = _drive(args.url.rstrip("/"), env, args)
        else:
            loaded = _prepare(database_url, env, jobs=args.jobs)
            print(f"loaded {args.jobs} historical jobs in {loaded:.1f} s", file=sys.stderr)
            if not args.compare:
                report = _serve_and_drive(args.server, env, data_root, args)
            else:
                return _compare(servers, env, data_root, args)
        report["historical_jobs"] = None if args.url else args.jobs
        if args.profile:
            _profile(env)
    finally:
        shutil.rmtree(data_root, ignore_errors=True)
    return _verdict(report, args.json)


def _login(base: str, env: dict) -> str:
    api = Api(base)
    api.wait_up(path="/healthz/live")  # no worker, beat or watcher here: /healthz would stay 503
    return api.post("/api/v1/auth/token/", {"username": "alice", "password": env["PORTAL_DEMO_PASSWORD"]})["token"]


def _drive(base: str, env: dict, args: argparse.Namespace) -> dict:
    token = _login(base, env)
    return asyncio.run(_measure(base, token, duration=args.duration, concurrency=args.concurrency))


def _serve_and_drive(spec: str, env: dict, data_root: Path, args: argparse.Namespace) -> dict:
    """Start the portal under server ``spec``, check its websockets, measure it, stop it."""
    _, workers = parse_server(spec)
    port = _free_port()
    base = f"http://127.0.0.1:{port}"
    # No access log line per request, as in production behind a proxy that keeps its own.
    with open(data_root / "web.log", "ab") as logs:  # the child keeps its own copy of the descriptor
        process = subprocess.Popen(server_argv(spec, port), cwd=ROOT, env=env, stdout=logs, stderr=subprocess.STDOUT)
    try:
        token = _login(base, env)
        # Every worker up before the keep-alive connections are opened: they stay with the worker that took them.
        _wait_for_workers(base, workers)
        heard = asyncio.run(_websockets_hear(base, token, env))
        before = _process_cpu_seconds(process.pid, workers)
        report = asyncio.run(_measure(base, token, duration=args.duration, concurrency=args.concurrency))
        after = _process_cpu_seconds(process.pid, workers)
    finally:
        process.terminate()
        process.wait(timeout=30)
    # The busiest ``workers``: not a helper process such as multiprocessing's resource tracker.
    cpu = sorted((round(seconds - before.get(pid, 0.0), 1) for pid, seconds in after.items()), reverse=True)[:workers]
    return report | {"server": spec, "workers": workers, "websockets_heard": heard, "worker_cpu_s": cpu}


def _wait_for_workers(base: str, workers: int, timeout: float = 90.0) -> None:
    """Until ``workers`` distinct processes have answered GET /bench/pid (each on a new connection)."""
    deadline = time.monotonic() + timeout
    seen: set[bytes] = set()

    def ask(_: int) -> bytes:
        with urllib.request.urlopen(base + "/bench/pid", timeout=30) as response:
            return response.read()

    with ThreadPoolExecutor(4 * workers) as pool:
        while len(seen) < workers:
            if time.monotonic() > deadline:
                raise SystemExit(f"{base}: {len(seen)} of {workers} workers answered within {timeout:.0f} s")
            seen.update(pool.map(ask, range(4 * workers)))


# --- Websockets ---------------------------------------------------------------------------------------------

WEBSOCKETS = 4  # department sockets opened per server, spread over its workers as the kernel hands them out


async def _websockets_hear(base: str, token: str, env: dict) -> str:
    """``WEBSOCKETS`` sockets on /ws/departments/vision/ open (hello) and each hears a message that another
    process (not a web worker) sends to the department's group over the channel layer: "4/4" when all do.

    That is the path of every live update (the Celery worker and the scheduler push, web workers hold the
    sockets), and what a process-local channel layer would break between the workers of one server.
    """
    from websockets.asyncio.client import connect
    from websockets.typing import Origin

    url = base.replace("http://", "ws://") + "/ws/departments/vision/"
    marker = f"bench-{os.getpid()}-{time.monotonic_ns()}"
    sockets = [
        await connect(url, additional_headers={"Authorization": f"Token {token}"}, origin=Origin(base))
        for _ in range(WEBSOCKETS)
    ]
    try:
        for socket in sockets:
            hello = json.loads(await asyncio.wait_for(socket.recv(), timeout=30))
            if hello != {"type": "hello"}:
                raise SystemExit(f"{url} greeted {hello!r}, not hello")
        push = await asyncio.create_subprocess_exec(
            sys.executable, "-c", f"from bench.api import _push_here; _push_here({marker!r})", cwd=ROOT, env=env
        )
        if await push.wait():
            raise SystemExit("the push to the department's group failed")

        async def hears(socket) -> bool:
            deadline = time.monotonic() + 30
            while (left := deadline - time.monotonic()) > 0:
                try:
                    message = json.loads(await asyncio.wait_for(socket.recv(), timeout=left))
                except TimeoutError:
                    break
                if message.get("marker") == marker:  # submissions' own updates may come first
                    return True
            return False

        heard = await asyncio.gather(*(hears(socket) for socket in sockets))
    finally:
        for socket in sockets:
            await socket.close()
    return f"{sum(heard)}/{len(sockets)}"


def _push_here(marker: str) -> None:
    """One message to the vision department's group, as jobs.live sends job updates (run in a child)."""
    import django

    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    django.setup()
    from asgiref.sync import async_to_sync
    from channels.layers import get_channel_layer

    from accounts.models import Department
    from jobs import live

    group = live.department_group(Department.objects.get(slug="vision").pk)
    async_to_sync(get_channel_layer().group_send)(
        group, {"type": live.MESSAGE_TYPE, "payload": {"type": "bench", "marker": marker}}
    )


def _process_cpu_seconds(pid: int, workers: int) -> dict[int, float]:
    """CPU seconds (user + system) of the server's processes by pid: the workers (its children) when it has
    several, for the supervisor itself serves nothing."""
    ticks = os.sysconf("SC_CLK_TCK")
    found = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue  # a process that has just ended
        if int(entry.name) == pid if workers == 1 else int(fields[1]) == pid:
            found[int(entry.name)] = (int(fields[11]) + int(fields[12])) / ticks
    return found


def _ratios(report: dict) -> dict:
    bare = report["bare_rps"]
    return report | {
        "submit_ratio": round(report["submit_rps"] / bare, 3),
        "list_ratio": round(report["list_rps"] / bare, 3),
        "goal_ratio": GOAL_RATIO,
    }


def _compare(servers: list[str], env: dict, data_root: Path, args: argparse.Namespace) -> dict:
    """Each server ``args.rounds`` times, rounds interleaved (A B C A B C), on one database: a row per round
    and one per server over its rounds (requests over seconds), in the Markdown of bench/RESULTS.md."""
    rounds: list[dict] = []
    for number in range(1, args.rounds + 1):
        for spec in servers:
            rounds.append(_ratios(_serve_and_drive(spec, env, data_root, args)) | {"round": number})
            rounds[-1]["load_average_1m"] = round(os.getloadavg()[0], 2)
            print(f"round {number} {spec}: {json.dumps(rounds[-1])}", file=sys.stderr)
    rows = {}
    for spec in servers:
        mine = [r for r in rounds if r["server"] == spec]
        row: dict = {"server": spec, "websockets_heard": " ".join(r["websockets_heard"] for r in mine)}
        for name in ENDPOINTS:
            row[f"{name}_rps"] = round(
                sum(r[f"{name}_requests"] for r in mine) / sum(r[f"{name}_seconds"] for r in mine), 1
            )
        rows[spec] = _ratios(row)
    baseline = servers[0]
    for row in rows.values():
        row["bare_vs_baseline"] = round(row["bare_rps"] / rows[baseline]["bare_rps"], 3)
    lines = [
        "| round | server | submit rps (p50 / p99 ms) | list rps (p50 / p99 ms) | bare rps (p50 / p99 ms) "
        "| submit / bare | list / bare | websockets heard | worker CPU s | load 1 min |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rounds:
        timing = " | ".join(f"{r[f'{n}_rps']} ({r[f'{n}_p50_ms']} / {r[f'{n}_p99_ms']})" for n in ENDPOINTS)
        lines.append(
            f"| {r['round']} | {r['server']} | {timing} | {r['submit_ratio']:.3f} | {r['list_ratio']:.3f} "
            f"| {r['websockets_heard']} | {' + '.join(map(str, r['worker_cpu_s']))} | {r['load_average_1m']} |"
        )
    lines += [
        "",
        f"| server (all {args.rounds} rounds) | submit rps | list rps | bare rps | submit / bare | list / bare "
        f"| bare / {baseline} |",
        "|---|---|---|---|---|---|---|",
    ]
    for row in rows.values():
        lines.append(
            f"| {row['server']} | {row['submit_rps']} | {row['list_rps']} | {row['bare_rps']} "
            f"| {row['submit_ratio']:.3f} | {row['list_ratio']:.3f} | {row['bare_vs_baseline']:.2f} |"
        )
    print("\n".join(lines), file=sys.stderr)
    report = {
        "compare": rows,
        "rounds": rounds,
        "duration_s": args.duration,
        "concurrency": args.concurrency,
        "historical_jobs": args.jobs,
        "baseline": baseline,
    }
    fastest = max(rows.values(), key=lambda row: row["bare_rps"])["server"]
    return emit(report, json_path=args.json, summary=f"baseline {baseline}; fastest bare view: {fastest}")


def _verdict(report: dict, json_path: Path | None) -> dict:
    report = _ratios(report)
    bare = report["bare_rps"]
    verdicts = "; ".join(
        f"{name} {report[f'{name}_rps']} rps = {report[f'{name}_ratio']:.2f} x bare "
        + ("meets" if report[f"{name}_ratio"] >= GOAL_RATIO else "MISSES")
        + f" >= {GOAL_RATIO}"
        for name in ("submit", "list")
    )
    return emit(report, json_path=json_path, summary=f"baseline bare_rps {bare}; {verdicts}")


# --- The database and its world -------------------------------------------------------------------------


def _prepare(database_url: str, env: dict, *, jobs: int) -> float:
    _recreate_database(database_url)
    manage = [sys.executable, "manage.py"]
    steps = [["migrate", "-v0"], ["demo"]]
    if not env.get("REDIS_URL"):  # the embedded channel layer keeps its own SQLite database
        steps.insert(1, ["migrate", "--database", "channels", "-v0"])
    for argv in steps:
        subprocess.run(manage + argv, cwd=ROOT, env=env, check=True, capture_output=True)
    started = time.monotonic()
    subprocess.run(
        [sys.executable, "-c", f"from bench.api import _load_history; _load_history({jobs})"],
        cwd=ROOT,
        env=env,
        check=True,
    )
    return time.monotonic() - started


def _recreate_database(database_url: str) -> None:
    import psycopg
    from psycopg import sql

    parts = urlsplit(database_url)
    name = parts.path.lstrip("/")
    if parts.scheme not in {"postgres", "postgresql"} or not name:
        raise SystemExit(f"bench.api needs a PostgreSQL DATABASE_URL naming a database, not {parts.scheme}://...")
    maintenance = urlunsplit(parts._replace(scheme="postgresql", path="/postgres"))
    with psycopg.connect(maintenance, autocommit=True) as conn:
        row = conn.execute(
            "SELECT shobj_description(oid, 'pg_database') FROM pg_database WHERE datname = %s", [name]
        ).fetchone()
        if row is not None and row[0] != MARK:
            raise SystemExit(f"database {name!r} exists and bench.api did not make it: give another DATABASE_URL")
        conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
        conn.execute(sql.SQL("COMMENT ON DATABASE {} IS {}").format(sql.Identifier(name), sql.Literal(MARK)))


DEPARTMENTS = ["vision", "nlp", "speech", "ads", "search", "robotics", "recsys", "infra"]
# Share of the history per department: a few big departments, a long tail.
DEPARTMENT_WEIGHTS = [25, 20, 15, 12, 10, 8, 6, 4]
FINAL_STATUSES = [("succeeded", 70), ("failed", 15), ("cancelled", 15)]
USERS_PER_DEPARTMENT = 6


def _load_history(count: int, *, seed: int = 8) -> None:
    """Departments, users and ``count`` finished jobs with their events, bulk-inserted in batches (run in a child)."""
    import django

    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    django.setup()
    from django.contrib.auth import get_user_model
    from django.utils import timezone

    from accounts.models import Department, Membership
    from clusters.models import Cluster
    from images.models import FrameworkImage
    from jobs.models import Job, JobEvent
    from quotas.models import PriorityClass

    rng = random.Random(seed)
    User = get_user_model()
    departments = {d.slug: d for d in Department.objects.all()}
    for slug in set(DEPARTMENTS) - set(departments):
        departments[slug] = Department.objects.create(slug=slug, name=slug.title())
    users = {slug: list(User.objects.filter(memberships__department=departments[slug])) for slug in DEPARTMENTS}
    for slug in DEPARTMENTS:
        made = User.objects.bulk_create(User(username=f"{slug}-{i}", password="!") for i in range(USERS_PER_DEPARTMENT))
        Membership.objects.bulk_create(Membership(user=user, department=departments[slug]) for user in made)
        users[slug] += made
    cluster = Cluster.objects.get(name="local")
    pool = cluster.pools.first()
    images = list(FrameworkImage.objects.filter(official=True))
    priorities = list(PriorityClass.objects.all())
    # The history has its own times: created_at is auto_now_add, which bulk_create would overwrite.
    Job._meta.get_field("created_at").auto_now_add = False
    now = timezone.now()
    for start in range(0, count, 5000):
        jobs, timelines = [], []
        for _ in range(min(5000, count - start)):
            slug = rng.choices(DEPARTMENTS, DEPARTMENT_WEIGHTS)[0]
            status = rng.choices([s for s, _ in FINAL_STATUSES], [w for _, w in FINAL_STATUSES])[0]
            created = now - timedelta(seconds=rng.uniform(3600, 180 * 86400))
            ran = status != "cancelled" or rng.random() < 0.5
            admitted = created + timedelta(seconds=rng.expovariate(1 / 600)) if ran else None
            finished = (admitted or created) + timedelta(seconds=rng.expovariate(1 / 7200) + 10)
            workers, gpus = rng.choice([(1, 1), (1, 1), (1, 2), (1, 4), (2, 4), (4, 8), (1, 0.5)])
            jobs.append(
                Job(
                    name=f"train-{rng.randrange(10**6)}",
                    department=departments[slug],
                    cluster=cluster,
                    pool=pool,
                    submitted_by=rng.choice(users[slug]),
                    code_url=f"https://git.example.com/{slug}/model.git",
                    code_ref="main",
                    command=f"python train.py --lr {rng.choice(['1e-3', '3e-4'])}",
                    image=rng.choice(images),
                    workers=workers,
                    gpus_per_worker=gpus,
                    priority=rng.choice(priorities),
                    status=status,
                    exit_code={"succeeded": 0, "failed": 1}.get(status),
                    created_at=created,
                    admitted_at=admitted,
                    started_at=admitted,
                    finished_at=finished,
                    commit="0" * 40 if ran else "",
                    gpu_seconds=(finished - admitted).total_seconds() * workers * gpus if admitted else 0.0,
                )
            )
            road = ["queued", "admitted", "starting", "running", status] if ran else ["queued", status]
            times = [created, *([admitted] * (len(road) - 2)), finished]
            timelines.append(list(zip([""] + road[:-1], road, times)))
        Job.objects.bulk_create(jobs)
        JobEvent.objects.bulk_create(
            JobEvent(job=job, time=at, from_status=before, to_status=after, reason="submitted" if not before else after)
            for job, timeline in zip(jobs, timelines)
            for before, after, at in timeline
        )
    from django.db import connection

    with connection.cursor() as cursor:
        # What autovacuum gives a table that grew slowly: statistics, and a visibility map for index-only counts.
        cursor.execute("VACUUM ANALYZE")


# --- The load ----------------------------------------------------------------------------------------------


class Request:
    """One request sent again and again on a keep-alive connection (bench.router.Connection)."""

    def __init__(self, base: str, method: str, path: str, *, token: str = "", body: dict | None = None):
        host, port = base.removeprefix("http://").rsplit(":", 1)
        self.host, self.port = host, int(port)
        payload = json.dumps(body).encode() if body is not None else b""
        head = f"{method} {path} HTTP/1.1\r\nHost: {host}:{port}\r\nAccept: application/json\r\n"
        if token:
            head += f"Authorization: Token {token}\r\n"
        if body is not None:
            head += "Content-Type: application/json\r\n"
        self.request = (head + f"Content-Length: {len(payload)}\r\n\r\n").encode() + payload


async def _slice(
    connections: list[Connection], seconds: float, latencies: list[float], expected: int
) -> tuple[int, float]:
    """Keep every connection busy for ``seconds``; returns (requests done, seconds until the last one ended)."""
    started = time.perf_counter()
    stop = started + seconds
    done = [0]

    async def worker(connection: Connection):
        while time.perf_counter() < stop:
            sent = time.perf_counter()
            status = await connection.call()
            latencies.append((time.perf_counter() - sent) * 1000)
            if status != expected:
                raise SystemExit(f"a request answered {status}, not {expected}")
            done[0] += 1

    await asyncio.gather(*(worker(c) for c in connections))
    return done[0], time.perf_counter() - started


async def _measure(base: str, token: str, *, duration: float, concurrency: int) -> dict:
    requests = {
        "submit": (Request(base, "POST", "/api/v1/jobs/", token=token, body=SUBMISSION), 201),
        "list": (Request(base, "GET", "/api/v1/jobs/", token=token), 200),
        "bare": (Request(base, "GET", "/bench/bare"), 200),
    }
    pools = {name: [Connection(request) for _ in range(concurrency)] for name, (request, _) in requests.items()}
    # Slices of about a second each, endpoints taking turns, so that all three meet the same machine.
    rounds = max(1, round(duration / 3))
    slice_seconds = duration / 3 / rounds
    for name, pool in pools.items():  # warm-up: connections, caches, the first queued jobs
        await _slice(pool, min(0.5, slice_seconds), [], requests[name][1])
    latencies: dict[str, list[float]] = {name: [] for name in ENDPOINTS}
    counts = dict.fromkeys(ENDPOINTS, 0)
    seconds = dict.fromkeys(ENDPOINTS, 0.0)
    for _ in range(rounds):
        for name in ENDPOINTS:
            done, took = await _slice(pools[name], slice_seconds, latencies[name], requests[name][1])
            counts[name] += done
            seconds[name] += took
    for pool in pools.values():
        for connection in pool:
            await connection.close()
    report: dict = {"duration_s": duration, "concurrency": concurrency}
    for name in ENDPOINTS:
        report |= {
            f"{name}_rps": round(counts[name] / seconds[name], 1),
            f"{name}_requests": counts[name],
            f"{name}_seconds": round(seconds[name], 3),
            f"{name}_p50_ms": round(statistics.median(latencies[name]), 2),
            f"{name}_p99_ms": round(percentile(latencies[name], 0.99), 2),
        }
    return report


# --- Profile ------------------------------------------------------------------------------------------------


def _profile(env: dict) -> None:
    """Queries per call and where the time goes, in-process on the bench database (after the load)."""
    subprocess.run(
        [sys.executable, "-c", "from bench.api import _profile_here; _profile_here()"], cwd=ROOT, env=env, check=True
    )


def _profile_here(calls: int = 200) -> None:
    import django

    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    django.setup()
    from django.contrib.auth import get_user_model
    from django.db import connection
    from django.test.utils import CaptureQueriesContext
    from pyinstrument import Profiler
    from rest_framework.test import APIClient

    client = APIClient()
    client.force_authenticate(get_user_model().objects.get(username="alice"))
    calls_by_name = {
        "submit": lambda: client.post("/api/v1/jobs/", SUBMISSION, format="json", SERVER_NAME="localhost"),
        "list": lambda: client.get("/api/v1/jobs/", SERVER_NAME="localhost"),
    }
    for name, call in calls_by_name.items():
        with CaptureQueriesContext(connection) as captured:
            call()
        print(f"--- {name}: {len(captured)} queries", file=sys.stderr)
        for query in captured:
            print(f"  {query['time']}s {query['sql'][:200]}", file=sys.stderr)
        profiler = Profiler()
        with profiler:
            for _ in range(calls):
                call()
        print(profiler.output_text(color=False, show_all=False), file=sys.stderr)


if __name__ == "__main__":
    main()
