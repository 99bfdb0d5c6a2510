"""The Kubernetes executor through the real ``kubernetes`` client against KubeFake (tests/k8s/kfake.py).

The simulated operator and kubelet (``kube.operator``) move the pods; the executor only sees the API.
"""

from __future__ import annotations

import threading

import pytest

from clusters.errors import ExecutorError
from clusters.k8s import ClusterSettings
from jobs.executors.base import JobSpec, Placement, WorkerPlacement
from jobs.executors.k8s_names import kind_for, resource_name
from jobs.executors.k8s_watch import JobWatcher
from jobs.executors.kubernetes import CANCEL_ANNOTATION, KubernetesExecutor
from jobs.executors.manifests import job_manifests
from tests.jobs.executor_harness import wait_for

NS = "portal-vision"
SHA = "0123456789abcdef0123456789abcdef01234567"
FETCHED = f"Cloning...\n[portal] code at commit {SHA}\n"


@pytest.fixture
def cluster() -> ClusterSettings:
    return ClusterSettings()


@pytest.fixture
def executor(kube_api, cluster):
    return KubernetesExecutor(kube_api, cluster)


_count = iter(range(10**6))


def spec(**fields) -> JobSpec:
    job_id = fields.pop("job_id", None) or f"j{next(_count)}"
    defaults = {
        "name": "train",
        "department": "vision",
        "code_url": "https://git.example.com/r.git",
        "code_ref": None,
        "command": "python train.py",
        "framework": "python",
        "image": "python:3.11",
    }
    return JobSpec(job_id=job_id, **{**defaults, **fields})


def placement(workers: int = 1) -> Placement:
    return Placement(tuple(WorkerPlacement(worker=rank, node="n") for rank in range(workers)))


def launched(executor, kube, **fields) -> tuple[JobSpec, str, str, list[str]]:
    """Launch a job and let the operator make its pods: (spec, kind, name, pod names)."""
    job = spec(**fields)
    executor.launch(job, placement(job.workers))
    kind, name = kind_for(job), resource_name(job)
    return job, kind, name, kube.operator.create_pods(kind, NS, name)


def state(executor, job: JobSpec):
    return executor.poll([job.job_id])[job.job_id]


def test_launch_creates_exactly_the_validated_manifests_once(executor, kube, cluster):
    jobs = {
        "pytorch": spec(framework="pytorch", workers=2),
        "tensorflow": spec(framework="tensorflow", workers=2),
        "python": spec(),
    }
    for job in jobs.values():
        executor.launch(job, placement(job.workers))
        executor.launch(job, placement(job.workers))  # again: nothing new
    assert [ns["metadata"]["name"] for ns in kube.list("v1", "Namespace")] == [NS]
    assert [pvc["metadata"]["name"] for pvc in kube.list("v1", "PersistentVolumeClaim", NS)] == ["portal-jobs"]
    for (api_version, kind), job in zip(
        [("kubeflow.org/v1", "PyTorchJob"), ("kubeflow.org/v1", "TFJob"), ("batch/v1", "Job")],
        jobs.values(),
        strict=True,
    ):
        stored = kube.list(api_version, kind, NS, labels=f"portal/job-id={job.job_id}")
        assert len(stored) == 1
        expected = job_manifests(job, placement(job.workers), cluster)[0]
        assert (
            stored[0]["spec"] == expected["spec"] and stored[0]["metadata"]["labels"] == expected["metadata"]["labels"]
        )
        assert stored[0]["metadata"]["generation"] == 1


def test_status_follows_the_operator_from_starting_to_succeeded(executor, kube):
    job, kind, name, pods = launched(executor, kube, framework="pytorch", workers=2)
    assert state(executor, job).phase == "starting"
    kube.operator.run(NS, pods[0], fetch_log=FETCHED)  # the master runs, the worker still fetches code
    kube.operator.set_condition(kind, NS, name, "Running")
    now = state(executor, job)
    assert (now.phase, now.commit) == ("starting", SHA)
    kube.operator.run(NS, pods[1], fetch_log=FETCHED)
    now = state(executor, job)
    assert now.phase == "running" and now.started_at and now.finished_at is None
    for pod in pods:
        kube.operator.exit(NS, pod, 0)
    kube.operator.succeed(kind, NS, name)
    done = state(executor, job)
    assert (done.phase, done.exit_code, done.commit) == ("succeeded", 0, SHA)
    assert done.finished_at >= done.started_at
    assert job.job_id not in executor._commits  # the commit cache forgets jobs once they have ended


def test_a_batch_job_completes(executor, kube):
    job, kind, name, pods = launched(executor, kube)
    kube.operator.run(NS, pods[0], fetch_log=FETCHED)
    assert state(executor, job).phase == "running"
    kube.operator.exit(NS, pods[0], 0)
    kube.operator.succeed(kind, NS, name)
    assert state(executor, job).phase == "succeeded"


def test_a_clone_failure_carries_gits_message(executor, kube):
    job, kind, name, pods = launched(executor, kube)
    kube.operator.init_done(
        NS, pods[0], "fetch-code", exit_code=128, log="fatal: repository 'https://git.example.com/r.git/' not found\n"
    )
    kube.operator.fail(kind, NS, name)
    failed = state(executor, job)
    assert (failed.phase, failed.reason) == ("failed", "clone_failed")
    assert "repository 'https://git.example.com/r.git/' not found" in failed.message
    assert failed.started_at is None and failed.finished_at


def test_an_install_failure(executor, kube):
    job, kind, name, pods = launched(executor, kube, requirements=("nosuchpkg==9",))
    kube.operator.init_done(NS, pods[0], "fetch-code", log=FETCHED)
    kube.operator.init_done(
        NS, pods[0], "install-requirements", exit_code=1, log="ERROR: No matching distribution found for nosuchpkg==9\n"
    )
    kube.operator.fail(kind, NS, name)
    failed = state(executor, job)
    assert (failed.phase, failed.reason, failed.commit) == ("failed", "install_failed", SHA)
    assert "No matching distribution found for nosuchpkg==9" in failed.message


def test_a_failing_worker_is_named_with_its_exit_code_and_last_lines(executor, kube):
    job, kind, name, pods = launched(executor, kube, framework="pytorch", workers=2)
    assert pods == [f"{name}-master-0", f"{name}-worker-0"]
    for pod in pods:
        kube.operator.run(NS, pod, fetch_log=FETCHED)
    kube.operator.exit(NS, pods[1], 3, log="loading\nrank 1 is out of memory\n")
    kube.operator.fail(kind, NS, name)
    failed = state(executor, job)
    assert (failed.phase, failed.reason, failed.exit_code) == ("failed", "worker_failed", 3)
    assert "worker 1" in failed.message and "code 3" in failed.message and "rank 1 is out of memory" in failed.message


def test_deadline_exceeded(executor, kube):
    job, kind, name, pods = launched(executor, kube, framework="pytorch", max_runtime_seconds=60)
    kube.operator.run(NS, pods[0], fetch_log=FETCHED)
    kube.operator.exceed_deadline(kind, NS, name)
    failed = state(executor, job)
    assert (failed.phase, failed.reason) == ("failed", "deadline_exceeded") and "deadline" in failed.message


def test_an_evicted_pod_is_lost(executor, kube):
    job, kind, name, pods = launched(executor, kube, framework="tensorflow", workers=2)
    for pod in pods:
        kube.operator.run(NS, pod, fetch_log=FETCHED)
    kube.operator.evict(NS, pods[1], "The node was low on resource: memory.")
    lost = state(executor, job)
    assert (lost.phase, lost.reason) == ("lost", "lost")
    assert "Worker 1" in lost.message and "low on resource: memory" in lost.message


def test_logs_from_an_offset_setup_output_first_partial_line_once_ended(executor, kube):
    job, kind, name, pods = launched(executor, kube)
    assert list(executor.logs(job.job_id, 0)) == []  # nothing started yet
    kube.operator.run(NS, pods[0], fetch_log=FETCHED, log="line 1\nline 2\npart")
    lines = list(executor.logs(job.job_id, 0))
    assert lines == ["Cloning...\n", f"[portal] code at commit {SHA}\n", "line 1\n", "line 2\n"]
    offset = sum(len(line.encode()) for line in lines)
    assert list(executor.logs(job.job_id, 0, since=offset)) == []
    kube.operator.exit(NS, pods[0], 0, log="ial\nend")
    assert list(executor.logs(job.job_id, 0, since=offset)) == ["partial\n", "end"]
    assert list(executor.logs(job.job_id, 1)) == [] and list(executor.logs("never-launched", 0)) == []


def test_a_pod_log_can_be_followed(executor, kube, kube_api):
    job, kind, name, pods = launched(executor, kube)
    kube.operator.run(NS, pods[0], fetch_log=FETCHED, log="epoch 1\n")
    followed = []
    thread = threading.Thread(target=lambda: followed.extend(kube_api.follow_pod_log(NS, pods[0], container="main")))
    thread.start()
    wait_for(lambda: followed == ["epoch 1\n"], what="the first line")
    kube.operator.log(NS, pods[0], "epoch 2\n")
    wait_for(lambda: followed == ["epoch 1\n", "epoch 2\n"], what="a line written while following")
    kube.operator.exit(NS, pods[0], 0)
    thread.join(5)
    assert not thread.is_alive()


def test_cancel_annotates_deletes_in_the_foreground_and_the_job_is_left_out_once_gone(executor, kube):
    kube.operator.graceful = True  # pods terminate until the kubelet ends them
    job, kind, name, pods = launched(executor, kube, framework="pytorch", workers=2)
    for pod in pods:
        kube.operator.run(NS, pod, fetch_log=FETCHED)
    kube.operator.set_condition(kind, NS, name, "Running")
    executor.cancel(job.job_id, 30)
    obj = kube.get("kubeflow.org/v1", kind, NS, name)
    assert obj["metadata"]["annotations"][CANCEL_ANNOTATION]
    assert obj["metadata"]["deletionTimestamp"] and "foregroundDeletion" in obj["metadata"]["finalizers"]
    stopping = state(executor, job)
    assert stopping.phase == "running" and stopping.reason == "stopping"  # not final while pods terminate
    assert sorted(kube.operator.terminate_pods()) == pods
    assert kube.get("kubeflow.org/v1", kind, NS, name) is None and kube.list("v1", "Pod", NS) == []
    assert executor.poll([job.job_id]) == {}
    executor.cancel(job.job_id, 30)  # gone: nothing to do
    executor.cancel("never-launched", 30)


def test_garbage_collection_deletes_only_orphans(executor, kube):
    kept, _, _, _ = launched(executor, kube, framework="pytorch")
    orphan, kind, name, _ = launched(executor, kube)
    kube.seed(
        {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": {"name": "not-ours", "namespace": NS},
            "spec": {"template": {"spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": "x"}]}}},
        }
    )
    assert executor.collect_garbage({kept.job_id}) == [orphan.job_id]
    assert kube.get("batch/v1", "Job", NS, name) is None
    assert set(executor.poll([kept.job_id, orphan.job_id])) == {kept.job_id}
    assert kube.get("batch/v1", "Job", NS, "not-ours")
    assert executor.collect_garbage({kept.job_id}) == []


def test_two_server_errors_are_retried_with_backoff(executor, kube, kube_api):
    fault = kube.inject(500, times=2, method="POST", path_contains="pytorchjobs")
    job = spec(framework="pytorch")
    executor.launch(job, placement())
    assert fault.hits == 2 and kube_api.slept == [0.01, 0.02]
    assert len(kube.list("kubeflow.org/v1", "PyTorchJob", NS)) == 1


def test_a_create_that_timed_out_but_landed_is_one_object(executor, kube):
    slow = kube.inject(None, delay=3, land=True, method="POST", path_contains="pytorchjobs")
    job = spec(framework="pytorch")
    executor.launch(job, placement())
    assert slow.hits == 1 and len(kube.list("kubeflow.org/v1", "PyTorchJob", NS)) == 1


def test_a_transient_error_that_lasts_is_not_permanent(executor, kube):
    kube.inject(503, times=10, path_contains="pytorchjobs")
    with pytest.raises(ExecutorError) as caught:
        executor.launch(spec(framework="pytorch"), placement())
    assert not caught.value.permanent


def test_forbidden_and_invalid_are_permanent_with_the_servers_message(executor, kube):
    kube.inject(
        403,
        method="POST",
        path_contains="pytorchjobs",
        message='pytorchjobs.kubeflow.org is forbidden: User "system:serviceaccount:portal:portal" cannot create',
    )
    with pytest.raises(ExecutorError) as caught:
        executor.launch(spec(framework="pytorch"), placement())
    assert caught.value.permanent and "cannot create" in caught.value.message
    kube.validators[("kubeflow.org/v1", "PyTorchJob")] = lambda manifest: [
        "spec.runPolicy: refused by the admission webhook"
    ]
    with pytest.raises(ExecutorError) as caught:
        executor.launch(spec(framework="pytorch"), placement())
    assert caught.value.permanent and "refused by the admission webhook" in caught.value.message


def test_ensure_department_creates_then_updates_the_gpu_quota(executor, kube):
    executor.ensure_department("vision", 4)
    executor.ensure_department("vision", 8)
    quota = kube.get("v1", "ResourceQuota", NS, "portal-gpus")
    assert quota["spec"]["hard"] == {"requests.nvidia.com/gpu": "8"}
    assert kube.get("v1", "PersistentVolumeClaim", NS, "portal-jobs")


def test_the_watcher_relists_after_410_and_misses_no_change(executor, kube, kube_api):
    first, kind, name, _ = launched(executor, kube, framework="pytorch")
    seen: list[str] = []
    watcher = JobWatcher(
        kube_api, on_change=seen.append, timeout_seconds=1, backoff_seconds=0.01, max_backoff_seconds=0.05
    )
    stop = threading.Event()
    thread = threading.Thread(target=watcher.run, args=(stop,))
    thread.start()
    try:
        wait_for(lambda: watcher.lists == 5, what="the first lists")  # 4 job kinds + pods
        assert first.job_id in seen
        seen.clear()
        second, *_ = launched(executor, kube)
        wait_for(lambda: second.job_id in seen, what="the new job")

        outage = kube.inject(500, times=10**6, path_contains="watch=true")  # the watches break and retry
        wait_for(lambda: outage.hits >= 10, what="the watches to fail")
        seen.clear()
        kube.operator.set_condition(kind, NS, name, "Running")  # a change while nobody watches...
        kube.compact()  # ...whose event is then forgotten
        lists = watcher.lists
        outage.times = 0
        wait_for(lambda: watcher.lists > lists, what="a re-list after 410")
        wait_for(lambda: first.job_id in seen, what="the change made during the gap")
    finally:
        stop.set()
        thread.join(10)
    assert not thread.is_alive()


def test_a_departments_namespace_gets_its_network_policy_once_and_the_fake_accepts_it(executor, kube, cluster):
    for _ in range(2):
        for job in (spec(framework="pytorch"), spec()):
            executor.launch(job, placement())
    assert len(kube.list("networking.k8s.io/v1", "NetworkPolicy", NS)) == 1  # launching is enough
    executor.ensure_department("vision", 4)
    (policy,) = kube.list("networking.k8s.io/v1", "NetworkPolicy", NS)
    assert policy["metadata"]["name"] == "portal-department" and policy["metadata"]["generation"] == 1
    assert policy["spec"]["ingress"][0]["from"][1] == {
        "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "gpu-portal"}}
    }
    assert kube.list("networking.k8s.io/v1", "NetworkPolicy", "portal-nlp") == []


def test_a_changed_network_setting_reaches_the_departments_policy(kube_api, kube):
    KubernetesExecutor(kube_api, ClusterSettings()).ensure_department("vision", 4)
    narrower = ClusterSettings.from_cluster("kubernetes", {"internal_cidrs": ["10.42.0.0/16", "10.43.0.0/16"]})
    KubernetesExecutor(kube_api, narrower).ensure_department("vision", 4)
    (policy,) = kube.list("networking.k8s.io/v1", "NetworkPolicy", NS)
    assert policy["spec"]["egress"][2]["to"][0]["ipBlock"]["except"] == ["10.42.0.0/16", "10.43.0.0/16"]


def test_a_policy_the_api_server_would_refuse_is_refused_by_the_fake_too(kube_api, kube):
    kube_api.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}})
    policy = {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": {"name": "p", "namespace": NS},
        "spec": {
            "podSelector": {},
            "egress": [{"to": [{"ipBlock": {"cidr": "10.0.0.0/8", "except": ["11.0.0.0/8"]}}]}],
        },
    }
    with pytest.raises(ExecutorError) as caught:
        kube_api.create(policy)
    assert caught.value.permanent and "must be strictly within '10.0.0.0/8'" in caught.value.message


def test_a_rerun_is_told_it_resumes_and_shares_the_checkpoint_folder_of_its_job(executor, kube):
    first = spec(job_id="7-aa", job_key="7", framework="pytorch", workers=2)
    rerun = spec(job_id="7-bb", job_key="7", framework="pytorch", workers=2, run_index=1)
    for job in (first, rerun):
        executor.launch(job, placement(2))
    for job, resumed in ((first, None), (rerun, "1")):
        (stored,) = kube.list("kubeflow.org/v1", "PyTorchJob", NS, labels=f"portal/job-id={job.job_id}")
        for replica in stored["spec"]["pytorchReplicaSpecs"].values():
            (main,) = replica["template"]["spec"]["containers"]
            env = {item["name"]: item.get("value") for item in main["env"]}
            assert (env["PORTAL_RUN_INDEX"], env.get("PORTAL_RESUMED")) == (str(job.run_index), resumed)
            mounts = {m["mountPath"]: m.get("subPath") for m in main["volumeMounts"]}
            assert mounts[env["PORTAL_CHECKPOINT_DIR"]] == "checkpoints/7"
            assert mounts[env["TENSORBOARD_LOG_DIR"]] == f"tensorboard/7/run-{job.run_index}"


def test_a_namespace_deleted_under_the_executor_is_made_again_at_the_next_launch(executor, kube, kube_api):
    # The executor remembers which namespaces it prepared. An admin deleting one (or a new cluster answering at the
    # same address, as a fresh fake on a reused port did in CI) left every later launch failing with "namespaces
    # ... not found" until the portal restarted.
    launched(executor, kube)
    assert kube_api.delete("v1", "Namespace", None, NS, propagation="Background")
    assert kube_api.get("v1", "Namespace", None, NS) is None
    _, kind, name, _ = launched(executor, kube, framework="pytorch")
    assert kube_api.get("v1", "Namespace", None, NS) is not None
    assert kind == "PyTorchJob" and kube_api.get("kubeflow.org/v1", kind, NS, name) is not None
