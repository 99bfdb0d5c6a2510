"""Celery tasks of serving: each calls one service."""

from celery import shared_task

from serving import servers, services


@shared_task(expires=10)
def reconcile_servers() -> None:
    """Model servers (start, notice ready or dead, restart, stop orphans), then one step of running rollouts."""
    servers.servers_reconcile()
    services.deployments_progress()
