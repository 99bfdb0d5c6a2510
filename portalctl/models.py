"""Model and deployment commands: models, deploy, promote, rollback, deployments (API.md "Models", "Deployments")."""

from __future__ import annotations

import re
import sys
import time

from portalctl import output
from portalctl.client import OK, REFUSED
from portalctl.context import Context, UsageError, parse_pair

VARIANT = re.compile(r"^(?P<name>[^=]+)=(?P<version>\d+)(?::(?P<weight>\d+|shadow))?$")


def cmd_models_list(ctx: Context, args) -> int:
    page = ctx.client.get("/api/v1/models/", {"department": args.department, "page_size": args.limit})
    if ctx.output == "json":
        output.print_json(page)
        return OK
    columns = [
        ("NAME", lambda m: m["name"]),
        ("DEPARTMENT", lambda m: m["department"]),
        ("VERSIONS", lambda m: m["version_count"]),
        ("LATEST", lambda m: m["latest_version"]),
        ("ALIASES", lambda m: _pairs(m["aliases"]) or None),
        ("AGE", lambda m: output.age(m["created_at"])),
    ]
    if ctx.output == "wide":
        columns += [("CREATED BY", lambda m: m["created_by"]), ("DESCRIPTION", lambda m: m["description"] or None)]
    output.table(page["results"], columns, empty="No models.")
    return OK


def cmd_models_versions(ctx: Context, args) -> int:
    page = ctx.client.get(f"/api/v1/models/{args.model}/versions/", {"page_size": args.limit})
    if ctx.output == "json":
        output.print_json(page)
        return OK
    columns = [
        ("VERSION", lambda v: v["version"]),
        ("STATUS", lambda v: v.get("status")),
        ("FRAMEWORK", lambda v: v["framework"]),
        ("JOB", lambda v: v["source_job"]),
        ("ALIASES", lambda v: ",".join(v["aliases"]) or None),
        ("METRICS", lambda v: _pairs(v["metrics"]) or None),
        ("AGE", lambda v: output.age(v["created_at"])),
    ]
    if ctx.output == "wide":
        columns += [
            ("COMMIT", lambda v: (v["lineage"].get("commit") or "")[:12] or None),
            ("ARTIFACT", lambda v: v["artifact_uri"]),
        ]
    output.table(page["results"], columns, empty=f"Model {args.model} has no versions.")
    return OK


def cmd_models_create(ctx: Context, args) -> int:
    body = {
        "name": args.model,
        "department": args.department or ctx.default_department(),
        "description": args.description,
    }
    model = ctx.client.post("/api/v1/models/", body)
    if ctx.output == "json":
        output.print_json(model)
    else:
        output.say(f"model {model['name']} created in {model['department']}")
    return OK


def cmd_models_register(ctx: Context, args) -> int:
    if (args.job is None) == (args.artifact_uri is None):
        raise UsageError("give either --job ID (with --artifact-path) or --artifact-uri URI")
    body: dict = (
        {"source_job": args.job, "artifact_path": args.artifact_path}
        if args.job is not None
        else {"artifact_uri": args.artifact_uri}
    )
    if args.framework:
        body["framework"] = args.framework
    if args.metric:
        body["metrics"] = {key: _number(key, value) for key, value in (parse_pair(m, "--metric") for m in args.metric)}
    if args.tag:
        body["tags"] = dict(parse_pair(tag, "--tag") for tag in args.tag)
    version = ctx.client.post(f"/api/v1/models/{args.model}/versions/", body)
    if args.wait:
        version = wait_registered(ctx, version)
    if ctx.output == "json":
        output.print_json(version)
    elif version.get("status") == "failed":
        output.say(
            f"portalctl: model {version['model']} version {version['version']} failed to register: "
            f"{version.get('status_message', '')}",
            file=sys.stderr,
        )
    elif version.get("status") == "registering":
        output.say(f"model {version['model']} version {version['version']} registering ({version['artifact_uri']})")
    else:
        output.say(f"model {version['model']} version {version['version']} registered ({version['artifact_uri']})")
    return REFUSED if version.get("status") == "failed" else OK


def wait_registered(ctx: Context, version: dict) -> dict:
    """Poll the version while the portal copies its artifact (a portal without ``status`` has copied it)."""
    url = f"/api/v1/models/{version['model']}/versions/{version['version']}/"
    delay = 0.2
    while version.get("status") == "registering":
        time.sleep(delay)
        delay = min(delay * 1.5, 5.0)
        version = ctx.client.get(url)
    return version


def cmd_deploy(ctx: Context, args) -> int:
    if args.variant:
        variants = [parse_variant(text, single=len(args.variant) == 1) for text in args.variant]
    elif args.version is not None:
        variants = [{"name": f"v{args.version}", "version": args.version, "weight": 100}]
    else:
        raise UsageError("give --version N (one variant with all traffic) or --variant NAME=VERSION:WEIGHT ...")
    department = args.department or ctx.client.get(f"/api/v1/models/{args.model}/")["department"]
    body = {
        "name": args.name,
        "department": department,
        "model": args.model,
        "strategy": args.strategy,
        "variants": variants,
    }
    if args.sticky is not None:
        body["sticky"] = args.sticky
    if args.cluster:
        body["cluster"] = args.cluster
    return show_deployment(ctx, ctx.client.post("/api/v1/deployments/", body), "created")


def parse_variant(text: str, *, single: bool) -> dict:
    """`name=version:weight`, `name=version:shadow`, or `name=version` when it is the only variant (100%)."""
    match = VARIANT.match(text)
    if match is None or (match["weight"] is None and not single):
        raise UsageError(f"--variant {text!r}: write it as NAME=VERSION:WEIGHT (e.g. b=2:10) or NAME=VERSION:shadow")
    variant = {"name": match["name"], "version": int(match["version"])}
    if match["weight"] == "shadow":
        return variant | {"weight": 0, "shadow": True}
    return variant | {"weight": int(match["weight"] or 100)}


def cmd_promote(ctx: Context, args) -> int:
    deployment = ctx.client.post(f"/api/v1/deployments/{args.name}/promote/", {"variant": args.variant})
    return show_deployment(ctx, deployment, f"promoted {args.variant}")


def cmd_rollback(ctx: Context, args) -> int:
    return show_deployment(ctx, ctx.client.post(f"/api/v1/deployments/{args.name}/rollback/"), "rolled back")


def cmd_deployments(ctx: Context, args) -> int:
    page = ctx.client.get("/api/v1/deployments/", {"department": args.department, "page_size": args.limit})
    if ctx.output == "json":
        output.print_json(page)
        return OK
    columns = [
        ("NAME", lambda d: d["name"]),
        ("MODEL", lambda d: d["model"]),
        ("STRATEGY", lambda d: d["strategy"]),
        ("STATUS", lambda d: d["status"]),
        ("REVISION", lambda d: d["revision"]),
        ("VARIANTS", _variants),
    ]
    if ctx.output == "wide":
        columns += [("DEPARTMENT", lambda d: d["department"]), ("SERVE URL", lambda d: d["serve_url"])]
    output.table(page["results"], columns, empty="No deployments.")
    return OK


def show_deployment(ctx: Context, deployment: dict, what: str) -> int:
    if ctx.output == "json":
        output.print_json(deployment)
        return OK
    output.say(f"deployment {deployment['name']} {what}: revision {deployment['revision']}, {deployment['status']}")
    output.table(
        deployment["variants"],
        [
            ("VARIANT", lambda v: v["name"]),
            ("VERSION", lambda v: v["version"]),
            ("WEIGHT", lambda v: v["weight"]),
            ("SHADOW", lambda v: v["shadow"]),
            ("SERVER", lambda v: v["server"]["status"]),
        ],
    )
    return OK


def _variants(deployment: dict) -> str:
    return " ".join(
        f"{v['name']}=v{v['version']}:{'shadow' if v['shadow'] else v['weight']}" for v in deployment["variants"]
    )


def _pairs(mapping: dict) -> str:
    return ",".join(f"{key}={f'{value:.4g}' if isinstance(value, float) else value}" for key, value in mapping.items())


def _number(key: str, value: str) -> float:
    try:
        return float(value)
    except ValueError:
        raise UsageError(f"--metric {key}={value}: the value must be a number") from None
