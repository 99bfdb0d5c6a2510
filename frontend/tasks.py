from celery import shared_task

from frontend import services


@shared_task
def notify_user(user_id: int, payload: dict) -> None:
    services.notify_user(user_id=user_id, payload=payload)
