import json
import os
import shlex

from django.conf import settings
from django.core.management.base import BaseCommand

from clusters.cluster_settings import cluster_warnings
from clusters.inventory import detect_local_gpus
from clusters.models import Cluster
from demo.data import demo_load, publish_example_repo


class Command(BaseCommand):
    help = "Load the demo departments, users, the local cluster and k8s-demo (idempotent) and print the logins."

    def add_arguments(self, parser):
        parser.add_argument("--url", default=f"http://127.0.0.1:{settings.PORTAL_PORT}/", help="URL to print")

    def handle(self, *args, url, **options):
        result = demo_load(
            data_root=settings.PORTAL_DATA_ROOT,
            pools=detect_local_gpus(),
            password=os.environ.get("PORTAL_DEMO_PASSWORD") or None,
            with_kubernetes=True,
        )
        out = self.stdout
        out.write("")
        out.write(self.style.SUCCESS(f"GPU Portal: {url}"))
        out.write(f"  API docs:  {url}api/v1/docs/")
        for pool in result.pools:
            kind = "simulated" if pool.simulated else "detected with nvidia-smi"
            out.write(f"  GPUs:      {pool.gpus} x {pool.gpu_type} ({kind}) in cluster 'local'")
        out.write(
            "  Cluster 'k8s-demo' (a rendering-only example: kubernetes, no cluster behind it, takes no jobs): "
            "preview its manifests with `python manage.py render_manifests --spec SPEC.json`"
        )
        for cluster in Cluster.objects.filter(backend=Cluster.Backend.LOCAL):
            for warning in cluster_warnings(cluster=cluster):
                out.write(self.style.WARNING(f"  WARNING: {warning}"))
        out.write(f"  Demo logins (password: {result.password}  from {result.password_source}):")
        for username, what in result.users:
            out.write(f"    {username:<6} {what}")
        repo = publish_example_repo(
            source=settings.BASE_DIR / "examples" / "digits", target=settings.PORTAL_DATA_ROOT / "repos" / "digits"
        )
        # No key is printed: this output ends up in logs. It says how alice gets one of her own.
        body = json.dumps(
            {
                "name": "digits",
                "department": "vision",
                "code_url": repo,
                "command": "python train.py --epochs 20",
                "gpus_per_worker": 1,
                "tensorboard": True,
            }
        )
        out.write("  Submit the example training job as alice. First get an API token (none is printed here):")
        out.write(f"    in the browser: sign in as alice, open {url}tokens/ and create one; or")
        out.write(f"    .venv/bin/portalctl login --url {url} --username alice   (stores it in portalctl's config); or")
        login = json.dumps({"username": "alice", "password": result.password})
        out.write(
            f"    TOKEN=$(curl -s -X POST {url}api/v1/auth/token/ -H 'Content-Type: application/json' "
            f"-d {shlex.quote(login)} | python3 -c 'import json, sys; print(json.load(sys.stdin)[\"token\"])')"
        )
        out.write("  then:")
        out.write(
            f'    curl -s -X POST {url}api/v1/jobs/ -H "Authorization: Token $TOKEN" '
            f"-H 'Content-Type: application/json' -d {shlex.quote(body)}"
        )
        out.write("")
