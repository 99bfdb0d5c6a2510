"""Celery tasks for webhooks: each takes ids and calls the outbox (outbox.py). None waits with a countdown:
a retry is a row whose next_attempt_at beat's ``send_due_deliveries`` reaches."""

from celery import shared_task

from webhooks import outbox


# A kick that waited this long in the broker is dropped: by then beat has sent the delivery.
@shared_task(expires=300)
def deliver(delivery_id: int, attempt: int | None = None) -> None:
    """The first attempt of a new delivery, at once. (``attempt`` is ignored: messages queued before the outbox
    carried it.)"""
    outbox.delivery_send(delivery_id=delivery_id)


@shared_task
def send_due_deliveries() -> None:
    """Beat, every PORTAL_WEBHOOK_POLL_SECONDS: claim and send the deliveries that are due."""
    outbox.deliveries_send_due()


@shared_task(expires=600)
def prune_deliveries() -> None:
    outbox.deliveries_prune()
