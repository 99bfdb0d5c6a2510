from django.apps import AppConfig


class CoreConfig(AppConfig):
    name = "core"
    verbose_name = "Core"

    def ready(self):
        # The connection budget as a system check (database tag: `manage.py migrate`, `check --database`), and
        # one pool per process: a forked child (Celery's prefork pool) opens its own (core/db_busy.py).
        from core import db_busy, db_checks  # noqa: F401

        db_busy.install_fork_guard()
