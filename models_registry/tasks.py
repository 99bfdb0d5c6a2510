"""Celery tasks of the model registry: each calls one service."""

from celery import shared_task

from models_registry import deployments, servers, services


@shared_task(expires=10)
def reconcile_servers() -> None:
    """Model servers (start, notice ready or dead, restart, stop orphans), then one step of running rollouts."""
    servers.servers_reconcile()
    deployments.deployments_progress()


@shared_task
def copy_version_artifact(version_id: int) -> None:
    """A version registered from a job: copy its artifact into the store (ready, or failed with why)."""
    services.version_artifact_copy(version_id=version_id)
