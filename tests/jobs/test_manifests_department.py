"""A department's objects on a Kubernetes cluster: its namespace, quota, job volume and priority classes, the
GPU guard of its namespace, cluster settings refused by name, and the NetworkPolicy fence around its pods."""

from __future__ import annotations

import pytest

from clusters.k8s import (
    ClusterSettings,
    ManifestError,
    department_gpu_limit,
    department_manifests,
    priority_class_manifests,
)
from clusters.manifest_validation import check_manifests, manifest_problems
from tests.jobs.manifest_helpers import (
    DEMO,
)


def test_department_namespace_quota_volume_and_priority_classes_validate():
    manifests = department_manifests("vision", 32, DEMO) + priority_class_manifests(
        [("high", 1000, False), ("low", 100, True)], DEMO
    )
    check_manifests(manifests)
    namespace, quota, volume, _, high, low = manifests
    assert namespace["metadata"] == {
        "name": "portal-vision",
        "labels": {"portal/department": "vision", "app.kubernetes.io/managed-by": "gpu-portal"},
    }
    assert quota["spec"] == {"hard": {"requests.nvidia.com/gpu": "32"}}
    assert volume["metadata"]["name"] == "portal-jobs" and volume["spec"]["accessModes"] == ["ReadWriteMany"]
    assert (high["metadata"]["name"], high["value"], high["preemptionPolicy"]) == ("gpu-portal-high", 1000, "Never")
    assert "preemptible" in low["description"]


def test_cluster_settings_with_a_bad_value_are_refused_by_name():
    with pytest.raises(ManifestError, match="shared_gpu_unit must be one of GiB, MiB, percent"):
        ClusterSettings.from_cluster("k8s", {"shared_gpu_unit": "GB"})
    with pytest.raises(ManifestError, match="setting backoff_limit must be an integer"):
        ClusterSettings.from_cluster("k8s", {"backoff_limit": "0"})
    with pytest.raises(ManifestError, match="setting storage_pvcs must be an object"):
        ClusterSettings.from_cluster("k8s", {"storage_pvcs": ["vision-datasets"]})
    assert ClusterSettings.from_cluster("k8s", {"kubeconfig_context": "prod"}) == ClusterSettings(cluster="k8s")


def test_the_gpu_guard_of_a_namespace_is_what_the_department_may_hold_not_its_nominal():
    # (nominal, borrowing_limit, pool size): borrowing adds up to the pool, unlimited borrowing is the pool
    assert department_gpu_limit([(8, 0, 32)]) == 8
    assert department_gpu_limit([(8, 4, 32), (2, None, 16)]) == 12 + 16
    assert department_gpu_limit([(30, 10, 32)]) == 32
    assert department_gpu_limit([]) == 0


# ------------------------------------------------------------------------- the department's fence


def test_a_departments_pods_reach_each_other_dns_and_the_outside_but_not_the_cluster_inside():
    policy = next(m for m in department_manifests("vision", 8, DEMO) if m["kind"] == "NetworkPolicy")
    assert manifest_problems(policy) == []
    assert policy["metadata"]["namespace"] == "portal-vision" and policy["spec"]["podSelector"] == {}
    assert policy["spec"]["policyTypes"] == ["Ingress", "Egress"]
    same_namespace, dns, outside = policy["spec"]["egress"]
    assert same_namespace == {"to": [{"podSelector": {}}]}
    assert {"protocol": "UDP", "port": 53} in dns["ports"] and {"protocol": "TCP", "port": 53} in dns["ports"]
    assert dns["to"][0]["namespaceSelector"] == {"matchLabels": {"kubernetes.io/metadata.name": "kube-system"}}
    (anywhere,) = outside["to"]
    assert "ports" not in outside and anywhere["ipBlock"]["cidr"] == "0.0.0.0/0"
    assert {"10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "169.254.0.0/16"} <= set(anywhere["ipBlock"]["except"])
    (ingress,) = policy["spec"]["ingress"]
    assert ingress["from"] == [
        {"podSelector": {}},  # nothing else of the cluster: not another department
        {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "gpu-portal"}}},
    ]


def test_the_fence_follows_the_clusters_networks_and_the_portals_namespace():
    cluster = ClusterSettings.from_cluster(
        "k8s",
        {
            "internal_cidrs": ["10.244.0.0/16", "fd00::/8"],
            "portal_namespace": "portal-system",
            "ingress_namespaces": ["knative-serving"],
        },
    )
    policy = next(m for m in department_manifests("nlp", 0, cluster) if m["kind"] == "NetworkPolicy")
    assert manifest_problems(policy) == []
    assert policy["spec"]["egress"][2]["to"] == [
        {"ipBlock": {"cidr": "0.0.0.0/0", "except": ["10.244.0.0/16"]}},
        {"ipBlock": {"cidr": "::/0", "except": ["fd00::/8"]}},
    ]
    assert [peer.get("namespaceSelector", {}).get("matchLabels") for peer in policy["spec"]["ingress"][0]["from"]] == [
        None,
        {"kubernetes.io/metadata.name": "portal-system"},
        {"kubernetes.io/metadata.name": "knative-serving"},
    ]


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"internal_cidrs": ["10.0.0.1/8"]}, "'10.0.0.1/8' is not a network"),
        ({"internal_cidrs": ["0.0.0.0/0"]}, "is every address"),
        ({"internal_cidrs": "10.0.0.0/8"}, "setting internal_cidrs must be a list"),
        ({"portal_namespace": "Gpu Portal"}, "must name namespaces"),
    ],
)
def test_a_fence_that_would_not_hold_is_refused_by_name(values, message):
    with pytest.raises(ManifestError, match=message):
        ClusterSettings.from_cluster("k8s", values)


def test_the_validator_refuses_what_the_api_server_refuses_in_a_network_policy():
    policy = next(m for m in department_manifests("vision", 8, DEMO) if m["kind"] == "NetworkPolicy")
    policy["spec"]["egress"][2]["to"][0]["ipBlock"]["except"].append("fd00::/8")
    policy["spec"]["egress"][2]["to"].append({"ipBlock": {"cidr": "300.0.0.0/8"}})
    problems = manifest_problems(policy)
    assert any("except[5]: 'fd00::/8' must be strictly within '0.0.0.0/0'" in p for p in problems)
    assert any("'300.0.0.0/8' is not a CIDR" in p for p in problems)
