"""portalctl's command line: the argparse tree, login / whoami, and main() turning every outcome into an exit code.

The commands themselves are in portalctl.jobs and portalctl.models; each takes (Context, args) and returns
an exit code. Errors travel as exceptions (ApiError, UsageError, ConfigError) and are printed here, once.
"""

from __future__ import annotations

import argparse
import getpass
import os
import sys

from portalctl import __version__, config, jobs, models, output
from portalctl.client import AUTH, OK, USAGE, ApiError, Client
from portalctl.context import Context, UsageError

EPILOG = """\
configuration:
  --url/--token, else PORTAL_URL/PORTAL_TOKEN, else the config file written by `portalctl login`
  ($PORTALCTL_CONFIG, default ~/.config/portalctl/config.toml: url = "...", token = "...").

exit codes:
  0  ok
  1  the portal refused the request (invalid input: every field's message is printed; conflict)
  2  usage or configuration error
  3  not found (404)
  4  authentication or permission (401, 403)
  5  server or network error (5xx, connection refused, timeout)
  6  `logs -f` / `submit --follow`: the job failed or was cancelled (0 when it succeeded)

example:
  portalctl submit --name resnet --code-url https://git.example.com/team/repo.git --gpus 2 --workers 2 \\
      --tensorboard --follow -- python train.py --epochs 3 && echo "trained"
"""


def build_parser() -> argparse.ArgumentParser:
    # The global options work before and after the command (`portalctl -o json list`, `portalctl list -o json`):
    # SUPPRESS keeps a subcommand from overwriting a value given before it with its default.
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--url", default=argparse.SUPPRESS, help="the portal, e.g. https://portal.example.com")
    common.add_argument("--token", default=argparse.SUPPRESS, help="API token (see `portalctl login`)")
    common.add_argument(
        "-o",
        "--output",
        choices=["table", "wide", "json"],
        default=argparse.SUPPRESS,
        help="table (default), wide (more columns) or json (the API's JSON, for scripts)",
    )
    common.add_argument("--timeout", type=float, default=argparse.SUPPRESS, help="seconds per request (default 30)")

    parser = argparse.ArgumentParser(
        prog="portalctl",
        parents=[common],
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description="GPU Portal from the command line: jobs, queue, models, deployments.",
    )
    parser.add_argument("--version", action="version", version=f"portalctl {__version__}")
    commands = parser.add_subparsers(dest="subcommand", required=True, metavar="COMMAND")

    def command(name: str, func, help: str, **kwargs) -> argparse.ArgumentParser:
        sub = commands.add_parser(name, parents=[common], help=help, description=help, **kwargs)
        sub.set_defaults(func=func)
        return sub

    login = command("login", cmd_login, "get a token with your password and store url + token in the config file")
    login.add_argument("--username", required=True)
    login.add_argument("--password-stdin", action="store_true", help="read the password from standard input")
    login.add_argument(
        "--expires-in-days",
        type=int,
        metavar="DAYS",
        help="the new token stops working after DAYS days (default: the longest the portal allows)",
    )
    login.set_defaults(need_token=False)

    command("whoami", cmd_whoami, "who the token belongs to, and your departments")

    submit = command("submit", jobs.cmd_submit, "submit a training job: portalctl submit [options] -- COMMAND ...")
    submit.add_argument("--name", required=True, help="DNS-1035 label, at most 40 characters")
    submit.add_argument("--department", help="slug (default: your department when you have only one)")
    submit.add_argument("--cluster")
    submit.add_argument("--code-url", required=True, help="git URL of the code")
    submit.add_argument("--ref", help="branch, tag or commit")
    submit.add_argument("--image", help="framework image name (see /api/v1/images/)")
    submit.add_argument("--gpus", type=number, help="GPUs per worker: 0, a fraction < 1, or a whole number")
    submit.add_argument("--workers", type=int, help="> 1 runs a distributed gang")
    submit.add_argument("--gpu-type")
    submit.add_argument("--priority", help="priority class, e.g. high, normal, low")
    submit.add_argument("--requirement", action="append", metavar="PIP_REQ", help="extra pip requirement (repeatable)")
    submit.add_argument("--mount", action="append", metavar="STORAGE:PATH[:ro]", help="storage mount (repeatable)")
    submit.add_argument("--env", action="append", metavar="KEY=VALUE", help="environment variable (repeatable)")
    submit.add_argument(
        "--tensorboard", action=argparse.BooleanOptionalAction, help="run TensorBoard (portal default: on)"
    )
    submit.add_argument("--max-runtime", type=int, metavar="SECONDS")
    submit.add_argument("--idempotency-key", help="a retry with the same key returns the first job")
    submit.add_argument("--command", help="the command as one shell line (instead of the words after --)")
    submit.add_argument("--follow", "-f", action="store_true", help="then stream worker 0's log until the job ends")
    submit.add_argument(
        "--dry-run",
        action="store_true",
        help="submit nothing: say whether it would start now, else why and when, and what would start sooner",
    )
    _raw(submit)
    submit.add_argument("command_words", nargs="*", metavar="-- COMMAND", help="what to run, after --")

    listing = command("list", jobs.cmd_list, "jobs, newest first")
    listing.add_argument("--department")
    listing.add_argument("--status", help="one status or several separated by commas")
    listing.add_argument("--mine", action="store_true", help="only jobs you submitted")
    listing.add_argument("--search", help="text in the name, command or code URL")
    _limit(listing)

    get = command("get", jobs.cmd_get, "a job: status, why it waits, queue position and estimated start")
    get.add_argument("job_id", type=int, metavar="ID")
    get.add_argument("--events", action="store_true", help="also its timeline")

    logs = command("logs", jobs.cmd_logs, "a job's log (one worker)")
    logs.add_argument("job_id", type=int, metavar="ID")
    logs.add_argument(
        "-f", "--follow", action="store_true", help="stream until the job ends; exit 0 if it succeeded, 6 if not"
    )
    logs.add_argument("--worker", type=int, default=0, help="worker rank (default 0)")
    logs.add_argument("--tail", type=int, metavar="N", help="only the last N lines")
    _raw(logs)

    cancel = command("cancel", jobs.cmd_cancel, "cancel a job")
    cancel.add_argument("job_id", type=int, metavar="ID")

    queue = command("queue", jobs.cmd_queue, "waiting jobs in admission order, with reasons and estimated starts")
    queue.add_argument("--cluster")
    queue.add_argument("--gpu-type")
    _limit(queue)

    model = command("models", models.cmd_models_list, "registered models (and: versions, create, register)")
    model.add_argument("--department")
    _limit(model)
    model_commands = model.add_subparsers(metavar="SUBCOMMAND")
    versions = model_commands.add_parser("versions", parents=[common], help="a model's versions")
    versions.set_defaults(func=models.cmd_models_versions)
    versions.add_argument("model", metavar="NAME")
    _limit(versions)
    create = model_commands.add_parser("create", parents=[common], help="register a new model")
    create.set_defaults(func=models.cmd_models_create)
    create.add_argument("model", metavar="NAME")
    create.add_argument("--department")
    create.add_argument("--description", default="")
    register = model_commands.add_parser("register", parents=[common], help="register a version of a model")
    register.set_defaults(func=models.cmd_models_register)
    register.add_argument("model", metavar="NAME")
    register.add_argument("--job", type=int, metavar="ID", help="a succeeded job whose output holds the artifact")
    register.add_argument("--artifact-path", default="model.joblib", help="inside the job's PORTAL_OUTPUT_DIR")
    register.add_argument("--artifact-uri", help="store://... or file://... instead of a job")
    register.add_argument("--framework")
    register.add_argument("--metric", action="append", metavar="NAME=NUMBER")
    register.add_argument("--tag", action="append", metavar="KEY=VALUE")
    register.add_argument(
        "--no-wait",
        dest="wait",
        action="store_false",
        help="answer at once while the portal copies the artifact (default: wait until ready or failed)",
    )

    deploy = command("deploy", models.cmd_deploy, "create a deployment of a model's versions")
    deploy.add_argument("name", metavar="NAME")
    deploy.add_argument("--model", required=True)
    deploy.add_argument("--version", type=int, help="one variant with all the traffic")
    deploy.add_argument(
        "--variant",
        action="append",
        metavar="NAME=VERSION:WEIGHT",
        help="a variant (repeatable); weights sum to 100; NAME=VERSION:shadow mirrors traffic",
    )
    deploy.add_argument("--strategy", choices=["ab", "canary", "rolling", "shadow"], default="ab")
    deploy.add_argument("--sticky", action=argparse.BooleanOptionalAction, help="same routing key, same variant")
    deploy.add_argument("--department", help="default: the model's")
    deploy.add_argument("--cluster")

    promote = command("promote", models.cmd_promote, "give one variant all the traffic")
    promote.add_argument("name", metavar="NAME")
    promote.add_argument("variant", metavar="VARIANT")

    rollback = command("rollback", models.cmd_rollback, "go back to the deployment's previous variants")
    rollback.add_argument("name", metavar="NAME")

    deployments = command("deployments", models.cmd_deployments, "deployments and their variants")
    deployments.add_argument("--department")
    _limit(deployments)
    return parser


GLOBAL_DEFAULTS = {"url": None, "token": None, "output": "table", "timeout": 30.0}


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    # Defaults of the global options are filled in here, not with set_defaults: the parsers share the option
    # objects of `common`, and a default set on one would overwrite the value given before the command.
    args = build_parser().parse_args(argv)  # exits 2 on a usage error
    for key, value in GLOBAL_DEFAULTS.items():
        if not hasattr(args, key):
            setattr(args, key, value)
    return args


def _limit(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--limit", type=int, metavar="N", help="at most N rows (the portal allows up to 200; default 50)"
    )


def _raw(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--raw",
        action="store_true",
        help="write the log's bytes as the job wrote them, escape sequences included "
        "(default: control characters shown as \\x1b, \\x07, ...; a carriage return ends the line)",
    )


def number(text: str) -> int | float:
    value = float(text)
    return int(value) if value.is_integer() else value


def cmd_login(ctx: Context, args) -> int:
    if args.password_stdin:
        password = sys.stdin.readline().rstrip("\r\n")
    else:
        password = getpass.getpass(f"Password for {args.username} at {ctx.client.url}: ")
    body = {"username": args.username, "password": password}
    if args.expires_in_days is not None:
        body["expires_in_days"] = args.expires_in_days
    token = ctx.client.post("/api/v1/auth/token/", body)["token"]
    path = config.write_file(ctx.client.url, token)
    me = Client(ctx.client.url, token, timeout=ctx.client.timeout).get("/api/v1/me/")
    if ctx.output == "json":
        output.print_json({"url": ctx.client.url, "username": me["username"], "config": str(path)})
    else:
        output.say(f"Logged in to {ctx.client.url} as {me['username']}; url and token stored in {path}")
    if os.environ.get("PORTAL_TOKEN") or os.environ.get("PORTAL_URL"):
        print("portalctl: note: PORTAL_URL / PORTAL_TOKEN are set and win over the config file", file=sys.stderr)
    return OK


def cmd_whoami(ctx: Context, args) -> int:
    me = ctx.me()
    if ctx.output == "json":
        output.print_json(me)
        return OK
    output.say(me["username"] + (" (platform admin)" if me["is_platform_admin"] else "") + f" at {ctx.client.url}")
    output.table(
        me["departments"],
        [("DEPARTMENT", lambda d: d["slug"]), ("NAME", lambda d: d["name"]), ("ROLE", lambda d: d["role"])],
        empty="Member of no department.",
    )
    return OK


def main(argv: list[str] | None = None) -> int:
    for stream in (sys.stdout, sys.stderr):  # a name the terminal's encoding lacks is shown escaped, not a crash
        if hasattr(stream, "reconfigure"):
            stream.reconfigure(errors="backslashreplace")
    args = parse_args(argv)
    client = None
    try:
        settings = config.resolve(url=args.url, token=args.token, need_token=getattr(args, "need_token", True))
        client = Client(settings.url, settings.token, timeout=args.timeout)
        return args.func(Context(client, args.output), args)
    except (UsageError, config.ConfigError) as exc:
        output.say(f"portalctl: error: {exc}", file=sys.stderr)
        return USAGE
    except ApiError as exc:
        output.say(f"portalctl: error: {exc.message}", file=sys.stderr)
        for line in output.error_lines(exc.errors) if exc.errors else []:
            output.say(f"  {line}", file=sys.stderr)
        if exc.exit_code == AUTH and exc.status == 401:
            print("  (check the token: --token, PORTAL_TOKEN, or `portalctl login`)", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:  # `portalctl logs 7 | head`: the reader has gone; say nothing more, fail nothing
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # Python's flush at exit would fail again
        return OK
    finally:
        if client is not None:
            client.close()
