"""The manifest validator: every rendered manifest passes the official schemas (closed) and the operators'
webhook rules, typos and bad names are caught by name and place, and it needs no network."""

from __future__ import annotations

import json

import pytest

from clusters.k8s import (
    ManifestError,
    department_manifests,
)
from clusters.manifest_validation import ManifestInvalid, check_manifests, manifest_problems
from jobs.executors.manifests import job_manifests
from tests.jobs.manifest_helpers import (
    DEMO,
    main_container,
    placement,
    render,
    spec,
)

# --------------------------------------------------------------------------------- the validator


def problems_after(change) -> list[str]:
    manifest = json.loads(json.dumps(render(spec(workers=2))))
    change(manifest)
    return manifest_problems(manifest)


def master(manifest) -> dict:
    return manifest["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]


def test_it_rejects_an_unknown_field_in_a_container_by_name_and_place():
    problems = problems_after(lambda m: main_container({"spec": master(m)}).update(imagePullPolicyy="Always"))
    assert len(problems) == 1
    assert problems[0].startswith(
        "PyTorchJob digits-42-0f3a9c1e: spec.pytorchReplicaSpecs.Master.template.spec.containers[0]: "
        "unknown field 'imagePullPolicyy' (known: args, command, env,"
    )


def test_it_rejects_typos_anywhere_in_the_spec():
    assert "spec: unknown field 'pytorchReplicaSpec'" in " ".join(
        problems_after(lambda m: m["spec"].update(pytorchReplicaSpec={}))
    )
    assert "unknown field 'activeDeadline'" in " ".join(
        problems_after(lambda m: m["spec"]["runPolicy"].update(activeDeadline=3))
    )
    assert "is not of type 'integer'" in " ".join(
        problems_after(lambda m: m["spec"]["runPolicy"].update(backoffLimit="0"))
    )
    assert "unknown field 'lables'" in " ".join(
        problems_after(lambda m: m["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["metadata"].update(lables={}))
    )


def test_it_keeps_open_what_kubernetes_keeps_open():
    def quantities(m):
        main_container({"spec": master(m)})["resources"] = {
            "limits": {"cpu": 4, "memory": "16Gi", "example.com/fpga": "1"}
        }

    assert problems_after(quantities) == []


def test_it_rejects_what_the_operators_webhooks_reject():
    def rename(m):
        main_container({"spec": master(m)})["name"] = "trainer"

    assert "the PyTorchJob operator runs the container named 'pytorch'; found 'trainer'" in " ".join(
        problems_after(rename)
    )

    def two_masters(m):
        m["spec"]["pytorchReplicaSpecs"]["Master"]["replicas"] = 2

    assert "spec.pytorchReplicaSpecs.Master.replicas: must be 1 (is 2)" in " ".join(problems_after(two_masters))

    def chief(m):
        m["spec"]["pytorchReplicaSpecs"]["Chief"] = m["spec"]["pytorchReplicaSpecs"]["Worker"]

    assert "spec.pytorchReplicaSpecs.Chief: unknown replica type (use Master, Worker)" in " ".join(
        problems_after(chief)
    )

    tf = json.loads(json.dumps(render(spec(framework="tensorflow"))))
    tf["spec"]["tfReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]["name"] = "pytorch"
    assert any("named 'tensorflow'" in problem for problem in manifest_problems(tf))


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("Digits-1", "must be a DNS-1035 label"),
        ("1-digits", "must be a DNS-1035 label"),
        ("d" * 60, "too long: its pods would be called"),
    ],
)
def test_it_rejects_bad_names(name, message):
    problems = problems_after(lambda m: m["metadata"].update(name=name))
    assert any(message in problem for problem in problems), problems


def test_it_rejects_bad_labels():
    problems = problems_after(lambda m: m["metadata"]["labels"].update({"portal/job-id": "-bad value-", "a/b/c": "x"}))
    assert any("portal/job-id: value '-bad value-'" in problem for problem in problems)
    assert any("key 'a/b/c'" in problem for problem in problems)


def test_core_kinds_are_validated_strictly():
    job = json.loads(json.dumps(render(spec(framework="python"))))
    job["spec"]["template"]["spec"]["containers"][0]["imagePullPolicyy"] = "Always"
    (problem,) = manifest_problems(job)
    assert (
        problem.startswith("Job digits-42-0f3a9c1e: spec.template.spec.containers[0]:")
        and "imagePullPolicyy" in problem
    )

    quota = department_manifests("vision", 8, DEMO)[1]
    quota["spec"]["hardd"] = quota["spec"].pop("hard")
    assert "hardd" in " ".join(manifest_problems(quota))
    with pytest.raises(ManifestInvalid, match="Namespace Portal_Vision: metadata.name"):
        check_manifests([{**department_manifests("vision", 8, DEMO)[0], "metadata": {"name": "Portal_Vision"}}])


def test_a_job_id_that_cannot_be_a_label_is_refused():
    job = spec(job_id="../etc")
    with pytest.raises(ManifestError, match="cannot label Kubernetes objects"):
        job_manifests(job, placement(job), DEMO, gpu_type="V100")


def test_validation_needs_no_network(monkeypatch):
    import socket

    def refuse(*args, **kwargs):
        raise AssertionError("the validator tried to reach the network")

    monkeypatch.setattr(socket, "socket", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)
    check_manifests(
        [*department_manifests("nlp", 4, DEMO), render(spec(framework="python")), render(spec(framework="mpi"))]
    )
