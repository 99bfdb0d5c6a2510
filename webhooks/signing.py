"""Signing webhook deliveries, and how a receiver checks them. Pure module: no Django, no I/O.

Deliveries are signed by the Standard Webhooks specification (https://www.standardwebhooks.com, symmetric
scheme), with that project's own ``standardwebhooks`` library. Every delivery is a POST whose body is the JSON
event, with these headers (``delivery_headers`` makes them):

    webhook-id: 7f0c...                  (the event's id: the same on every retry and redelivery)
    webhook-timestamp: 1767225600        (Unix seconds when this attempt was sent)
    webhook-signature: v1,<base64>       (HMAC-SHA256 of "<id>.<timestamp>.<body>", keyed with the secret's key)
    X-Portal-Event: job.succeeded        (the event's name, also in the body)

Secrets are as the specification serialises them: ``whsec_`` + the standard base64 of 32 random bytes
(``new_secret``), and those bytes are the HMAC key (``secret_key``). A receiver verifies with any Standard
Webhooks library, given the secret as it was shown, e.g. in Python::

    from standardwebhooks import Webhook
    event = Webhook(secret).verify(raw_body_bytes, request_headers)  # raises WebhookVerificationError

which checks the signature in constant time on the raw body (before any JSON parsing: re-serialising changes
the bytes) and refuses timestamps more than five minutes from the receiver's clock, so a captured delivery
cannot be replayed later. Use webhook-id as an idempotency key: a retry after a lost answer carries the same id.
Answer 2xx within 10 seconds; anything else (or no answer) is retried with backoff.

Secrets made before Standard Webhooks signing (``"whsec_" + secrets.token_urlsafe(32)``) are the same kind of
32 random bytes, in the URL-safe base64 alphabet (``-`` and ``_`` instead of ``+`` and ``/``) and unpadded.
They are kept as they are, not migrated: ``secret_key`` reads either alphabet, so they sign the Standard
Webhooks headers with the bytes they encode. Rewriting them would change the text the deprecated
X-Portal-Signature below is keyed with, and receivers could not learn the new text anyway (a secret is shown
once). Standard Webhooks libraries read the standard alphabet only (some silently drop ``-`` and ``_``), so the
receiver of such a webhook either rotates its secret (the new one is in the standard form) or converts it once:
``standard_secret`` (replace ``-`` by ``+`` and ``_`` by ``/``, pad with ``=`` to a multiple of 4 characters).
A stored secret that is no base64 at all (never made by the portal) is keyed with its UTF-8 text.

Deprecated: the portal's own headers from before, still sent for one release so that existing receivers keep
working, then removed. Move receivers to the Standard Webhooks headers above.

    X-Portal-Delivery: 7f0c...            (the same as webhook-id)
    X-Portal-Timestamp: 1767225600        (the same as webhook-timestamp)
    X-Portal-Signature: sha256=<hex>      (HMAC-SHA256 of "<timestamp>.<body>" keyed with the secret's text as
                                           UTF-8, "whsec_" included; ``legacy_signature`` and ``legacy_verify``)
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import secrets
from datetime import UTC, datetime

from standardwebhooks import Webhook as StandardWebhook

SECRET_PREFIX = "whsec_"
SECRET_BYTES = 32  # the specification asks for 24 to 64
REPLAY_WINDOW_SECONDS = 300  # what the standardwebhooks library's verify allows, too
LEGACY_SIGNATURE_PREFIX = "sha256="
_URL_SAFE_TO_STANDARD = str.maketrans("-_", "+/")


def new_secret() -> str:
    """A new webhook secret in the Standard Webhooks form: ``whsec_`` + base64 of 32 random bytes."""
    return SECRET_PREFIX + base64.b64encode(secrets.token_bytes(SECRET_BYTES)).decode()


def secret_key(secret: str) -> bytes:
    """The HMAC key of a stored secret: its base64 (standard or URL-safe alphabet, padding optional) decoded."""
    text = secret.removeprefix(SECRET_PREFIX).translate(_URL_SAFE_TO_STANDARD)
    try:
        key = base64.b64decode(text + "=" * (-len(text) % 4), validate=True)
    except binascii.Error:
        key = b""
    return key or secret.encode()


def standard_secret(secret: str) -> str:
    """The secret as Standard Webhooks libraries read it; the stored text itself for every secret made now."""
    return SECRET_PREFIX + base64.b64encode(secret_key(secret)).decode()


def delivery_headers(*, secret: str, event: str, message_id: str, timestamp: int, body: bytes) -> dict[str, str]:
    """The headers that name and sign one attempt at sending ``body``: Standard Webhooks', X-Portal-Event and
    the deprecated X-Portal ones."""
    if "." in message_id:  # it is a field of the signed text, which dots delimit
        raise ValueError(f"a webhook-id may not contain a dot: {message_id!r}")
    sent_at = datetime.fromtimestamp(timestamp, tz=UTC)
    return {
        "webhook-id": message_id,
        "webhook-timestamp": str(timestamp),
        "webhook-signature": StandardWebhook(secret_key(secret)).sign(message_id, sent_at, body),
        "X-Portal-Event": event,
        # Deprecated, sent for one more release (see the module's docstring).
        "X-Portal-Delivery": message_id,
        "X-Portal-Timestamp": str(timestamp),
        "X-Portal-Signature": legacy_signature(secret=secret, timestamp=timestamp, body=body),
    }


def legacy_signature(*, secret: str, timestamp: int, body: bytes) -> str:
    """Deprecated: the X-Portal-Signature header value of ``body`` sent at ``timestamp``."""
    digest = hmac.new(secret.encode(), f"{timestamp}.".encode() + body, hashlib.sha256).hexdigest()
    return LEGACY_SIGNATURE_PREFIX + digest


def legacy_verify(
    *, secret: str, timestamp: str, body: bytes, header: str, now: float, window: int = REPLAY_WINDOW_SECONDS
) -> bool:
    """Deprecated: what a receiver of X-Portal-Signature runs: a correct signature of a delivery sent within
    ``window`` seconds of ``now``."""
    try:
        sent = int(timestamp)
    except (TypeError, ValueError):
        return False
    if abs(now - sent) > window:
        return False
    return hmac.compare_digest(legacy_signature(secret=secret, timestamp=sent, body=body), header or "")
