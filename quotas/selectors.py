"""Reads of tenancy and capacity: what a user may see, with live usage."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from datetime import datetime

from django.db.models import Q, QuerySet
from django.utils import timezone

from accounts import permissions
from clusters.models import Cluster
from quotas.models import PriorityClass, Quota, QuotaLoan


def department_quotas(*, department) -> list[Quota]:
    """The department's quotas with their pools and clusters: by cluster (oldest first), then by GPU type."""
    return list(_department_quotas(department))


def default_cluster(*, department, quotas: list[Quota] | None = None) -> Cluster | None:
    """The department's default cluster, for jobs and deployments that name none: the oldest cluster it has
    quota on (a newly added cluster does not silently become everybody's default); None without quota.
    ``quotas``: the department's department_quotas(), where the caller has them already (no query then)."""
    if quotas is None:
        quota = _department_quotas(department).first()
    else:
        quota = quotas[0] if quotas else None
    return quota.pool.cluster if quota is not None else None


def _department_quotas(department) -> QuerySet[Quota]:
    return (
        Quota.objects.filter(department=department)
        .select_related("pool__cluster")
        .order_by("pool__cluster_id", "pool__gpu_type")
    )


def priority_classes() -> QuerySet[PriorityClass]:
    return PriorityClass.objects.all()


# --- Department admin console (frontend/console.py) ------------------------------------


# --- Usage report (API.md "Usage and audit") ----------------------------------------


# --- Browser pages (frontend) ---------------------------------------------------------


def quotas_of(*, departments, now: datetime | None = None) -> list[Quota]:
    """Quotas of these departments, in the order submission picks defaults (oldest cluster, then GPU type), with
    their nominal as active loans make it (effective_quotas)."""
    return effective_quotas(
        Quota.objects.filter(department__in=departments)
        .select_related("department", "pool__cluster")
        .order_by("department__slug", "pool__cluster_id", "pool__gpu_type"),
        now=now,
    )


# --- Quota loans (a department lends GPUs of a pool to another until a time) -------------


def loans_active(*, now: datetime | None = None) -> QuerySet[QuotaLoan]:
    """Loans not ended and not yet due at ``now``: they move nominal quota now."""
    return QuotaLoan.objects.filter(ended_at__isnull=True, until__gt=now or timezone.now())


def loans_for(*, user) -> QuerySet[QuotaLoan]:
    """The loans the user may see: those whose lender or borrower is one of their departments (all for platform
    admins), newest first."""
    loans = QuotaLoan.objects.select_related("from_department", "to_department", "pool__cluster", "created_by")
    if permissions.is_platform_admin(user):
        return loans
    departments = list(permissions.visible_departments(user).values_list("pk", flat=True))
    return loans.filter(Q(from_department_id__in=departments) | Q(to_department_id__in=departments))


def loans_of(*, department) -> QuerySet[QuotaLoan]:
    """The loans the department lends or borrows, newest first (the console's page, which checks who may look)."""
    return QuotaLoan.objects.filter(Q(from_department=department) | Q(to_department=department)).select_related(
        "from_department", "to_department", "pool__cluster", "created_by", "ended_by"
    )


def loan_get(*, user, loan_id: int) -> QuotaLoan | None:
    return loans_for(user=user).filter(pk=loan_id).first()


def effective_quotas(quotas: Iterable[Quota], *, now: datetime | None = None) -> list[Quota]:
    """The quota rows with ``nominal`` as active loans make it at ``now``: a lender's falls by what it lends, a
    borrower's rises by as much. The one place loans touch quotas: the scheduler's snapshot (jobs.admission),
    the quota bars and the free-quota figures all read quotas through here.

    A loan moves GPUs only between two quota rows of its pool (a borrower without a quota there gets nothing;
    quotas.services.loan_create refuses such a loan), and never more than the lender's own nominal left after
    its older loans, so the pool's nominal total stays what quotas_check allowed even if a platform admin
    lowered the lender's quota meanwhile. A lending limit is capped at the lowered nominal. Each returned row
    also carries ``own_nominal``, ``loans_out`` and ``loans_in`` (its active loans); the rows are copies for
    reading: never save them.
    """
    quotas = list(quotas)
    if not quotas:
        return quotas
    loans = list(
        loans_active(now=now)
        .filter(pool_id__in={q.pool_id for q in quotas})
        .select_related("from_department", "to_department")
        .order_by("created_at", "pk")
    )
    for quota in quotas:
        quota.own_nominal = quota.nominal
        quota.loans_out, quota.loans_in = (), ()
    if not loans:
        return quotas
    keys = {(q.department_id, q.pool_id) for q in quotas}
    wanted = {(loan.from_department_id, loan.pool_id) for loan in loans} | {
        (loan.to_department_id, loan.pool_id) for loan in loans
    }
    own = {(q.department_id, q.pool_id): q.nominal for q in quotas}
    missing = wanted - keys
    if missing:
        rows = Quota.objects.filter(
            pool_id__in={pool for _, pool in missing}, department_id__in={d for d, _ in missing}
        ).values_list("department_id", "pool_id", "nominal")
        own.update({(d, p): n for d, p, n in rows if (d, p) in missing})
    shift: dict[tuple[int, int], int] = defaultdict(int)
    out: dict[tuple[int, int], list[QuotaLoan]] = defaultdict(list)
    into: dict[tuple[int, int], list[QuotaLoan]] = defaultdict(list)
    for loan in loans:
        lender, borrower = (loan.from_department_id, loan.pool_id), (loan.to_department_id, loan.pool_id)
        if lender not in own or borrower not in own:
            continue
        moved = min(loan.gpus, max(0, own[lender] + shift[lender]))
        if moved <= 0:
            continue
        shift[lender] -= moved
        shift[borrower] += moved
        out[lender].append(loan)
        into[borrower].append(loan)
    for quota in quotas:
        key = (quota.department_id, quota.pool_id)
        quota.nominal = quota.nominal + shift[key]
        if quota.lending_limit is not None:
            quota.lending_limit = min(quota.lending_limit, quota.nominal)
        quota.loans_out, quota.loans_in = tuple(out[key]), tuple(into[key])
    return quotas


def loans_lent(*, department, pool, now: datetime | None = None) -> int:
    """GPUs of the pool the department lends now."""
    return sum(loans_active(now=now).filter(from_department=department, pool=pool).values_list("gpus", flat=True))
