"""The webhook outbox: a pending delivery waits for its next attempt as a row in the database, never in a
worker's memory, and whichever worker claims it makes that attempt.

- Due: status pending, ``next_attempt_at`` passed, and no attempt holding it (``claimed_until`` empty or
  passed). The beat task (``deliveries_send_due``, every PORTAL_WEBHOOK_POLL_SECONDS) claims due deliveries
  one at a time and sends each. A new delivery's first attempt is also sent at once, by a task queued when
  its transaction commits (``delivery_send``); both claim the same way, so either may make it, never both.
- A claim is one short transaction, and no lock is held during the POST. On PostgreSQL the most overdue due
  row is locked with SELECT ... FOR UPDATE SKIP LOCKED (concurrent claimers take the next rows instead of
  queueing behind it); then an UPDATE conditional on the row still being due with the attempt count just
  read takes it: attempts + 1, ``claimed_until`` = now + ATTEMPT_LEASE. On SQLite (no row locks) that
  conditional UPDATE alone decides: of two claimers that read the same row, one updates it, the other
  updates nothing and looks again.
- An attempt's outcome is written only while the row still holds that attempt (``attempts`` unchanged), so a
  worker frozen past its lease that lost the delivery to another changes nothing.
- A worker that dies mid-attempt leaves its claim; once the lease has passed the delivery is due again and the
  next attempt is made with the same webhook-id (at-least-once delivery: receivers dedupe by that id).
- After failed attempt n the delivery waits PORTAL_WEBHOOK_RETRY_SECONDS x 4^(n-1), at most
  PORTAL_WEBHOOK_RETRY_MAX_SECONDS, +-20 % at random (deliveries that failed together, e.g. while a receiver
  was down, do not all come back at the same moment); after PORTAL_WEBHOOK_MAX_ATTEMPTS it is failed.
"""

from __future__ import annotations

import json
import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import transaction
from django.db.models import Q, QuerySet
from django.utils import timezone

from webhooks import outbound, signing
from webhooks.models import Delivery

PING = "ping"
TIMEOUT_SECONDS = 10  # httpx's per-operation timeout of the POST
# How long a claimed attempt may take before the delivery is taken for lost and claimed again: well over
# TIMEOUT_SECONDS for the connect, the upload and the answer's first KB.
ATTEMPT_LEASE = timedelta(seconds=120)
BACKOFF_FACTOR = 4
JITTER = 0.2
SEND_BUDGET_SECONDS = 10.0  # a beat run claims no further delivery after this long (the next run goes on)
SEND_BATCH = 100  # nor more than this many
CLAIM_TRIES = 5  # conditional updates lost to other claimers before a claimer gives up for this run
DELIVERY_LOG_DAYS = 30

Clock = Callable[[], datetime]
_jitter = random.SystemRandom()  # not the random module's state, which forked workers could share


@dataclass(frozen=True)
class Claim:
    delivery_id: int
    attempt: int  # the number of the attempt claimed, 1 for the first


def retry_wait(failed_attempt: int, *, first: float, longest: float, rng: random.Random = _jitter) -> float:
    """Seconds to wait after failed attempt ``failed_attempt`` (1, 2, ...) before the next."""
    wait = min(float(longest), first * float(BACKOFF_FACTOR) ** (failed_attempt - 1))
    return wait * rng.uniform(1 - JITTER, 1 + JITTER)


def due(now: datetime) -> QuerySet[Delivery]:
    """Deliveries whose next attempt may be made at ``now``."""
    return Delivery.objects.filter(status=Delivery.Status.PENDING, next_attempt_at__lte=now).filter(
        Q(claimed_until__isnull=True) | Q(claimed_until__lte=now)
    )


def claim(*, now: datetime, delivery_id: int | None = None) -> Claim | None:
    """Take the next attempt of one due delivery (that one, else the most overdue); None when none is due."""
    rows = due(now) if delivery_id is None else due(now).filter(pk=delivery_id)
    for _ in range(CLAIM_TRIES):
        with transaction.atomic():
            found = (
                rows.order_by("next_attempt_at", "pk")
                .select_for_update(skip_locked=True)  # PostgreSQL; SQLite has no row locks and ignores it
                .values_list("pk", "attempts")
                .first()
            )
            if found is None:
                return None
            pk, attempts = found
            taken = rows.filter(pk=pk, attempts=attempts).update(
                attempts=attempts + 1, claimed_until=now + ATTEMPT_LEASE, last_attempt_at=now
            )
        if taken:
            return Claim(delivery_id=pk, attempt=attempts + 1)
    return None


def delivery_body(delivery: Delivery) -> bytes:
    """The exact bytes sent (and signed): compact JSON with sorted keys, the same on every attempt."""
    return json.dumps(delivery.payload, separators=(",", ":"), sort_keys=True, ensure_ascii=False).encode()


def _post(delivery: Delivery) -> tuple[int | None, str, str]:
    """POST the delivery once: (status code, the answer's first KB, error); error empty when delivered."""
    webhook = delivery.webhook
    body = delivery_body(delivery)
    headers = {
        "Content-Type": "application/json",
        "User-Agent": "GPU-Portal-Webhooks/1",
        # webhook-id is the event id: the same on every retry and redelivery, for receivers to dedupe.
        **signing.delivery_headers(
            secret=webhook.secret,
            event=delivery.event,
            message_id=str(delivery.event_id),
            timestamp=int(time.time()),  # the real time of sending, which receivers check against theirs
            body=body,
        ),
    }
    try:
        answer = outbound.post(
            webhook.url,
            body=body,
            headers=headers,
            timeout=TIMEOUT_SECONDS,
            allow_private=settings.PORTAL_WEBHOOK_ALLOW_PRIVATE,
        )
    except outbound.OutboundError as exc:
        return None, "", str(exc)
    if not 200 <= answer.status < 300:
        return (
            answer.status,
            answer.excerpt,
            f"The receiver answered HTTP {answer.status}; any 2xx status counts as delivered.",
        )
    return answer.status, answer.excerpt, ""


def attempt_make(claimed: Claim, *, clock: Clock = timezone.now) -> str | None:
    """Make the claimed attempt and record it; the delivery's status after it (None: it is gone)."""
    delivery = Delivery.objects.select_related("webhook").filter(pk=claimed.delivery_id).first()
    if delivery is None:  # its webhook was deleted meanwhile
        return None
    if not delivery.webhook.active and delivery.event != PING:
        code, excerpt, error, give_up = None, "", "The webhook is deactivated; nothing was sent.", True
    else:
        (code, excerpt, error), give_up = _post(delivery), False
    finished = clock()
    fields: dict[str, Any] = {
        "response_code": code,
        "response_excerpt": excerpt,
        "error": error,
        "claimed_until": None,
        "next_attempt_at": None,
    }
    most = settings.PORTAL_WEBHOOK_MAX_ATTEMPTS
    if not error:
        fields.update(status=Delivery.Status.DELIVERED, delivered_at=finished)
    elif give_up:
        fields.update(status=Delivery.Status.FAILED)
    elif claimed.attempt >= most:
        fields.update(
            status=Delivery.Status.FAILED,
            error=f"{error} Gave up after {claimed.attempt} attempts; redeliver it once the receiver is fixed.",
        )
    else:
        wait = retry_wait(
            claimed.attempt,
            first=settings.PORTAL_WEBHOOK_RETRY_SECONDS,
            longest=settings.PORTAL_WEBHOOK_RETRY_MAX_SECONDS,
        )
        fields.update(next_attempt_at=finished + timedelta(seconds=wait))
    # Only while the row still holds this attempt: one whose lease passed may have been claimed again.
    Delivery.objects.filter(pk=claimed.delivery_id, status=Delivery.Status.PENDING, attempts=claimed.attempt).update(
        **fields
    )
    return str(fields.get("status", Delivery.Status.PENDING))


def _clock(now: datetime | None) -> Clock:
    return timezone.now if now is None else (lambda: now)


def delivery_send(*, delivery_id: int, now: datetime | None = None) -> bool:
    """Make the next attempt of this delivery if it is due and nobody holds it; whether one was made."""
    clock = _clock(now)
    claimed = claim(now=clock(), delivery_id=delivery_id)
    if claimed is None:
        return False
    attempt_make(claimed, clock=clock)
    return True


def deliveries_send_due(
    *, now: datetime | None = None, budget_seconds: float = SEND_BUDGET_SECONDS, limit: int = SEND_BATCH
) -> int:
    """Claim and send due deliveries one after another until none is due, ``limit`` were sent or
    ``budget_seconds`` have passed; how many attempts were made."""
    clock = _clock(now)
    started, made = time.monotonic(), 0
    while made < limit and time.monotonic() - started < budget_seconds:
        claimed = claim(now=clock())
        if claimed is None:
            break
        attempt_make(claimed, clock=clock)
        made += 1
    return made


def deliveries_prune(*, now: datetime | None = None) -> int:
    """Drop delivery log entries older than DELIVERY_LOG_DAYS that are over; how many."""
    cutoff = (now or timezone.now()) - timedelta(days=DELIVERY_LOG_DAYS)
    deleted, _ = Delivery.objects.exclude(status=Delivery.Status.PENDING).filter(created_at__lt=cutoff).delete()
    return deleted
