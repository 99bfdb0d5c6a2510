import os

from django.conf import settings
from django.core.management.base import BaseCommand

from quotas.demo import demo_load
from quotas.inventory import detect_local_gpus


class Command(BaseCommand):
    help = "Load the demo departments, users and local cluster (idempotent) and print the logins."

    def add_arguments(self, parser):
        parser.add_argument("--url", default=f"http://127.0.0.1:{settings.PORTAL_PORT}/", help="URL to print")

    def handle(self, *args, url, **options):
        result = demo_load(
            data_root=settings.PORTAL_DATA_ROOT,
            pools=detect_local_gpus(),
            password=os.environ.get("PORTAL_DEMO_PASSWORD") or None,
        )
        out = self.stdout
        out.write("")
        out.write(self.style.SUCCESS(f"GPU Portal: {url}"))
        out.write(f"  API docs:  {url}api/v1/docs/")
        for pool in result.pools:
            kind = "simulated" if pool.simulated else "detected with nvidia-smi"
            out.write(f"  GPUs:      {pool.gpus} x {pool.gpu_type} ({kind}) in cluster 'local'")
        out.write(f"  Demo logins (password: {result.password}  from {result.password_source}):")
        for username, what in result.users:
            out.write(f"    {username:<6} {what}")
        out.write("")
