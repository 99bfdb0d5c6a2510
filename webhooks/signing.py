"""Signing webhook deliveries, and how a receiver checks them. Pure module: no Django, no I/O.

Every delivery is a POST whose body is the JSON event, with these headers:

    X-Portal-Event: job.succeeded
    X-Portal-Delivery: 7f0c...            (the event's id: the same on every retry and redelivery)
    X-Portal-Timestamp: 1767225600        (Unix seconds when this attempt was sent)
    X-Portal-Signature: sha256=<hex>      (HMAC-SHA256 of "<timestamp>.<body>" keyed with the webhook's secret)

A receiver verifies a delivery like this (``verify`` below does exactly that):

1. Take the raw request body as bytes, before any JSON parsing (re-serialising changes the bytes).
2. Compute ``hmac.new(secret, f"{timestamp}.".encode() + body, sha256).hexdigest()`` and compare it with
   the signature header using a constant-time comparison (``hmac.compare_digest``).
3. Refuse timestamps more than five minutes from its own clock: a captured delivery replayed later then
   fails, because the timestamp is inside the signed text and cannot be changed without the secret.
4. Treat X-Portal-Delivery as an idempotency key: a retry after a lost answer carries the same id.

Answer 2xx within 10 seconds; anything else (or no answer) is retried with backoff.
"""

from __future__ import annotations

import hashlib
import hmac

SIGNATURE_PREFIX = "sha256="
REPLAY_WINDOW_SECONDS = 300


def signature(*, secret: str, timestamp: int, body: bytes) -> str:
    """The X-Portal-Signature header value of ``body`` sent at ``timestamp``."""
    digest = hmac.new(secret.encode(), f"{timestamp}.".encode() + body, hashlib.sha256).hexdigest()
    return SIGNATURE_PREFIX + digest


def verify(*, secret: str, timestamp: str, body: bytes, header: str, now: float,
           window: int = REPLAY_WINDOW_SECONDS) -> bool:
    """What a receiver runs: a correct signature of a delivery sent within ``window`` seconds of ``now``."""
    try:
        sent = int(timestamp)
    except (TypeError, ValueError):
        return False
    if abs(now - sent) > window:
        return False
    return hmac.compare_digest(signature(secret=secret, timestamp=sent, body=body), header or "")
