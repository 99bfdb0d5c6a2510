"""Celery tasks for image builds: each takes an id and calls one service."""

from celery import shared_task

from images import services


@shared_task
def launch_build(build_id: int) -> None:
    services.build_launch(build_id=build_id)


@shared_task(expires=30)
def reconcile_builds() -> None:
    services.builds_reconcile()
