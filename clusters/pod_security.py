"""What contains the pods the portal puts on a cluster: securityContext, scratch space, the department's
NetworkPolicy. Pure: no Django, no I/O.

Every pod the portal renders for researchers' work (job replicas, TensorBoards, model servers) runs as the
cluster's unprivileged ``run_as_user``:``run_as_group`` (fsGroup too, so the job volume's files are the
group's), under the runtime's default seccomp profile, with no service-account token, and each container
with no privilege escalation, no capabilities and a read-only root filesystem. A container that writes gets
``/tmp`` on an emptyDir and HOME=/tmp, so tools that write caches (pip, git, torch hub) keep working.
Kaniko image builds are the exception: images/manifests.py says what applies there and why.

A department's namespace gets one NetworkPolicy (``network_policy_manifest``). NetworkPolicies only allow,
so "everything but the portal" is written as: egress to the namespace's own pods, to cluster DNS, and to any
address outside the cluster's internal ranges (``internal_cidrs``: pod, service and node networks, cloud
metadata); ingress from the namespace's own pods and from the portal's namespace (its TensorBoard proxy and
model router), plus ``ingress_namespaces`` (e.g. Knative's and Istio's, for serverless KServe).
"""

from __future__ import annotations

import ipaddress
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from clusters.k8s import ClusterSettings

NETWORK_POLICY = "portal-department"
NAMESPACE_NAME_LABEL = "kubernetes.io/metadata.name"  # set on every namespace by the API server
SCRATCH_VOLUME, SCRATCH_DIR = "scratch", "/tmp"
# Where pods resolve names: kube-dns (CoreDNS keeps the label) and NodeLocal DNSCache's link-local address,
# which the default internal_cidrs would otherwise block.
DNS_NAMESPACE, DNS_POD_LABELS, NODE_LOCAL_DNS = "kube-system", {"k8s-app": "kube-dns"}, "169.254.20.10/32"
# RFC 1918, carrier-grade NAT (pod networks of some CNIs) and link-local (cloud metadata services hand out
# the node's credentials there).
DEFAULT_INTERNAL_CIDRS = ("10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "100.64.0.0/10", "169.254.0.0/16")


def pod_security_context(run_as_user: int, run_as_group: int) -> dict[str, Any]:
    return {
        "runAsNonRoot": True,
        "runAsUser": run_as_user,
        "runAsGroup": run_as_group,
        "fsGroup": run_as_group,
        "seccompProfile": {"type": "RuntimeDefault"},
    }


def container_security_context(*, read_only_root: bool = True) -> dict[str, Any]:
    return {
        "allowPrivilegeEscalation": False,
        "capabilities": {"drop": ["ALL"]},
        "readOnlyRootFilesystem": read_only_root,
    }


def scratch_volume() -> dict[str, Any]:
    return {"name": SCRATCH_VOLUME, "emptyDir": {}}


def scratch_mount() -> dict[str, Any]:
    return {"name": SCRATCH_VOLUME, "mountPath": SCRATCH_DIR}


def scratch_env() -> dict[str, str]:
    return {"HOME": SCRATCH_DIR, "TMPDIR": SCRATCH_DIR}


def cidr_problem(value: Any) -> str:
    """Why ``value`` cannot be one of internal_cidrs ("" when it can)."""
    try:
        network = ipaddress.ip_network(value)
    except (TypeError, ValueError):
        return f"{value!r} is not a network in CIDR notation (e.g. 10.0.0.0/8)"
    if network.prefixlen == 0:
        return f"{value!r} is every address: nothing outside the cluster would be reachable"
    return ""


def network_policy_manifest(department: str, cluster: ClusterSettings, labels: dict[str, str]) -> dict[str, Any]:
    networks = [ipaddress.ip_network(cidr) for cidr in cluster.internal_cidrs]
    outside = [{"ipBlock": {"cidr": "0.0.0.0/0", "except": [str(n) for n in networks if n.version == 4]}}]
    ipv6 = [str(n) for n in networks if n.version == 6]
    if ipv6:  # only where the operator named the cluster's IPv6 ranges: never open IPv6 blindly
        outside.append({"ipBlock": {"cidr": "::/0", "except": ipv6}})
    for block in outside:
        if not block["ipBlock"]["except"]:
            del block["ipBlock"]["except"]
    dns = {
        "to": [
            {
                "namespaceSelector": {"matchLabels": {NAMESPACE_NAME_LABEL: DNS_NAMESPACE}},
                "podSelector": {"matchLabels": dict(DNS_POD_LABELS)},
            },
            {"ipBlock": {"cidr": NODE_LOCAL_DNS}},
        ],
        "ports": [{"protocol": "UDP", "port": 53}, {"protocol": "TCP", "port": 53}],
    }
    peers = [cluster.portal_namespace, *cluster.ingress_namespaces]
    ingress: list[dict[str, Any]] = [{"podSelector": {}}] + [
        {"namespaceSelector": {"matchLabels": {NAMESPACE_NAME_LABEL: name}}} for name in peers
    ]
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": {"name": NETWORK_POLICY, "namespace": cluster.namespace(department), "labels": labels},
        "spec": {
            "podSelector": {},
            "policyTypes": ["Ingress", "Egress"],
            "ingress": [{"from": ingress}],
            "egress": [{"to": [{"podSelector": {}}]}, dns, {"to": outside}],
        },
    }
