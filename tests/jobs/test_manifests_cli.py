"""The render_manifests command: YAML that validates, a fractional job with its department, bad specs refused
with a message and a non-zero exit, and the Kubernetes defaults for what a cluster leaves unset."""

from __future__ import annotations

import io
import json
import re

import pytest
import yaml
from django.core.management import call_command
from django.core.management.base import CommandError

from clusters.inventory import SIMULATED
from clusters.manifest_validation import check_manifests
from demo.data import demo_load
from jobs.management.commands.render_manifests import Command as RenderManifests
from tests.jobs.manifest_helpers import (
    main_container,
)

# ------------------------------------------------------------------------------ render_manifests

BODY = {
    "name": "digits",
    "department": "vision",
    "cluster": "k8s-demo",
    "code_url": "https://git.example.com/team/repo.git",
    "code_ref": "main",
    "command": "python train.py",
    "image": "pytorch",
    "workers": 2,
    "gpus_per_worker": 4,
    "gpu_type": "V100",
    "priority": "high",
    "mounts": [{"storage": "vision-datasets", "path": "/data", "read_only": True}],
    "max_runtime_seconds": 7200,
    "id": "42-0f3a9c1e",
}


@pytest.fixture
def k8s_world(world, tmp_path):
    demo_load(data_root=tmp_path, pools=[SIMULATED], password=world.password, with_kubernetes=True)
    return world


def run_cli(tmp_path, body, *args) -> str:
    path = tmp_path / "spec.json"
    path.write_text(json.dumps(body) if not isinstance(body, str) else body)
    out = io.StringIO()
    call_command("render_manifests", "--spec", str(path), *args, stdout=out)
    return out.getvalue()


def test_render_manifests_prints_yaml_that_validates(k8s_world, tmp_path):
    documents = list(yaml.safe_load_all(run_cli(tmp_path, BODY)))
    check_manifests(documents)
    (job,) = documents
    assert (job["kind"], job["metadata"]["name"], job["metadata"]["namespace"]) == (
        "PyTorchJob",
        "digits-42-0f3a9c1e",
        "portal-vision",
    )
    assert job["spec"]["runPolicy"]["activeDeadlineSeconds"] == 7200
    template = job["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]
    assert template["spec"]["priorityClassName"] == "gpu-portal-high"
    assert main_container(template)["resources"] == {"limits": {"nvidia.com/gpu": "4"}}
    data = next(m for m in main_container(template)["volumeMounts"] if m["mountPath"] == "/data")
    assert data["readOnly"] is True


def test_render_manifests_renders_a_fractional_t4_job_and_the_department(k8s_world, tmp_path):
    body = {
        **BODY,
        "image": "python",
        "workers": 1,
        "gpus_per_worker": 0.5,
        "gpu_type": "T4",
        "mounts": [],
        "placement": [{"worker": 0, "node": "k8s-demo-t4-0", "gpus": [1], "gpu_fraction": 0.5}],
    }
    documents = list(yaml.safe_load_all(run_cli(tmp_path, body, "--with-department")))
    check_manifests(documents)
    assert [d["kind"] for d in documents] == [
        "Namespace",
        "ResourceQuota",
        "PersistentVolumeClaim",
        "NetworkPolicy",
        "PriorityClass",
        "PriorityClass",
        "PriorityClass",
        "Job",
    ]
    # vision may borrow without limit: the guard is both whole pools (32 V100 + 32 T4), not its 16 + 16 nominal
    assert documents[1]["spec"]["hard"] == {"requests.nvidia.com/gpu": "64"}
    assert main_container(documents[-1]["spec"]["template"])["resources"] == {"limits": {"aliyun.com/gpu-mem": "8"}}


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ({k: v for k, v in BODY.items() if k != "id"}, 'The spec needs "id"'),
        ({**BODY, "workers": 0, "gpu_type": "A100"}, "workers: Use between 1 and 64 workers."),
        ({**BODY, "gpus": 2}, "gpus: Unknown field; did you mean 'gpus_per_worker'?"),
        ({**BODY, "mounts": [{"storage": "nlp-corpora", "path": "/c"}]}, "vision has no storage called 'nlp-corpora'"),
        ({**BODY, "placement": [{"worker": 0, "node": "n", "gpus": [0]}]}, "one slot for each of the 2 workers"),
        ("{not json", "is not JSON"),
    ],
)
def test_render_manifests_refuses_a_bad_spec_with_a_message(k8s_world, tmp_path, body, message):
    with pytest.raises(CommandError, match=re.escape(message)):
        run_cli(tmp_path, body)


def test_render_manifests_exits_non_zero_on_a_bad_spec(k8s_world, tmp_path, capsys):
    path = tmp_path / "spec.json"
    path.write_text(json.dumps({**BODY, "cluster": "nowhere"}))
    with pytest.raises(SystemExit) as exit_:
        RenderManifests().run_from_argv(["manage.py", "render_manifests", "--spec", str(path)])
    assert exit_.value.code == 1
    assert "cluster: No cluster called 'nowhere'" in capsys.readouterr().err


def test_render_manifests_falls_back_to_kubernetes_defaults_for_what_a_cluster_leaves_unset(k8s_world, tmp_path):
    body = {**BODY, "cluster": "local", "gpu_type": "sim", "workers": 1, "gpus_per_worker": 1, "mounts": []}
    err = io.StringIO()
    path = tmp_path / "local.json"
    path.write_text(json.dumps(body))
    out = io.StringIO()
    call_command("render_manifests", "--spec", str(path), stdout=out, stderr=err)
    (job,) = yaml.safe_load_all(out.getvalue())
    check_manifests([job])
    master_pod = job["spec"]["pytorchReplicaSpecs"]["Master"]["template"]
    assert master_pod["spec"]["nodeSelector"] == {"nvidia.com/gpu.product": "sim"}
    assert main_container(master_pod)["image"] == "pytorch/pytorch:2.4.0-cuda12.1-cudnn9-runtime"
    assert "cluster local uses the local backend" in err.getvalue()
