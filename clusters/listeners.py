"""Who listens on a TCP address of this host: the check that a TensorBoard or model server the portal
proxies to is still the process the portal started (issue 14, item 5).

Owns reading /proc/net/tcp and tcp6 (LISTEN sockets of the portal's network namespace) and the socket
links in /proc/<pid>/fd: listener_pids(host, port) and is_ours(pid, starttime, host, port). A job that
killed a server and bound its port holds the listening socket itself, so the port alone proves nothing.
A holder whose fds cannot be read (another uid) is not seen by listener_pids; is_ours asks the other way
round (does our process tree hold every listener there?), so an unseen holder is never taken for ours.
Reads only; no Django.
"""

from __future__ import annotations

import ipaddress
import os
import sys

from clusters import local_procs

LISTEN = "0A"  # the TCP state column of /proc/net/tcp
_ADDRESS = ipaddress.IPv4Address | ipaddress.IPv6Address


def listener_pids(host: str, port: int) -> set[int]:
    """Every process whose open fds include a LISTEN socket that answers connections to host:port.

    A socket bound to the wildcard address (0.0.0.0, ::) on that port answers them too, so it counts.
    Raises ValueError when ``host`` is not an IP address.
    """
    links = _sockets(host, port)
    if not links:
        return set()
    pids = set()
    for name in os.listdir("/proc"):
        if name.isdigit() and _holds(int(name), links):
            pids.add(int(name))
    return pids


def is_ours(pid: int | None, starttime: int | None, host: str, port: int) -> bool:
    """Is host:port served by the recorded process (pid + its start time, so a reused pid is not taken for
    it) or a descendant of it: does that process tree hold every LISTEN socket that answers there?

    Cheaper than listener_pids (it reads the fds of that tree only, not of every process). What it cannot
    see is a process sharing the very socket our server holds, which takes the portal's uid and ptrace
    rights over its server: that is the portal compromised, not a port taken.
    """
    if pid is None or not local_procs.alive(pid, starttime):
        return False
    links = _sockets(host, port)
    if not links:
        return False  # nobody listens there
    for member in _tree(pid):
        links -= _held(member, links)
        if not links:
            return True
    return False


def _sockets(host: str, port: int) -> set[str]:
    """The fd links ("socket:[inode]") of the LISTEN sockets of this network namespace that answer host:port."""
    wanted = ipaddress.ip_address(host)
    suffix = f":{port:04X}"
    found = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(table) as f:
                lines = f.read().splitlines()[1:]  # after the header
        except FileNotFoundError:  # a kernel without IPv6
            continue
        for line in lines:
            fields = line.split(None, 10)
            # Compared as printed first: the table holds every connection of the host, not only listeners.
            if (
                len(fields) > 9
                and fields[3] == LISTEN
                and fields[1].endswith(suffix)
                and _answers(_address(fields[1][: -len(suffix)]), wanted)
            ):
                found.add(f"socket:[{fields[9]}]")
    return found


def _address(hex_address: str) -> _ADDRESS:
    # The kernel prints each 32-bit word in host byte order.
    raw = bytes.fromhex(hex_address)
    words = b"".join(int.from_bytes(raw[i : i + 4], "big").to_bytes(4, sys.byteorder) for i in range(0, len(raw), 4))
    return ipaddress.ip_address(words)


def _answers(bound: _ADDRESS, wanted: _ADDRESS) -> bool:
    if isinstance(bound, ipaddress.IPv6Address) and bound.ipv4_mapped is not None:
        bound = bound.ipv4_mapped
    return bound == wanted or bound.is_unspecified


def _holds(pid: int, links: set[str]) -> bool:
    return bool(_held(pid, links))


def _held(pid: int, links: set[str]) -> set[str]:
    """Which of ``links`` the process has open (none when it is gone, or another uid's)."""
    found = set()
    try:
        with os.scandir(f"/proc/{pid}/fd") as entries:
            for entry in entries:
                try:
                    target = os.readlink(entry.path)
                except OSError:  # closed meanwhile
                    continue
                if target in links:
                    found.add(target)
    except OSError:
        pass
    return found


def _tree(pid: int):
    """The process and its descendants, the process first (it holds its own socket: usually the only look)."""
    queue, seen = [pid], set()
    while queue:
        member = queue.pop(0)
        if member in seen:
            continue
        seen.add(member)
        yield member
        queue.extend(_children(member))


def _children(pid: int) -> list[int]:
    children: list[int] = []
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return children
    for task in tasks:
        try:
            with open(f"/proc/{pid}/task/{task}/children") as f:
                children.extend(int(child) for child in f.read().split())
        except FileNotFoundError:  # a kernel without CONFIG_PROC_CHILDREN: look at every process's parent
            return [int(name) for name in os.listdir("/proc") if name.isdigit() and _parent(int(name)) == pid]
        except OSError:
            continue
    return children


def _parent(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            data = f.read()
    except OSError:
        return 0
    return int(data[data.rindex(b")") + 2 :].split()[1])  # after the state letter; the name may hold ')'
