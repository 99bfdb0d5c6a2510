"""The Kubernetes API fake's own tests, through the real ``kubernetes`` client (and the portal's Kube)."""

from __future__ import annotations

import threading

import kubernetes.client
import pytest
from kubernetes.client.exceptions import ApiException

from clusters.kube import Gone, KubeError
from tests.jobs.executor_harness import wait_for
from tests.k8s.kfake import parse_selector, selector_matches

NS = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "team"}}


def config_map(name: str, **labels: str) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": "team", "labels": labels},
        "data": {"k": "v"},
    }


def batch_job(name: str = "train") -> dict:
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "namespace": "team", "labels": {"app": "x"}},
        "spec": {
            "backoffLimit": 0,
            "template": {
                "metadata": {"labels": {"app": "x"}},
                "spec": {
                    "restartPolicy": "Never",
                    "terminationGracePeriodSeconds": 30,
                    "containers": [{"name": "main", "image": "python:3.11", "command": ["true"]}],
                },
            },
        },
    }


@pytest.fixture
def core(kube):
    return kubernetes.client.CoreV1Api(kube.api_client())


def error_of(call) -> ApiException:
    with pytest.raises(ApiException) as caught:
        call()
    return caught.value


def test_create_assigns_server_fields_and_answers_409_and_404_like_the_api_server(kube, core):
    created = core.create_namespace(NS)
    assert created.metadata.uid and created.metadata.creation_timestamp and created.metadata.resource_version
    cm = core.create_namespaced_config_map("team", config_map("a"))
    assert int(cm.metadata.resource_version) > int(created.metadata.resource_version)  # one global counter

    conflict = error_of(lambda: core.create_namespaced_config_map("team", config_map("a")))
    assert (
        conflict.status == 409
        and '"reason": "AlreadyExists"' in conflict.body
        and 'configmaps \\"a\\" already exists' in conflict.body
    )
    missing = error_of(lambda: core.read_namespaced_config_map("b", "team"))
    assert missing.status == 404 and 'configmaps \\"b\\" not found' in missing.body
    no_namespace = error_of(
        lambda: core.create_namespaced_config_map("elsewhere", config_map("a") | {"metadata": {"name": "a"}})
    )
    assert no_namespace.status == 404 and 'namespaces \\"elsewhere\\" not found' in no_namespace.body


def test_a_typo_is_refused_with_422_and_the_schema_problem(kube, core):
    core.create_namespace(NS)
    typo = batch_job()
    typo["spec"]["template"]["spec"]["containers"][0]["comand"] = ["true"]
    invalid = error_of(lambda: kubernetes.client.BatchV1Api(kube.api_client()).create_namespaced_job("team", typo))
    assert invalid.status == 422 and '"reason": "Invalid"' in invalid.body and "comand" in invalid.body
    assert kube.get("batch/v1", "Job", "team", "train") is None

    pytorch = {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": {"name": "p", "namespace": "team"},
        "spec": {"pytorchReplicaSpecs": {"Master": {"replicaz": 1}}},
    }
    with pytest.raises(KubeError) as caught:
        from clusters.kube import Kube

        Kube(kube.api_client(), sleep=lambda s: None).create(pytorch)
    assert caught.value.status == 422 and caught.value.permanent and "replicaz" in caught.value.message


def test_generation_bumps_on_spec_changes_only(kube, kube_api):
    kube_api.create(NS)
    job, created = kube_api.create(batch_job())
    assert created and job["metadata"]["generation"] == 1
    labelled = kube_api.patch("batch/v1", "Job", "team", "train", {"metadata": {"labels": {"new": "label"}}})
    assert labelled["metadata"]["generation"] == 1 and labelled["metadata"]["labels"]["new"] == "label"
    changed = kube_api.patch("batch/v1", "Job", "team", "train", {"spec": {"backoffLimit": 2}})
    assert changed["metadata"]["generation"] == 2
    status = kube_api.patch_status(
        "batch/v1", "Job", "team", "train", {"status": {"active": 1}, "spec": {"backoffLimit": 5}}
    )
    assert status["status"] == {"active": 1} and status["spec"]["backoffLimit"] == 2  # only the status moved
    assert status["metadata"]["generation"] == 2
    assert kube_api.create(batch_job()) == (kube.get("batch/v1", "Job", "team", "train"), False)


@pytest.mark.parametrize(
    ("selector", "names"),
    [
        ("tier=web", {"web-1", "web-2"}),
        ("tier!=web", {"db", "bare"}),
        ("tier in (db,cache)", {"db"}),
        ("tier notin (web)", {"db", "bare"}),
        ("tier", {"web-1", "web-2", "db"}),
        ("!tier", {"bare"}),
        ("tier=web,zone=a", {"web-1"}),
    ],
)
def test_label_selectors_on_list(kube, kube_api, selector, names):
    kube_api.create(NS)
    for name, labels in {
        "web-1": {"tier": "web", "zone": "a"},
        "web-2": {"tier": "web"},
        "db": {"tier": "db"},
        "bare": {},
    }.items():
        kube_api.create(config_map(name, **labels))
    items, version = kube_api.list("v1", "ConfigMap", namespace="team", labels=selector)
    assert {item["metadata"]["name"] for item in items} == names
    assert int(version) == kube.store.rv


def test_selector_parser_rejects_garbage():
    with pytest.raises(ValueError):
        parse_selector("a in b")
    assert selector_matches(parse_selector("portal/job-id in (j1, j2)"), {"portal/job-id": "j2"})


def test_watch_streams_later_events_with_selectors_and_410_after_compaction(kube, kube_api):
    kube_api.create(NS)
    kube_api.create(config_map("before", app="x"))
    _, version = kube_api.list("v1", "ConfigMap", namespace="team", labels="app=x")
    kube_api.create(config_map("other", app="y"))
    kube_api.create(config_map("after", app="x"))
    kube_api.patch("v1", "ConfigMap", "team", "after", {"data": {"k": "w"}})
    kube_api.delete("v1", "ConfigMap", "team", "before")
    events = [
        (kind, obj["metadata"]["name"])
        for kind, obj in kube_api.watch(
            "v1", "ConfigMap", namespace="team", labels="app=x", resource_version=version, timeout_seconds=1
        )
    ]
    assert events == [("ADDED", "after"), ("MODIFIED", "after"), ("DELETED", "before")]

    kube.compact()
    with pytest.raises(Gone):
        list(kube_api.watch("v1", "ConfigMap", namespace="team", resource_version=version, timeout_seconds=1))
    _, fresh = kube_api.list("v1", "ConfigMap")
    assert list(kube_api.watch("v1", "ConfigMap", resource_version=fresh, timeout_seconds=1)) == []


def test_a_watch_sees_changes_made_while_it_waits(kube, kube_api):
    kube_api.create(NS)
    _, version = kube_api.list("v1", "ConfigMap")
    seen = []
    thread = threading.Thread(
        target=lambda: seen.extend(
            kind for kind, _ in kube_api.watch("v1", "ConfigMap", resource_version=version, timeout_seconds=3)
        )
    )
    thread.start()
    wait_for(lambda: sum("watch=true" in path for _, path in kube.requests), what="the watch to connect")
    kube_api.create(config_map("late"))
    wait_for(lambda: seen == ["ADDED"], what="the event")
    thread.join()


def test_foreground_delete_waits_for_dependents_then_goes(kube, kube_api):
    kube.operator.graceful = True
    kube_api.create(NS)
    kube_api.create(batch_job())
    pods = kube.operator.create_pods("Job", "team", "train")
    kube.operator.run("team", pods[0])
    assert kube_api.delete("batch/v1", "Job", "team", "train", propagation="Foreground")
    terminating = kube_api.get("batch/v1", "Job", "team", "train")
    assert (
        terminating["metadata"]["deletionTimestamp"] and "foregroundDeletion" in terminating["metadata"]["finalizers"]
    )
    assert kube_api.get("v1", "Pod", "team", pods[0])["metadata"]["deletionTimestamp"]
    assert kube.operator.terminate_pods() == pods
    assert kube_api.get("v1", "Pod", "team", pods[0]) is None
    assert kube_api.get("batch/v1", "Job", "team", "train") is None
    assert kube_api.delete("batch/v1", "Job", "team", "train") is False


def test_background_and_orphan_deletes(kube, kube_api):
    kube_api.create(NS)
    for name in ("bg", "orphan"):
        kube_api.create(batch_job(name))
    bg_pods = kube.operator.create_pods("Job", "team", "bg")
    orphan_pods = kube.operator.create_pods("Job", "team", "orphan")
    kube_api.delete("batch/v1", "Job", "team", "bg", propagation="Background")
    kube_api.delete("batch/v1", "Job", "team", "orphan", propagation="Orphan")
    assert kube_api.get("v1", "Pod", "team", bg_pods[0]) is None
    assert kube_api.get("v1", "Pod", "team", orphan_pods[0])["metadata"]["ownerReferences"] == []


def test_pod_logs_with_container_tail_and_follow(kube, kube_api, core):
    kube_api.create(NS)
    kube_api.create(batch_job())
    pod = kube.operator.create_pods("Job", "team", "train")[0]
    waiting = error_of(lambda: core.read_namespaced_pod_log(pod, "team"))
    assert waiting.status == 400 and "is waiting to start" in waiting.body
    kube.operator.run("team", pod, log="one\ntwo\nthree\n")
    assert kube_api.pod_log("team", pod) == "one\ntwo\nthree\n"
    assert core.read_namespaced_pod_log(pod, "team", tail_lines=1, _preload_content=False).data == b"three\n"
    followed = []
    thread = threading.Thread(target=lambda: followed.extend(kube_api.follow_pod_log("team", pod)))
    thread.start()
    wait_for(lambda: followed == ["one\n", "two\n", "three\n"], what="the log so far")
    kube.operator.exit("team", pod, 0, log="four\npartial")
    thread.join(5)
    assert followed == ["one\n", "two\n", "three\n", "four\n", "partial"]


def test_injected_faults_are_retried_and_counted(kube, kube_api):
    fault = kube.inject(500, times=2, method="POST", path_contains="namespaces")
    created, _ = kube_api.create(NS)
    assert fault.hits == 2 and kube_api.slept == [0.01, 0.02] and created["metadata"]["name"] == "team"

    forbidden = kube.inject(403, message='namespaces is forbidden: User "portal" cannot create resource')
    with pytest.raises(KubeError) as caught:
        kube_api.create(config_map("x"))
    assert caught.value.permanent and caught.value.status == 403 and "forbidden" in caught.value.message
    assert forbidden.hits == 1


def test_a_timeout_that_landed_is_created_once(kube, kube_api):
    kube_api.create(NS)
    slow = kube.inject(None, delay=3, land=True, method="POST")  # longer than the client's 1 s timeout
    obj, created = kube_api.create(config_map("slow"))
    assert slow.hits == 1 and obj["metadata"]["name"] == "slow" and not created  # the retry met 409
    assert len(kube.list("v1", "ConfigMap", "team")) == 1


def test_operator_conditions_and_pod_names(kube, kube_api):
    kube_api.create(NS)
    pytorch = {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": {"name": "p", "namespace": "team", "labels": {"portal/job-id": "j1"}},
        "spec": {
            "pytorchReplicaSpecs": {
                "Master": {"replicas": 1, "restartPolicy": "Never", "template": batch_job()["spec"]["template"]},
                "Worker": {"replicas": 2, "restartPolicy": "Never", "template": batch_job()["spec"]["template"]},
            }
        },
    }
    for spec in pytorch["spec"]["pytorchReplicaSpecs"].values():
        spec["template"]["spec"]["containers"][0]["name"] = "pytorch"
        spec["template"]["spec"].pop("restartPolicy")
    kube_api.create(pytorch)
    assert kube.operator.create_pods("PyTorchJob", "team", "p") == ["p-master-0", "p-worker-0", "p-worker-1"]
    worker = kube_api.get("v1", "Pod", "team", "p-worker-1")
    assert worker["metadata"]["labels"]["training.kubeflow.org/replica-index"] == "1"
    assert worker["metadata"]["ownerReferences"][0]["kind"] == "PyTorchJob"
    kube.operator.set_condition("PyTorchJob", "team", "p", "Running")
    kube.operator.fail("PyTorchJob", "team", "p")
    conditions = {
        c["type"]: c["status"]
        for c in kube_api.get("kubeflow.org/v1", "PyTorchJob", "team", "p")["status"]["conditions"]
    }
    assert conditions == {"Created": "True", "Running": "False", "Failed": "True"}
