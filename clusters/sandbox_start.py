"""Starting a sandbox of clusters/sandbox.py: run bwrap with the command line ``bwrap_argv`` builds, wait
until it has set up its namespaces, bring up its slirp4netns network when it asked for one, then let its
command run; ``Started`` says which processes to watch and end. No Django, no job knowledge.
"""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import json
import os
import subprocess
import time
from pathlib import Path

from clusters.sandbox import Sandbox, SandboxError, bwrap_argv


@dataclasses.dataclass
class Started:
    proc: subprocess.Popen
    pid: int  # the sandbox's first process, as the host sees it: killing it ends the PID namespace
    net_pid: int | None  # slirp4netns


READ_SYSCALLS = {"0", "63"}  # read(2) on x86_64 and on aarch64


def start(box: Sandbox, *, files_dir: Path, stdout=None, stderr=None, pass_fds: tuple[int, ...] = ()) -> Started:
    """Start ``box`` in its own session and return once its network (if any) is up and its command runs."""
    files_dir.mkdir(parents=True, exist_ok=True)
    info_r, info_w = os.pipe()
    block_r, block_w = os.pipe()
    exit_r, exit_w = os.pipe() if box.network else (None, None)
    fds = [info_w, block_r, *pass_fds] + ([exit_w] if exit_w is not None else [])
    proc = None
    try:
        argv = bwrap_argv(box, files_dir=files_dir, info_fd=info_w, block_fd=block_r)
        block_fd_number = block_r
        try:
            proc = subprocess.Popen(
                argv, stdin=subprocess.DEVNULL, stdout=stdout, stderr=stderr, pass_fds=fds, start_new_session=True
            )
        except OSError as exc:
            raise SandboxError(f"cannot run bwrap: {exc}") from exc
        for fd in (info_w, block_r, exit_w):
            if fd is not None:
                os.close(fd)
        info_w = block_r = exit_w = None
        info = _read_info(info_r)
        if info is None:
            proc.wait(timeout=10)
            raise SandboxError(f"bwrap could not set up the sandbox (exit code {proc.returncode})")
        pid = info["child-pid"]
        if box.network:
            # slirp4netns --configure brings the namespace's loopback up too; while bwrap is still doing the
            # same, bwrap gives up ("loopback: Failed RTM_NEWADDR", 1 start in 10 under load). bwrap is done
            # with it once it waits on the block fd.
            _wait_blocked(pid, block_fd_number)
        net_pid = _start_network(pid, exit_r) if box.network else None
        try:
            os.write(block_w, b"1")
        except BrokenPipeError:
            proc.wait(timeout=10)
            raise SandboxError(f"bwrap could not set up the sandbox (exit code {proc.returncode})") from None
        return Started(proc, pid, net_pid)
    except BaseException:
        if proc is not None and proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, 9)
            proc.wait()
        raise
    finally:
        for fd in (info_r, info_w, block_r, block_w, exit_r, exit_w):
            if fd is not None:
                with contextlib.suppress(OSError):
                    os.close(fd)


def _read_info(fd: int) -> dict | None:
    data = b""
    while True:
        chunk = os.read(fd, 4096)
        if not chunk:
            break
        data += chunk
        with contextlib.suppress(ValueError):
            return json.loads(data)
    return None


def _wait_blocked(pid: int, fd: int, timeout: float = 5) -> None:
    """Until ``pid`` sits in read(2) on ``fd`` (its /proc/<pid>/syscall says so), or ``timeout`` passed."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            fields = Path(f"/proc/{pid}/syscall").read_text().split()
        except OSError:
            return  # gone, or not ours to look at: the start goes on and says what it finds
        if len(fields) > 1 and fields[0] in READ_SYSCALLS and int(fields[1], 16) == fd:
            return
        time.sleep(0.001)


NS_GET_USERNS = 0xB701  # ioctl on a namespace fd: the user namespace that owns it (linux/nsfs.h)


def _owning_userns(pid: int) -> int:
    net = os.open(f"/proc/{pid}/ns/net", os.O_RDONLY | os.O_CLOEXEC)
    try:
        return fcntl.ioctl(net, NS_GET_USERNS)
    except OSError as exc:
        raise SandboxError(f"cannot find the sandbox's user namespace: {exc}") from exc
    finally:
        os.close(net)


def _start_network(pid: int, exit_fd: int) -> int:
    ready_r, ready_w = os.pipe()
    argv = [
        "slirp4netns",
        "--configure",
        "--mtu=65520",
        "--disable-host-loopback",
        "--exit-fd",
        str(exit_fd),
        "--ready-fd",
        str(ready_w),
    ]
    fds = [exit_fd, ready_w]
    if os.geteuid() != 0:
        # The user namespace that owns the sandbox's network namespace: bwrap nests a second one (for /dev's
        # devpts) that the sandbox's process is in, and joining that one gives no rights over the network.
        userns = _owning_userns(pid)
        fds.append(userns)
        argv.append(f"--userns-path=/proc/self/fd/{userns}")
    try:
        net = subprocess.Popen(
            [*argv, str(pid), "tap0"],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            pass_fds=tuple(fds),
            start_new_session=True,
        )
    except OSError as exc:
        os.close(ready_r)
        os.close(ready_w)
        raise SandboxError(f"cannot run slirp4netns: {exc}") from exc
    finally:
        for fd in fds[2:]:
            os.close(fd)
    os.close(ready_w)
    try:
        ready = os.read(ready_r, 1)
    finally:
        os.close(ready_r)
    if ready != b"1":
        net.wait(timeout=10)
        raise SandboxError(f"slirp4netns could not set up the network: {net.stderr.read().decode(errors='replace')}")
    net.stderr.close()
    return net.pid
