"""Whether a cluster can take jobs: the decision, from what a check found. Pure: no Django, no I/O.

A cluster is ``reachable`` (it takes jobs), ``unreachable`` (no connection settings, a rendering-only example,
settings that do not parse, an API server or executor that does not answer) or ``not_ready`` (the API server
answers but the Training Operator's kinds the portal submits are not installed). ``unknown``: never checked.
The service (clusters.services) runs the check, stores the result with its time and message on the Cluster
row, and logs one line per change of state (``change_line``); jobs.running requeues the jobs of a cluster
that stays unusable past the grace period (``requeue_due``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime

UNKNOWN, REACHABLE, UNREACHABLE, NOT_READY = "unknown", "reachable", "unreachable", "not_ready"
STATES = (UNKNOWN, REACHABLE, UNREACHABLE, NOT_READY)

# Why a cluster cannot take jobs (Cluster.HealthReason's values; the UI shows their translated labels).
RENDERING_ONLY = "rendering_only"
NO_CONNECTION_SETTINGS = "no_connection_settings"
SETTINGS_INVALID = "settings_invalid"
API_UNANSWERED = "api_unanswered"
OPERATOR_MISSING = "operator_missing"
EXECUTOR_BROKEN = "executor_broken"
REASONS = (RENDERING_ONLY, NO_CONNECTION_SETTINGS, SETTINGS_INVALID, API_UNANSWERED, OPERATOR_MISSING, EXECUTOR_BROKEN)

# The Training Operator's kinds the portal submits (jobs/executors/k8s_names.kind_for), as (apiVersion, kind).
TRAINING_OPERATOR_KINDS = (("kubeflow.org/v1", "PyTorchJob"), ("kubeflow.org/v1", "TFJob"))
# The settings keys that say how to connect to a Kubernetes cluster (clusters.kube.Kube.from_settings).
CONNECTION_KEYS = ("kube_url", "kubeconfig", "kubeconfig_context", "in_cluster")

# A stored state older than this is checked again (by the reconcile tick, or by a submission that needs it).
CHECK_EVERY_SECONDS = 30


@dataclass(frozen=True)
class Health:
    state: str
    reason: str = ""  # one of REASONS when not reachable
    message: str = ""  # what a person reads: the detail (the API server's error, the missing kinds)

    @property
    def usable(self) -> bool:
        """Does the cluster take jobs? An unknown state is not refused here: a submission checks it first."""
        return self.state in (REACHABLE, UNKNOWN)

    @property
    def takes_builds(self) -> bool:
        """Does the cluster take image builds? Kaniko runs as a plain batch Job: no Training Operator needed."""
        return self.usable or self.state == NOT_READY


def configuration_problem(
    backend: str, settings: Mapping, *, in_cluster_available: bool, default_kubeconfig: bool
) -> Health | None:
    """What makes a cluster unusable without asking it anything (None: it has to be asked).

    ``in_cluster_available``: the portal runs in a pod (KUBERNETES_SERVICE_HOST); ``default_kubeconfig``: a
    kubeconfig file is where the client looks by default ($KUBECONFIG, ~/.kube/config). Either one is how a
    Kubernetes cluster without connection settings is reached (Kube.from_settings).
    """
    if settings.get("rendering_only"):
        return Health(
            UNREACHABLE,
            RENDERING_ONLY,
            "A rendering-only example with no cluster behind it: its manifests can be previewed "
            "(manage.py render_manifests), and no job or build runs there.",
        )
    if backend != "kubernetes":
        return None
    if any(settings.get(key) for key in CONNECTION_KEYS) or in_cluster_available or default_kubeconfig:
        return None
    return Health(
        UNREACHABLE,
        NO_CONNECTION_SETTINGS,
        "The cluster has no connection settings: set kube_url (and kube_token), kubeconfig or in_cluster in "
        "its settings.",
    )


def from_kube_probe(*, answered: bool, error: str = "", served_kinds: Iterable[str] = ()) -> Health:
    """The health of a Kubernetes cluster from a probe: did the API server answer, which kinds it serves."""
    if not answered:
        return Health(UNREACHABLE, API_UNANSWERED, f"The API server does not answer: {error}".rstrip(": "))
    served = set(served_kinds)
    missing = [kind for _version, kind in TRAINING_OPERATOR_KINDS if kind not in served]
    if missing:
        return Health(
            NOT_READY,
            OPERATOR_MISSING,
            f"The Kubeflow Training Operator is not installed: the cluster serves no {', '.join(missing)}.",
        )
    return Health(REACHABLE)


def from_local_probe(*, problem: str = "") -> Health:
    """The health of a local cluster: its executor works on this host unless ``problem`` says why not."""
    if problem:
        return Health(UNREACHABLE, EXECUTOR_BROKEN, problem)
    return Health(REACHABLE)


def is_change(previous_state: str, previous_reason: str, new: Health) -> bool:
    """Whether ``new`` differs from what was stored (a state or its reason), which is worth one log line."""
    return (previous_state, previous_reason) != (new.state, new.reason)


def change_line(cluster: str, previous_state: str, new: Health) -> str | None:
    """The one log line for a change of state; None when nothing changed or on the first check of a usable one."""
    if previous_state == new.state or (previous_state == UNKNOWN and new.state == REACHABLE):
        return None
    if new.state == REACHABLE:
        return f"cluster {cluster}: reachable again (was {previous_state.replace('_', ' ')})"
    return f"cluster {cluster}: {new.state.replace('_', ' ')}: {new.message}"


def requeue_due(*, unusable_since: datetime | None, now: datetime, grace_seconds: int) -> bool:
    """Whether a job holding GPUs on a cluster unusable since ``unusable_since`` goes back to the queue now."""
    return unusable_since is not None and (now - unusable_since).total_seconds() >= grace_seconds


def short_reason(health: Health) -> str:
    """The English reason in a few words, for labels and API messages ("no connection settings")."""
    return {
        RENDERING_ONLY: "a rendering-only example, no cluster behind it",
        NO_CONNECTION_SETTINGS: "no connection settings",
        SETTINGS_INVALID: "its settings are invalid",
        API_UNANSWERED: "the API server does not answer",
        OPERATOR_MISSING: "the Training Operator is not installed",
        EXECUTOR_BROKEN: "its executor does not work on this host",
    }.get(health.reason, health.state.replace("_", " "))


def refusal(cluster: str, health: Health, what: str = "jobs") -> str | None:
    """Why ``what`` cannot go to this cluster, as the sentence a submission is refused with (None: it can)."""
    if health.takes_builds if what == "image builds" else health.usable:
        return None
    state = "is not ready" if health.state == NOT_READY else "is unreachable"
    return f"Cluster {cluster} {state} ({short_reason(health)}): it takes no {what} now. {health.message}".strip()
