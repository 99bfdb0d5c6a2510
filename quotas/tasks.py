"""Celery tasks for quotas: each calls one service."""

from celery import shared_task

from quotas import services


@shared_task(expires=30)
def expire_quota_loans() -> None:
    services.loans_expire()
