"""The one way webhooks reach the outside: URL rules, the SSRF guard and the POST itself.

No Django here: the caller passes ``allow_private`` (settings.PORTAL_WEBHOOK_ALLOW_PRIVATE).

The SSRF guard refuses loopback, private, link-local (cloud metadata at 169.254.169.254), shared,
multicast and reserved addresses. It runs when a webhook is saved and again at every delivery, on the
addresses the host resolves to *then*; the request is sent to the address that was checked (the name
still goes in the Host header and TLS SNI), so a DNS answer that changes between check and connect
cannot steer it inside. Redirects are not followed: a 3xx counts as a failed attempt.
"""

from __future__ import annotations

import ipaddress
import socket
from dataclasses import dataclass
from urllib.parse import urlsplit

import httpx

SCHEMES = ("http", "https")
EXCERPT_BYTES = 1024


class OutboundError(Exception):
    """The delivery did not get an HTTP answer (refused address, DNS, connection, timeout)."""


@dataclass(frozen=True)
class Answer:
    status: int
    excerpt: str


def url_problems(url: str) -> list[str]:
    """What is wrong with the URL itself, in words a person can act on (empty when fine)."""
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as exc:
        return [f"This is not a valid URL ({exc}); write it like https://hooks.example.com/portal."]
    problems = []
    if parts.scheme not in SCHEMES:
        problems.append("Use an http:// or https:// URL.")
    if parts.username is not None or parts.password is not None:
        problems.append("Do not put a user name or password in the URL; the signature authenticates deliveries.")
    if not parts.hostname:
        problems.append("The URL has no host; write it like https://hooks.example.com/portal.")
    if parts.fragment:
        problems.append("Remove the #fragment: it is never sent to the server.")
    if port == 0:
        problems.append("Port 0 cannot be connected to.")
    return problems


def address_problem(address: str) -> str | None:
    """Why deliveries may not go to this IP address, or None when it is a public one."""
    ip = ipaddress.ip_address(address.split("%", 1)[0])
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped:
        ip = ip.ipv4_mapped
    if ip.is_global and not ip.is_multicast:
        return None
    kind = (
        "a loopback"
        if ip.is_loopback
        else "a link-local (cloud metadata)"
        if ip.is_link_local
        else "a private"
        if ip.is_private
        else "a non-public"
    )
    return f"{ip} is {kind} address; webhooks may only call public addresses."


def resolve(host: str, port: int) -> list[str]:
    """The host's addresses (an IP literal is its own); OutboundError when the name does not resolve."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (socket.gaierror, UnicodeError) as exc:
        raise OutboundError(f"The host {host!r} could not be resolved ({exc}).") from exc
    return list(dict.fromkeys(info[4][0] for info in infos))


def destination_problems(url: str, *, allow_private: bool) -> list[str]:
    """Problems of a URL being saved: its form, and the addresses it resolves to now.

    A name that does not resolve yet is accepted (it is checked again at each delivery).
    """
    problems = url_problems(url)
    if problems or allow_private:
        return problems
    parts = urlsplit(url)
    try:
        addresses = resolve(parts.hostname, _port(parts))
    except OutboundError:
        return []
    return sorted({problem for problem in map(address_problem, addresses) if problem})


def post(url: str, *, body: bytes, headers: dict[str, str], timeout: float, allow_private: bool) -> Answer:
    """POST ``body``; the status and the first KB of the answer. Raises OutboundError without an answer."""
    problems = url_problems(url)
    if problems:
        raise OutboundError(" ".join(problems))
    parts = urlsplit(url)
    addresses = resolve(parts.hostname, _port(parts))
    if not allow_private:
        refused = [problem for problem in map(address_problem, addresses) if problem]
        if refused:
            raise OutboundError(f"Not sent: {parts.hostname} resolves to {refused[0]}")
    extensions = {"sni_hostname": parts.hostname} if parts.scheme == "https" else {}
    headers = {**headers, "Host": parts.netloc.rsplit("@", 1)[-1]}
    # trust_env=False: a proxy from the environment would connect by name again, around the address check.
    with httpx.Client(timeout=timeout, follow_redirects=False, trust_env=False) as client:
        for index, address in enumerate(addresses):
            target = httpx.URL(url).copy_with(host=address.split("%", 1)[0])
            try:
                with client.stream("POST", target, content=body, headers=headers, extensions=extensions) as response:
                    return Answer(status=response.status_code, excerpt=_excerpt(response))
            except httpx.ConnectError as exc:
                if index + 1 < len(addresses):
                    continue  # e.g. a name with an IPv6 address whose server listens on IPv4 only
                raise OutboundError(f"Could not connect to {parts.hostname}: {exc}.") from exc
            except httpx.TimeoutException as exc:
                raise OutboundError(f"No answer within {timeout:g} s.") from exc
            except httpx.HTTPError as exc:
                raise OutboundError(f"Could not deliver: {exc or type(exc).__name__}.") from exc
    raise OutboundError(f"The host {parts.hostname!r} has no address.")


def _port(parts) -> int:
    return parts.port or (443 if parts.scheme == "https" else 80)


def _excerpt(response: httpx.Response) -> str:
    chunks, size = [], 0
    for chunk in response.iter_raw():
        chunks.append(chunk)
        size += len(chunk)
        if size >= EXCERPT_BYTES:
            break
    return b"".join(chunks)[:EXCERPT_BYTES].decode("utf-8", errors="replace")
