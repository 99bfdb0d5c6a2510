"""Browser pages. Thin: look up what the user may see, call a service, render.

Pages with live parts render just that part when htmx asks (``HX-Request``):
the part polls itself every few seconds, and refreshes at once when the
page's websocket hears of a change (static/frontend/portal.js).
"""

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.paginator import Paginator
from django.http import Http404
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils.cache import patch_vary_headers
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy
from django.views.decorators.http import require_POST

from accounts import permissions
from accounts import selectors as account_selectors
from clusters import selectors as cluster_selectors
from clusters.cluster_settings import cluster_warnings, clusters_unisolated
from core.api import visible_or_404
from core.errors import Conflict, InvalidInput
from frontend.forms import JobForm
from jobs import lifecycle, selectors, services
from jobs import usage as job_usage
from jobs.models import Job

JOBS_PER_PAGE = 25
RECENT_JOBS = 10
STATUS_LABELS = [
    (lifecycle.QUEUED, gettext_lazy("Queued")),
    (lifecycle.ADMITTED, gettext_lazy("Admitted")),
    (lifecycle.STARTING, gettext_lazy("Starting")),
    (lifecycle.RUNNING, gettext_lazy("Running")),
    (lifecycle.SUCCEEDED, gettext_lazy("Succeeded")),
    (lifecycle.FAILED, gettext_lazy("Failed")),
    (lifecycle.CANCELLED, gettext_lazy("Cancelled")),
    (lifecycle.PREEMPTED, gettext_lazy("Preempted")),
]


def _render_live(request, page: str, part: str, context: dict):
    """The whole page, or only its live part when htmx polls for it."""
    response = render(request, part if request.headers.get("HX-Request") == "true" else page, context)
    # One URL, two bodies: keep a cached part from standing in for the page on "back".
    patch_vary_headers(response, ["HX-Request"])
    return response


def _visible_job(request, job_id: int) -> Job:
    return visible_or_404(
        selectors.job_get(user=request.user, job_id=job_id), _("No job with that id in your departments.")
    )


def _bar(quota, usage) -> dict:
    """Widths (percent of the pool) of the used-within-quota and borrowed parts, and where nominal ends."""
    total = max(quota.pool.total, 1)
    within = min(usage.in_use, quota.nominal)
    return {
        "quota": quota,
        "usage": usage,
        "within_pct": round(100 * within / total, 1),
        "borrowed_pct": round(100 * usage.borrowed / total, 1),
        "nominal_pct": round(100 * min(quota.nominal, total) / total, 1),
    }


@login_required
def home(request):
    user = request.user
    mine = selectors.jobs_for(user=user, submitted_by=user.username)
    departments = account_selectors.departments_usable(user=user)
    context = {
        "memberships": user.memberships.select_related("department"),
        "is_platform_admin": permissions.is_platform_admin(user),
        "recent_jobs": mine[:RECENT_JOBS],
        "queued_jobs": mine.filter(status=lifecycle.QUEUED).order_by("queue_position", "created_at"),
        "usage": [
            (department, [_bar(quota, usage) for quota, usage in rows])
            for department, rows in job_usage.usage_of(departments=departments)
        ],
        "live_departments": [department.slug for department in departments],
    }
    return _render_live(request, "frontend/home.html", "frontend/partials/dashboard_live.html", context)


@login_required
def job_list(request):
    params = request.GET
    filters = {
        "department": params.get("department", ""),
        "status": params.get("status", ""),
        "submitted_by": params.get("user", "").strip(),
        "search": params.get("q", "").strip(),
    }
    jobs = selectors.jobs_for(user=request.user, **filters)
    page = Paginator(jobs, JOBS_PER_PAGE).get_page(params.get("page"))
    departments = account_selectors.departments_usable(user=request.user)
    keep = params.copy()
    keep.pop("page", None)
    context = {
        "page": page,
        "filters": filters,
        "departments": departments,
        "statuses": STATUS_LABELS,
        "filtered": any(filters.values()),
        "query": keep.urlencode(),
        "live_departments": [filters["department"]] if filters["department"] else [d.slug for d in departments],
    }
    return _render_live(request, "frontend/job_list.html", "frontend/partials/job_rows.html", context)


@login_required
def job_new(request):
    user = request.user
    if request.method == "POST":
        form = JobForm(request.POST, user=user)
        values, type_errors = form.submission()
        try:
            job, _created = services.job_submit(user=user, data=values, type_errors=type_errors)
        except InvalidInput as exc:
            form.add_service_errors(exc.errors, known=type_errors)
        else:
            messages.success(request, _("Job %(name)s submitted.") % {"name": job.name})
            return redirect("job-detail", job_id=job.pk)
        source = None
    else:
        source = _visible_job(request, _int_or_404(request.GET["clone"])) if request.GET.get("clone") else None
        form = JobForm(user=user, initial=JobForm.initial_from_job(source) if source else None)
    context = {
        "form": form,
        "source": source,
        "has_departments": bool(form.fields["department"].choices),
        "unisolated_clusters": clusters_unisolated(names=[name for name, _label in form.fields["cluster"].choices]),
    }
    return render(request, "frontend/job_new.html", context)


def _int_or_404(value: str) -> int:
    try:
        return int(value)
    except ValueError:
        raise Http404(_("No job with that id in your departments.")) from None


@login_required
def job_detail(request, job_id: int):
    job = _visible_job(request, job_id)
    context = {
        "job": job,
        "events": selectors.job_events(job=job),
        "final": job.status in lifecycle.FINAL,
        "cancellable": job.status not in lifecycle.FINAL and job.cancel_requested_at is None,
        "workers": range(job.workers),
        "logs_url": reverse("api-job-logs", args=[job.pk]),
        # Files removed after PORTAL_JOB_RETENTION_DAYS (jobs/retention.py): the page says how long after the end.
        "retention_days": (job.files_removed_at - job.finished_at).days
        if job.files_removed_at and job.finished_at
        else 0,
    }
    return _render_live(request, "frontend/job_detail.html", "frontend/partials/job_live.html", context)


@login_required
@require_POST
def job_cancel(request, job_id: int):
    job = _visible_job(request, job_id)
    try:
        services.job_cancel(user=request.user, job=job)
    except Conflict as exc:
        messages.error(request, str(exc))
    else:
        messages.success(request, _("Cancel requested for job %(name)s.") % {"name": job.name})
    return redirect("job-detail", job_id=job.pk)


@login_required
def queue(request):
    cluster, gpu_type = request.GET.get("cluster", ""), request.GET.get("gpu_type", "")
    context = {
        "jobs": selectors.queue_for(user=request.user, cluster=cluster, gpu_type=gpu_type),
        "clusters": cluster_selectors.clusters_with_pools(),
        "cluster": cluster,
        "gpu_type": gpu_type,
        "live_departments": [d.slug for d in account_selectors.departments_usable(user=request.user)],
    }
    return _render_live(request, "frontend/queue.html", "frontend/partials/queue_rows.html", context)


@login_required
def cluster_list(request):
    allocated = job_usage.pool_allocated()
    clusters = [
        (cluster, [(pool, allocated.get(pool.pk, 0)) for pool in cluster.pools.all()])
        for cluster in cluster_selectors.clusters_with_pools()
    ]
    return render(request, "frontend/cluster_list.html", {"clusters": clusters})


@login_required
def cluster_detail(request, name: str):
    cluster = visible_or_404(cluster_selectors.cluster_get(name=name), _("No cluster with that name."))
    allocated = job_usage.pool_allocated()
    gpu_map = selectors.gpu_map(user=request.user, cluster=cluster)
    pools = [(pool, allocated.get(pool.pk, 0), gpu_map[pool.pk]) for pool in cluster.pools.all()]
    context = {
        "cluster": cluster,
        "pools": pools,
        "containment_warnings": cluster_warnings(cluster=cluster),
        "live_departments": [d.slug for d in account_selectors.departments_usable(user=request.user)],
    }
    return _render_live(request, "frontend/cluster_detail.html", "frontend/partials/cluster_live.html", context)
