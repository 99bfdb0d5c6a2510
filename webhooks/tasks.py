"""Celery tasks for webhooks: each takes ids and calls one service."""

from celery import shared_task

from webhooks import services


@shared_task(bind=True)
def deliver(self, delivery_id: int, attempt: int = 1) -> None:
    """Attempt ``attempt`` of a delivery; a failed one asks Celery for the next attempt after the backoff."""
    retry_in = services.delivery_attempt(delivery_id=delivery_id, attempt=attempt)
    if retry_in is not None:
        raise self.retry(args=[delivery_id, attempt + 1], countdown=retry_in, max_retries=services.MAX_ATTEMPTS)


@shared_task(expires=60)
def reconcile_deliveries() -> None:
    services.deliveries_reconcile()
