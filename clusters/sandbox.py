"""The sandbox of the local executor: bubblewrap (``bwrap``) namespaces, and slirp4netns for the network.

Owns what a process started for a job can see and reach, and starting it that way:
- a read-only system (/usr, /etc less the portal's files, the Python the job's environment is based on), a
  fresh /proc of its own PID namespace, a /dev with only the null devices, a /dev/shm and the GPUs it was
  given, and the folders the caller binds (its code, output, checkpoint, TensorBoard folder, environment,
  storage mounts) at the paths it names, read-only unless the bind says otherwise; nothing else of the host;
- PID, IPC, UTS, cgroup and network namespaces of its own. The network namespace has its loopback and, when
  asked, a slirp4netns tap for outbound traffic started with ``--disable-host-loopback``: the host's loopback
  services (PostgreSQL, Redis, the broker, TensorBoards, model servers) are out of reach, the internet is not.
  slirp4netns rather than pasta: Debian 12's passt is a 2023 snapshot, while slirp4netns 1.2 is the network
  rootless Podman and Buildah have run for years, and its ``--disable-host-loopback`` and ``--exit-fd`` say
  exactly what we need (no loopback; end with the sandbox);
- a uid that is not the portal's: when the portal runs as root, bwrap runs as root (no user namespace) and
  ``setpriv`` drops the command to the given uid/gid with no capabilities and no_new_privs; an ordinary portal
  user gets an unprivileged user namespace instead and the job keeps the portal's uid on the host.
When the sandbox's first process ends, its PID namespace and everything in it end with it (the kernel kills
them), and the slirp4netns process follows because the sandbox held the other end of its exit fd.
No Django, no job knowledge: the runner says what to bind. This module builds the bwrap command line (and the
servers' sandboxes); starting one and bringing its network up is sandbox_start.py's.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import sys
import time
from pathlib import Path

SYSTEM_LINKS = ("bin", "sbin", "lib", "lib32", "lib64", "libx32")
# Files of /etc a job has no business reading even where their mode would let it.
HIDDEN_ETC = (
    "/etc/shadow",
    "/etc/gshadow",
    "/etc/shadow-",
    "/etc/gshadow-",
    "/etc/ssh",
    "/etc/sudoers",
    "/etc/sudoers.d",
    "/etc/postgresql",
    "/etc/redis",
    "/etc/gpu-portal",
    "/etc/machine-id",
)
GPU_CONTROL_DEVICES = (
    "/dev/nvidiactl",
    "/dev/nvidia-uvm",
    "/dev/nvidia-uvm-tools",
    "/dev/nvidia-modeset",
    "/dev/nvidia-caps",
    "/dev/dri",
)
SYSTEM = {"/usr", "/etc", "/sys", *(f"/{name}" for name in SYSTEM_LINKS)}  # bound read-only as they are
DNS = "10.0.2.3"  # slirp4netns's built-in resolver


class SandboxError(Exception):
    """The sandbox could not be set up (a missing tool, a refused namespace)."""


@dataclasses.dataclass(frozen=True)
class Bind:
    source: str
    target: str
    writable: bool = False


@dataclasses.dataclass(frozen=True)
class Sandbox:
    """One sandboxed command: what it runs, as whom, and what it sees."""

    argv: list[str]
    cwd: str
    env: dict[str, str]
    binds: tuple[Bind, ...] = ()
    uid: int | None = None  # None: keep the caller's uid (only in a user namespace, for a portal that is not root)
    gid: int | None = None
    groups: tuple[int, ...] = ()  # supplementary groups (e.g. of the GPU device nodes)
    network: bool = False  # outbound traffic through slirp4netns; always its own namespace either way
    gpus: tuple[int, ...] = ()  # /dev/nvidiaN of these indices, and the control devices, when they exist
    files: tuple[tuple[str, str], ...] = ()  # (target, content): small files written for it (passwd, resolv.conf)
    as_pid_1: bool = False  # the command itself is the namespace's init (it must reap and handle signals)
    host_network: bool = False  # the portal's own servers: they listen on the host's loopback for the portal
    tmp_size: int | None = None  # a private tmpfs /tmp of this many bytes (when nothing is bound there)
    new_session: bool = True  # its own session (no terminal to push input into); servers stay in their starter's group
    die_with_parent: bool = False  # ends when the process that started it ends (setup steps, not jobs)


def available() -> list[str]:
    """What is missing on this host to run sandboxes ([] when nothing is)."""
    missing = [tool for tool in ("bwrap", "slirp4netns") if shutil.which(tool) is None]
    if os.geteuid() == 0 and not shutil.which("setpriv"):
        missing.append("setpriv")
    problems = [
        f"{tool} is not installed (Debian: apt-get install {'bubblewrap' if tool == 'bwrap' else tool})"
        for tool in missing
    ]
    if not os.access("/dev/net/tun", os.R_OK | os.W_OK):
        problems.append(
            "/dev/net/tun cannot be opened by the portal's user (slirp4netns needs it; it is 0666 on Debian)"
        )
    return problems


def gpu_devices(gpus: tuple[int, ...]) -> list[str]:
    """Device nodes of the GPUs given, plus the driver's control nodes; [] where the host has no NVIDIA GPU."""
    nodes = [f"/dev/nvidia{index}" for index in gpus if os.path.exists(f"/dev/nvidia{index}")]
    if not nodes:
        return []
    return nodes + [path for path in GPU_CONTROL_DEVICES if os.path.exists(path)]


def bwrap_argv(box: Sandbox, *, files_dir: Path, info_fd: int | None, block_fd: int | None) -> list[str]:
    """The bwrap command line for ``box`` (``files_dir`` holds the small files it gets)."""
    argv = [
        "bwrap",
        "--unshare-pid",
        *([] if box.host_network else ["--unshare-net"]),
        "--unshare-ipc",
        "--unshare-uts",
        "--unshare-cgroup-try",
        *(["--new-session"] if box.new_session else []),
        "--hostname",
        "sandbox",
    ]
    if info_fd is not None:
        argv += ["--info-fd", str(info_fd)]
    if block_fd is not None:
        argv += ["--block-fd", str(block_fd)]
    root = os.geteuid() == 0
    if not root:
        argv += ["--unshare-user"]
    if box.die_with_parent:
        argv.append("--die-with-parent")
    if box.as_pid_1:
        argv.append("--as-pid-1")
    made: set[str] = set()  # folders created in the sandbox
    bound = set(SYSTEM) | {"/proc", "/dev"}  # folders that are mounts (what is under them comes from the mount)
    argv += ["--ro-bind", "/usr", "/usr"]
    for name in SYSTEM_LINKS:
        path = f"/{name}"
        if os.path.islink(path):
            argv += ["--symlink", os.readlink(path), path]
        elif os.path.isdir(path):
            argv += ["--ro-bind", path, path]
    argv += ["--ro-bind", "/etc", "/etc", "--ro-bind-try", "/sys", "/sys"]
    for hidden in HIDDEN_ETC:
        if os.path.isdir(hidden) and not os.path.islink(hidden):
            argv += ["--tmpfs", hidden]
        elif os.path.lexists(hidden):
            argv += ["--ro-bind", "/dev/null", hidden]
    argv += ["--proc", "/proc", "--dev", "/dev", "--perms", "1777", "--tmpfs", "/dev/shm"]
    if box.tmp_size:
        argv += ["--size", str(box.tmp_size), "--perms", "1777", "--tmpfs", "/tmp"]
        made.add("/tmp")  # an empty tmpfs: folders for binds under it are made like those under /
    for node in gpu_devices(box.gpus):
        argv += ["--dev-bind", node, node]
    for index, (target, content) in enumerate(box.files):
        source = files_dir / f"file-{index}"
        source.write_text(content)
        target = _through_links(target)
        argv += _parents(target, made, bound) + ["--ro-bind", str(source), target]
    for bind in box.binds:
        if not bind.writable and bind.source == bind.target and _covered(bind.target, SYSTEM):
            continue  # already visible through a system bind
        argv += _parents(bind.target, made, bound) + [
            "--bind" if bind.writable else "--ro-bind",
            bind.source,
            bind.target,
        ]
        bound.add(bind.target)
    argv += ["--chdir", box.cwd, "--clearenv"]
    for name, value in box.env.items():
        argv += ["--setenv", name, value]
    argv.append("--")
    if root and box.uid is not None:
        groups = ",".join(str(g) for g in box.groups)
        argv += [
            "setpriv",
            "--reuid",
            str(box.uid),
            "--regid",
            str(box.gid if box.gid is not None else box.uid),
            f"--groups={groups}" if groups else "--clear-groups",
            "--inh-caps=-all",
            "--bounding-set=-all",
            "--no-new-privs",
            "--",
        ]
    return argv + list(box.argv)


def _covered(path: str, made: set[str]) -> bool:
    return any(path == top or path.startswith(top.rstrip("/") + "/") for top in made)


def _parents(target: str, made: set[str], bound: set[str]) -> list[str]:
    """--dir for each ancestor of ``target`` not yet in the sandbox, readable by anyone (bwrap would copy the
    host's modes, and /root is 0700). Ancestors inside a mount come from that mount."""
    argv = []
    parts = Path(target).parts[1:-1]
    for depth in range(1, len(parts) + 1):
        folder = "/" + "/".join(parts[:depth])
        if folder in made or _covered(folder, bound):
            continue
        argv += ["--perms", "0755", "--dir", folder]
        made.add(folder)
    return argv


def _through_links(target: str) -> str:
    """Where a file bound over ``target`` must go when the host's ``target`` is a symlink (resolv.conf often is)."""
    seen = 0
    while os.path.islink(target) and seen < 8:
        target = os.path.normpath(os.path.join(os.path.dirname(target), os.readlink(target)))
        seen += 1
    return target


NOBODY = 65534


def server_argv(argv: list[str], *, readable: list[str], env: dict[str, str], cwd: str = "/tmp") -> list[str]:
    """A server of the portal's (a TensorBoard, a model server) that reads what jobs wrote, in a sandbox of its own.

    What a job leaves for it (event files with links in them, a pickled model) is a stranger's, so it sees only
    ``readable`` (read-only, at the same paths) besides the system and the Python it runs on, runs as nobody with
    no capabilities in a PID namespace of its own, and has a small private /tmp. It keeps the host's network: it
    listens on the portal's loopback, which jobs cannot reach. It stays in the process group it is started in (no
    new session, no --die-with-parent: its starter is a shell that exits at once), so stopping that group
    (local_procs.stop_detached) stops the sandbox and the server in it. Its output has no terminal anyway.
    The server is its PID namespace's first process: record it with ``server_pid`` (when it ends, for whatever
    reason, the namespace and bwrap end with it).
    """
    prefixes = {os.path.realpath(sys.prefix), os.path.realpath(sys.base_prefix), sys.prefix}
    binds = [Bind(path, path) for path in sorted(prefixes)] + [
        Bind(path, path) for path in readable if os.path.exists(path)
    ]
    box = Sandbox(
        argv=argv,
        cwd=cwd,
        env={**env, "HOME": "/tmp", "TMPDIR": "/tmp"},
        binds=tuple(binds),
        uid=NOBODY if os.geteuid() == 0 else None,
        gid=NOBODY if os.geteuid() == 0 else None,
        host_network=True,
        tmp_size=256 * 1024 * 1024,
        new_session=False,
        as_pid_1=True,
    )
    return bwrap_argv(box, files_dir=Path("/nonexistent"), info_fd=None, block_fd=None)


def server_pid(bwrap_pid: int, timeout: float = 10) -> int:
    """The host pid of the server a server_argv sandbox runs (bwrap's one child), once it has one."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            children = Path(f"/proc/{bwrap_pid}/task/{bwrap_pid}/children").read_text().split()
        except OSError:
            raise SandboxError("the server's sandbox ended before its server started") from None
        if children:
            return int(children[0])
        time.sleep(0.005)
    raise SandboxError("the server's sandbox did not start its server in time")


def passwd_files(uid: int, gid: int, home: str) -> tuple[tuple[str, str], ...]:
    """/etc/passwd and /etc/group with an entry for the sandbox's user (ssh and some tools insist on one)."""

    def read(path: str) -> str:
        try:
            return Path(path).read_text()
        except OSError:
            return ""

    passwd = "".join(line + "\n" for line in read("/etc/passwd").splitlines() if line)
    group = "".join(line + "\n" for line in read("/etc/group").splitlines() if line)
    if f":x:{uid}:" not in passwd:
        passwd += f"job:x:{uid}:{gid}:GPU Portal job:{home}:/bin/bash\n"
    if f":x:{gid}:" not in group:
        group += f"job:x:{gid}:\n"
    return (("/etc/passwd", passwd), ("/etc/group", group))
