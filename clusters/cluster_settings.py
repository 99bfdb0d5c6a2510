"""Cluster settings: the containment keys the portal reads, their checks, and the one way settings are saved.

Every writer of ``Cluster.settings`` (the Django admin, the demo) saves through ``cluster_save``, so a
mistyped setting is refused with a message instead of silently read as its default later. A cluster whose
jobs run unisolated (``isolation: none``, the trusted single-user mode) serves one department only: a job
there can read everything the portal's user can, other departments' work included. Quotas are checked the
other way round through ``quota_isolation_refusal``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from django.utils.translation import gettext as _

from clusters.k8s import ClusterSettings, ManifestError
from clusters.models import Cluster
from clusters.sandbox_check import sandbox_problems

ISOLATION_SANDBOX, ISOLATION_NONE = "sandbox", "none"
ISOLATIONS = (ISOLATION_SANDBOX, ISOLATION_NONE)
SETUP_TIMEOUT_DEFAULT = 1800
SETUP_TIMEOUT_MIN, SETUP_TIMEOUT_MAX = 30, 86400


def isolation(cluster: Cluster) -> str:
    return cluster.settings.get("isolation", ISOLATION_SANDBOX)


def setup_timeout_seconds(cluster: Cluster) -> int:
    return int(cluster.settings.get("setup_timeout_seconds", SETUP_TIMEOUT_DEFAULT))


def cluster_settings_errors(*, name: str, backend: str, settings, departments: Iterable[str] = ()) -> list[str]:
    """Every problem of a cluster's settings JSON, as sentences; ``departments``: those its quotas name."""
    if not isinstance(settings, Mapping):
        return [_('Settings must be a JSON object, e.g. {"isolation": "sandbox", "setup_timeout_seconds": 1800}.')]
    errors = []
    timeout = settings.get("setup_timeout_seconds", SETUP_TIMEOUT_DEFAULT)
    if (
        isinstance(timeout, bool)
        or not isinstance(timeout, int)
        or not SETUP_TIMEOUT_MIN <= timeout <= SETUP_TIMEOUT_MAX
    ):
        errors.append(
            _(
                "setup_timeout_seconds must be a whole number of seconds from %(low)d to %(high)d "
                "(clone and environment build of one job); it is %(value)s."
            )
            % {"low": SETUP_TIMEOUT_MIN, "high": SETUP_TIMEOUT_MAX, "value": _json(timeout)}
        )
    chosen = settings.get("isolation", ISOLATION_SANDBOX)
    if chosen not in ISOLATIONS:
        errors.append(
            _(
                'isolation must be "sandbox" (each job in its own sandbox) or "none" (trusted single-user '
                "mode: jobs run as the portal's user); it is %(value)s."
            )
            % {"value": _json(chosen)}
        )
    elif chosen == ISOLATION_NONE and backend != Cluster.Backend.LOCAL:
        errors.append(_('isolation "none" is for local clusters only; Kubernetes pods are always contained.'))
    elif chosen == ISOLATION_NONE and len(set(departments)) > 1:
        errors.append(
            _(
                'isolation "none" lets a job read everything the portal can, so a cluster with it serves '
                "one department only; quotas here name %(departments)s. Remove the other departments' "
                'quotas first, or keep isolation "sandbox".'
            )
            % {"departments": ", ".join(sorted(set(departments)))}
        )
    if backend == Cluster.Backend.KUBERNETES:
        try:
            ClusterSettings.from_cluster(name, settings)
        except ManifestError as exc:
            errors.append(str(exc))
    return errors


def cluster_warnings(*, cluster: Cluster) -> list[str]:
    """What a person must know about how jobs on this cluster are contained (empty: sandboxed as promised)."""
    if cluster.backend != Cluster.Backend.LOCAL:
        return []
    if isolation(cluster) == ISOLATION_NONE:
        return [
            _(
                'Jobs on cluster %(cluster)s run UNISOLATED (isolation "none"): as the portal\'s own user, with '
                "its files, database, processes and every other job in reach. Use it only on a machine of your "
                "own, for one trusted department."
            )
            % {"cluster": cluster.name}
        ]
    return [
        _("Cluster %(cluster)s is set to sandbox its jobs, but this host cannot: %(problem)s")
        % {"cluster": cluster.name, "problem": problem}
        for problem in sandbox_problems()
    ]


def clusters_unisolated(*, names: Iterable[str]) -> list[str]:
    """Which of these clusters run jobs unisolated, by name."""
    return list(
        Cluster.objects.filter(
            name__in=list(names), backend=Cluster.Backend.LOCAL, settings__isolation=ISOLATION_NONE
        ).values_list("name", flat=True)
    )


def _json(value) -> str:
    return '"' + value + '"' if isinstance(value, str) else str(value)
