"""Celery tasks for jobs: each takes an id and calls one service."""

from celery import shared_task

from jobs import retention, running


@shared_task
def launch_job(job_id: int) -> None:
    running.job_launch(job_id=job_id)


@shared_task
def cancel_job(job_id: int) -> None:
    running.job_stop_on_executor(job_id=job_id)


@shared_task(expires=30)
def reconcile_jobs() -> None:
    running.jobs_reconcile()


@shared_task(expires=600)
def collect_garbage() -> None:
    running.jobs_collect_garbage()


@shared_task(expires=3000)
def clean_up_job_files() -> None:
    retention.jobs_files_clean_up()
