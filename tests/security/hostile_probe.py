"""The hostile member of nlp's job: ``python probe.py`` in a repository the test writes, next to hints.json.

Standard library only (it runs in the job's own environment). It tries every attack of issue 14 with what an
attacker would know or could guess (the hints: pids, host paths and ports that a real attacker would find by
scanning /proc, the data root's well-known layout or the loopback ports), records what each attempt got, and
writes one verdict per attack to $PORTAL_OUTPUT_DIR/verdict.json (and prints it). It judges nothing: the test
decides what the outcome means for the isolation the job ran under.

Each attempt is {"ok": true, "value": ...} or {"ok": false, "error": "<errno name or exception>"}.
Last, it leaves two processes behind that try to outlive the job (their command lines carry the marker):
a ``setsid -f`` daemon, and a chain of DEPTH processes deep enough that a subreaper killing its orphans one
generation at a time gives up before reaching the end; both write a heartbeat file into the writable mount.
"""

from __future__ import annotations

import errno
import json
import os
import shutil
import signal
import socket
import sys
import sysconfig
import time

DEPTH = 64
# A heartbeat: the file named by argv[2] gets a growing counter every 0.1 s, for at most 300 s.
BEAT = (
    "import os, sys, time\n"
    "path, n, end = sys.argv[2], 0, time.monotonic() + 300\n"
    "while time.monotonic() < end:\n"
    "    n += 1\n"
    "    with open(path + '.tmp', 'w') as f:\n"
    "        f.write(str(n))\n"
    "    os.replace(path + '.tmp', path)\n"
    "    time.sleep(0.1)\n"
)
PORTAL_VARIABLES = ("DATABASE_URL", "REDIS_URL", "PORTAL_DATA_ROOT", "DJANGO_SECRET_KEY", "PORTAL_DEMO_PASSWORD")


def attempt(action) -> dict:
    try:
        return {"ok": True, "value": action()}
    except OSError as exc:
        name = errno.errorcode.get(exc.errno, "") if exc.errno else ""
        return {"ok": False, "error": name or type(exc).__name__}


def read(path: str) -> str:
    with open(path, "rb") as f:
        return f.read(300).decode("utf-8", "replace")


def write(path: str, text: str = "nlp was here\n") -> str:
    with open(path, "w") as f:
        f.write(text)
    return path


def connect(host: str, port: int) -> str:
    with socket.create_connection((host, port), timeout=2):
        return f"connected to {host}:{port}"


def portal_variables(pid: int) -> list[str]:
    with open(f"/proc/{pid}/environ", "rb") as f:
        names = {entry.split(b"=", 1)[0].decode(errors="replace") for entry in f.read().split(b"\0") if entry}
    return sorted(names & set(PORTAL_VARIABLES))


def processes() -> list[str]:
    found = []
    for name in sorted(os.listdir("/proc")):
        if name.isdigit():
            try:
                found.append(read(f"/proc/{name}/cmdline").replace("\0", " ").strip())
            except OSError:
                pass
    return found


def detach(devnull: int, run, *, new_session: bool = False) -> None:
    """In a forked child: no inherited output, then ``run`` (which execs); never back into the probe."""
    try:
        for fd in (0, 1, 2):
            os.dup2(devnull, fd)
        if new_session:
            os.setsid()
        run()
    finally:
        os._exit(127)


def chain(sleep: str, marker: str, beat: str) -> None:
    for level in range(DEPTH):
        if os.fork() != 0:
            os.execv(sleep, [f"{marker}-chain-{level}", "300"])  # holds the next generation as its child
    os.execv(sys.executable, [sys.executable, "-c", BEAT, f"{marker}-chain", beat])


def start_daemons(marker: str, folder: str) -> dict:
    """The setsid daemon and the deep chain; returns once both heartbeats exist (or after 10 s)."""
    beats = {"setsid": os.path.join(folder, f"{marker}-setsid"), "chain": os.path.join(folder, f"{marker}-chain")}
    for path in beats.values():
        if os.path.exists(path):
            os.unlink(path)
    devnull = os.open(os.devnull, os.O_RDWR)
    sleep = shutil.which("sleep")
    pid = os.fork()
    if pid == 0:
        detach(
            devnull,
            lambda: os.execvp(
                "setsid", ["setsid", "-f", sys.executable, "-c", BEAT, f"{marker}-setsid", beats["setsid"]]
            ),
        )
    os.waitpid(pid, 0)
    if os.fork() == 0:
        detach(devnull, lambda: chain(sleep, marker, beats["chain"]), new_session=True)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and not all(os.path.exists(path) for path in beats.values()):
        time.sleep(0.05)
    return {name: os.path.exists(path) for name, path in beats.items()}


def main() -> int:
    with open("hints.json") as f:
        hints = json.load(f)
    verdict = {"whoami": {"uid": os.getuid(), "cwd": os.getcwd()}}

    # 1. The portal's secrets, and who else runs here.
    verdict["environ"] = {who: attempt(lambda pid=pid: portal_variables(pid)) for who, pid in hints["pids"].items()}
    verdict["secret_files"] = {name: attempt(lambda p=path: read(p)) for name, path in hints["secret_files"].items()}
    verdict["processes"] = processes()

    # 2. The vision job's files while it runs.
    vision = hints["vision"]
    verdict["vision_files"] = {name: attempt(lambda p=path: read(p)) for name, path in vision["files"].items()}
    verdict["vision_output_write"] = attempt(lambda: write(os.path.join(vision["output"], "pwned.txt")))

    # 3. The environment: its own (read-only, per department) and vision's.
    plant = "import os; os.environ['PORTAL_PLANTED'] = 'by nlp'\n"
    site = sysconfig.get_paths()["purelib"]
    verdict["env"] = {
        "virtual_env": os.environ.get("VIRTUAL_ENV", ""),
        "own_pth": attempt(lambda: write(os.path.join(site, hints["planted"]), plant)),
        "own_file": attempt(lambda: write(os.path.join(os.environ["VIRTUAL_ENV"], "planted.txt"))),
        "vision_pth": attempt(lambda: write(os.path.join(vision["site_packages"], hints["planted"]), plant)),
    }

    # 3b. The portal's own code, which its processes import: the scheduler core and its compiled build.
    verdict["portal_code"] = {
        name: attempt(lambda p=path: write(os.path.join(p, hints["planted_code"])))
        for name, path in hints["portal_code"].items()
    }

    # 4. The broker and the datastores.
    verdict["network"] = {
        f"{host}:{port}": attempt(lambda h=host, p=port: connect(h, p)) for host, port in hints["tcp"]
    }
    verdict["broker_files"] = {
        path: attempt(lambda p=path: sorted(os.listdir(p)) if os.path.isdir(p) else read(p))
        for path in hints["broker_files"]
    }

    # 5. Another department's TensorBoard: its loopback port, and its process.
    board = hints["board"]
    verdict["board"] = {
        "connect": attempt(lambda: connect("127.0.0.1", board["port"])),
        "kill": attempt(lambda: os.kill(board["pid"], signal.SIGTERM)),
    }

    # 5b. A link in its own TensorBoard folder to vision's, for the portal's TensorBoard (outside) to follow.
    link = os.path.join(os.environ["TENSORBOARD_LOG_DIR"], f"stolen-{hints['marker']}")
    verdict["tensorboard_link"] = attempt(lambda: os.symlink(vision["tensorboard"], link) or link)

    # 7. Storage mounts at the paths asked for.
    ro, rw = hints["mounts"]["read_only"], hints["mounts"]["writable"]
    verdict["mounts"] = {
        "read_only_env": os.environ.get(ro["env"], ""),
        "writable_env": os.environ.get(rw["env"], ""),
        "read_at_path": attempt(lambda: read(os.path.join(ro["path"], "hello.txt"))),
        "write_read_only": attempt(lambda: write(os.path.join(os.environ[ro["env"]], "planted.txt"))),
        "write_read_only_at_path": attempt(lambda: write(os.path.join(ro["path"], "planted-at-path.txt"))),
        "write_writable": attempt(lambda: write(os.path.join(os.environ[rw["env"]], "written.txt"))),
    }

    # 6. Processes that try to outlive the job.
    verdict["daemons_started"] = start_daemons(hints["marker"], os.environ[rw["env"]])

    text = json.dumps(verdict, indent=1, sort_keys=True)
    with open(os.path.join(os.environ["PORTAL_OUTPUT_DIR"], "verdict.json"), "w") as f:
        f.write(text)
    print("verdict:", json.dumps(verdict, sort_keys=True), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
