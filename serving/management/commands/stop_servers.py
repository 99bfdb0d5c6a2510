"""`python manage.py stop_servers`: stop the model servers and TensorBoards that run as processes on this host.

They are started detached, in sessions of their own, so that they outlive the request or task that started
them; stopping the portal's programs therefore does not stop them. `make run` (platform/supervise.sh) runs
this once supervisord has stopped every program. Model servers are marked stopped and started again by the
next run's reconcile; TensorBoards start again when next opened. InferenceServices and boards on Kubernetes
clusters, and job supervisors, are left running.
"""

from __future__ import annotations

from django.core.management.base import BaseCommand

from serving.servers import servers_stop_local
from tensorboards import services as boards


class Command(BaseCommand):
    help = "Stop the model servers and TensorBoards running as processes on this host (after the portal stopped)."

    def handle(self, *args, **options) -> None:
        servers = servers_stop_local()
        stopped_boards = boards.boards_stop_local()
        self.stdout.write(f"Stopped {servers} model server(s) and {stopped_boards} TensorBoard(s) on this host.")
