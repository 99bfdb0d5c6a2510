"""Celery tasks for TensorBoards: each calls one service."""

from celery import shared_task

from tensorboards import services


@shared_task(expires=60)
def reconcile_tensorboards() -> None:
    services.boards_reconcile()
