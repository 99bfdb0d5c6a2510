"""Job commands: submit, list, get, logs, cancel, queue (API.md "Jobs")."""

from __future__ import annotations

import shlex
import sys

from portalctl import output
from portalctl.client import JOB_FAILED, OK, UNAVAILABLE
from portalctl.context import Context, UsageError, parse_pair

FINAL = {"succeeded", "failed", "cancelled"}


def gpus(job: dict) -> str:
    return f"{job['workers']}x{output.text(job['gpus_per_worker'])}"


def workers(job: dict) -> str:
    per_worker = job["gpus_per_worker"]
    return f"{job['workers']} x {output.text(per_worker)} GPU{'' if per_worker == 1 else 's'}"


def cmd_submit(ctx: Context, args) -> int:
    if args.follow and ctx.output == "json":
        raise UsageError("--follow prints the job's log, not JSON: submit with -o json, then `portalctl logs -f ID`")
    if args.follow and args.dry_run:
        raise UsageError("--dry-run submits nothing, so there is no log to --follow")
    body = {
        "name": args.name,
        "department": args.department or ctx.default_department(),
        "code_url": args.code_url,
        "command": command_text(args),
    }
    optional = {
        "cluster": args.cluster,
        "code_ref": args.ref,
        "image": args.image,
        "workers": args.workers,
        "gpus_per_worker": args.gpus,
        "gpu_type": args.gpu_type,
        "priority": args.priority,
        "tensorboard": args.tensorboard,
        "max_runtime_seconds": args.max_runtime,
    }
    body |= {key: value for key, value in optional.items() if value is not None}
    if args.requirement:
        body["requirements"] = args.requirement
    if args.mount:
        body["mounts"] = [parse_mount(mount) for mount in args.mount]
    if args.env:
        body["env"] = dict(parse_pair(pair, "--env") for pair in args.env)
    if args.dry_run:
        return dry_run(ctx, body)
    headers = {"Idempotency-Key": args.idempotency_key} if args.idempotency_key else None
    job = ctx.client.post("/api/v1/jobs/", body, headers=headers)
    if ctx.output == "json":
        output.print_json(job)
        return OK
    # While following, stdout is the job's log alone; what portalctl says goes to stderr.
    where = sys.stderr if args.follow else sys.stdout
    output.say(f"job {job['id']} {job['name']} submitted: {describe_status(job)}", file=where)
    if args.follow:
        return follow(ctx, job["id"], worker=0, tail=None, raw=args.raw)
    return OK


# The submission's fields as `portalctl submit` options, to say an alternative the way it would be asked for.
OPTION = {"gpus_per_worker": "--gpus", "workers": "--workers", "cluster": "--cluster", "gpu_type": "--gpu-type"}


def dry_run(ctx: Context, body: dict) -> int:
    """POST /api/v1/jobs/preview/: the scheduler's answer for this submission, nothing submitted."""
    answer = ctx.client.post("/api/v1/jobs/preview/", body)
    if ctx.output == "json":
        output.print_json(answer)
        return OK
    if answer["would_start"]:
        output.say("would start now")
        return OK
    start = output.when(answer.get("estimated_start")) or "no estimate"
    position = f"position {answer['queue_position']} in the queue, " if answer.get("queue_position") else ""
    output.say(f"would wait ({answer['pending_reason']}): {position}estimated start {start}")
    if answer.get("status_message"):
        output.say(f"  {answer['status_message']}")
    for alternative in answer["alternatives"]:
        change = " ".join(
            f"{OPTION.get(key, key)} {output.text(value)}" for key, value in alternative["change"].items()
        )
        output.say(f"starts sooner with {change}: {output.when(alternative['estimated_start'])}")
    return OK


def command_text(args) -> str:
    """The words after `--`: one word is taken as a whole shell command line, several are quoted and joined."""
    words = args.command_words
    if args.command and words:
        raise UsageError("give the command either after `--` or with --command, not both")
    if args.command:
        return args.command
    if not words:
        raise UsageError("give the command to run after `--`, e.g. `portalctl submit ... -- python train.py`")
    return words[0] if len(words) == 1 else shlex.join(words)


def parse_mount(text: str) -> dict:
    """`storage:path[:ro]` -> {"storage", "path", "read_only"}."""
    storage, _, path = text.partition(":")
    mode = "rw"
    if path.endswith((":ro", ":rw")):
        path, mode = path[:-3], path[-2:]
    if not storage or not path:
        raise UsageError(f"--mount {text!r}: write it as STORAGE:PATH or STORAGE:PATH:ro")
    return {"storage": storage, "path": path, "read_only": mode == "ro"}


def describe_status(job: dict) -> str:
    words = job["status"]
    if job.get("pending_reason"):
        words += f" ({job['pending_reason']})"
    if job.get("status_message"):
        words += f" - {job['status_message']}"
    return words


def cmd_list(ctx: Context, args) -> int:
    params = {
        "department": args.department,
        "status": args.status,
        "search": args.search,
        "page_size": args.limit,
        "submitted_by": ctx.me()["username"] if args.mine else None,
    }
    page = ctx.client.get("/api/v1/jobs/", params)
    if ctx.output == "json":
        output.print_json(page)
        return OK
    columns = [
        ("ID", lambda j: j["id"]),
        ("NAME", lambda j: j["name"]),
        ("DEPARTMENT", lambda j: j["department"]),
        ("STATUS", lambda j: j["status"]),
        ("GPUS", gpus),
        ("USER", lambda j: j["submitted_by"]),
        ("AGE", lambda j: output.age(j["created_at"])),
    ]
    if ctx.output == "wide":
        columns += [
            ("CLUSTER", lambda j: j["cluster"]),
            ("GPU TYPE", lambda j: j["gpu_type"]),
            ("PRIORITY", lambda j: j["priority"]),
            ("REASON", lambda j: j["pending_reason"] or None),
        ]
    output.table(page["results"], columns, empty="No jobs.")
    if page.get("next"):
        print(f"(showing {len(page['results'])} of {page['count']}; use --limit to see more)", file=sys.stderr)
    return OK


def cmd_get(ctx: Context, args) -> int:
    job = ctx.client.get(f"/api/v1/jobs/{args.job_id}/")
    events = None
    if args.events:
        events = ctx.client.get(f"/api/v1/jobs/{args.job_id}/events/", {"page_size": 200})["results"]
    if ctx.output == "json":
        output.print_json(job if events is None else {**job, "events": events})
        return OK
    queue = None
    if job.get("queue_position") is not None:
        queue = f"position {job['queue_position']}" + (
            f", estimated start {output.when(job['estimated_start'])}" if job.get("estimated_start") else ""
        )
    output.fields(
        [
            ("Job", f"{job['id']} {job['name']}"),
            ("Status", job["status"]),
            ("Reason", job.get("pending_reason") or None),
            ("Message", job.get("status_message") or None),
            ("Queue", queue),
            ("Department", job["department"]),
            ("Submitted by", job["submitted_by"]),
            ("Cluster", f"{job['cluster']} / {job['gpu_type']}"),
            ("Workers", workers(job)),
            ("Priority", job["priority"]),
            ("Image", job["image"]),
            ("Code", job["code_url"] + (f" @ {job['code_ref']}" if job.get("code_ref") else "")),
            ("Commit", job.get("commit") or None),
            ("Command", job["command"]),
            ("Created", output.when(job["created_at"])),
            ("Started", output.when(job.get("started_at"))),
            ("Finished", output.when(job.get("finished_at"))),
            ("Exit code", job.get("exit_code")),
            ("GPU seconds", round(job["gpu_seconds"]) if job.get("gpu_seconds") else None),
            ("TensorBoard", ctx.client.url + job["tensorboard_url"] if job.get("tensorboard_url") else None),
        ]
    )
    if events is not None:
        print()
        output.table(
            events,
            [
                ("TIME", lambda e: output.when(e["time"])),
                ("FROM", lambda e: e["from_status"] or None),
                ("TO", lambda e: e["to_status"]),
                ("REASON", lambda e: e["reason"] or None),
                ("MESSAGE", lambda e: e["message"] or None),
            ],
            empty="No events.",
        )
    return OK


def cmd_logs(ctx: Context, args) -> int:
    if args.follow:
        return follow(ctx, args.job_id, worker=args.worker, tail=args.tail, raw=args.raw)
    log = ctx.client.get_bytes(f"/api/v1/jobs/{args.job_id}/logs/", {"worker": args.worker, "tail": args.tail})
    output.write_log([log], raw=args.raw)
    return OK


def follow(ctx: Context, job_id: int, *, worker: int, tail: int | None, raw: bool = False) -> int:
    """Stream the log until the job ends; 0 if it succeeded, 6 if it failed or was cancelled.

    The job's control characters are shown, not obeyed (output.visible), unless ``raw``.
    """
    params = {"worker": worker, "tail": tail, "follow": 1}
    with ctx.client.stream(f"/api/v1/jobs/{job_id}/logs/", params) as chunks:
        output.write_log(chunks, raw=raw)
    job = ctx.client.get(f"/api/v1/jobs/{job_id}/")
    if job["status"] not in FINAL:
        print(f"portalctl: the log stream ended before job {job_id} did ({job['status']})", file=sys.stderr)
        return UNAVAILABLE
    ending = f"job {job_id} {job['status']}"
    if job.get("exit_code") is not None:
        ending += f" (exit code {job['exit_code']})"
    if job["status"] != "succeeded" and job.get("status_message"):
        ending += f": {job['status_message']}"
    output.say(ending, file=sys.stderr)
    return OK if job["status"] == "succeeded" else JOB_FAILED


def cmd_cancel(ctx: Context, args) -> int:
    job = ctx.client.post(f"/api/v1/jobs/{args.job_id}/cancel/")
    if ctx.output == "json":
        output.print_json(job)
    else:
        output.say(f"job {job['id']} {job['name']}: {describe_status(job)}")
    return OK


def cmd_queue(ctx: Context, args) -> int:
    page = ctx.client.get(
        "/api/v1/queue/", {"cluster": args.cluster, "gpu_type": args.gpu_type, "page_size": args.limit}
    )
    if ctx.output == "json":
        output.print_json(page)
        return OK
    columns = [
        ("POS", lambda j: j["queue_position"]),
        ("ID", lambda j: j["id"]),
        ("NAME", lambda j: j["name"]),
        ("DEPARTMENT", lambda j: j["department"]),
        ("GPUS", gpus),
        ("TYPE", lambda j: j["gpu_type"]),
        ("PRIORITY", lambda j: j["priority"]),
        ("REASON", lambda j: j["pending_reason"] or None),
        ("ESTIMATED START", lambda j: output.when(j.get("estimated_start"))),
    ]
    if ctx.output == "wide":
        columns.append(("MESSAGE", lambda j: j["status_message"] or None))
    output.table(page["results"], columns, empty="No job is waiting.")
    return OK
