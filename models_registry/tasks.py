"""Celery tasks of the model registry: each calls one service."""

from celery import shared_task

from models_registry import services


@shared_task
def copy_version_artifact(version_id: int) -> None:
    """A version registered from a job: copy its artifact into the store (ready, or failed with why)."""
    services.version_artifact_copy(version_id=version_id)
