"""Browser pages. Thin: look up what the user may see, call a service, render.

Pages with live parts render just that part when htmx asks (``HX-Request``):
the part polls itself every few seconds, and refreshes at once when the
page's websocket hears of a change (static/frontend/portal.js).
"""

from datetime import timedelta

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.paginator import Paginator
from django.db import transaction
from django.http import Http404, JsonResponse
from django.shortcuts import redirect, render
from django.template.loader import render_to_string
from django.urls import NoReverseMatch, reverse
from django.utils import timezone
from django.utils.cache import patch_vary_headers
from django.utils.http import url_has_allowed_host_and_scheme
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy, ngettext, pgettext
from django.views.decorators.http import require_POST

from accounts import permissions
from accounts import selectors as account_selectors
from clusters import selectors as cluster_selectors
from clusters.cluster_settings import cluster_warnings, clusters_unisolated
from clusters.services import cluster_health_shown
from core.api import visible_or_404
from core.errors import Conflict, InvalidInput
from frontend.forms import FORM_FIELD, JobForm
from jobs import lifecycle, selectors, services
from jobs import preview as job_previews
from jobs import usage as job_usage
from jobs.models import Job
from models_registry import from_job as registry_from_job
from models_registry import selectors as registry_selectors
from models_registry import services as registry_services
from tensorboards import services as boards

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
        "recent_jobs": selectors.with_progress(mine, now=timezone.now())[:RECENT_JOBS],
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
    sort = params.get("sort", "") or selectors.DEFAULT_JOB_SORT
    sort_problem = ""
    if not selectors.sort_valid(sort):
        sort_problem = _("The jobs cannot be sorted by %(sort)s; they are shown newest first.") % {"sort": sort}
        sort = selectors.DEFAULT_JOB_SORT
    jobs = selectors.jobs_sorted(selectors.jobs_for(user=request.user, **filters), sort=sort, now=timezone.now())
    page = Paginator(jobs, JOBS_PER_PAGE).get_page(params.get("page"))
    for job in page.object_list:
        job.cancellable_by_me = _cancellable(request.user, job)
    departments = account_selectors.departments_usable(user=request.user)
    keep = params.copy()
    keep.pop("page", None)
    unsorted = keep.copy()
    unsorted.pop("sort", None)
    context = {
        "page": page,
        "filters": filters,
        "departments": departments,
        "statuses": STATUS_LABELS,
        "filtered": any(filters.values()),
        "query": keep.urlencode(),
        "sort": sort,
        "sort_problem": sort_problem,
        "sort_links": _sort_links(sort, unsorted.urlencode()),
        "live_departments": [filters["department"]] if filters["department"] else [d.slug for d in departments],
    }
    return _render_live(request, "frontend/job_list.html", "frontend/partials/job_rows.html", context)


def _sort_links(current: str, query: str) -> dict[str, dict]:
    """Per sortable column: the link that sorts by it (the other way round when it is the current sort,
    newest/longest/most first otherwise, names A to Z) and the direction it is sorted now, if it is."""
    links = {}
    for column in selectors.JOB_SORTS:
        first = column if column == "name" else f"-{column}"
        if current.removeprefix("-") == column:
            target = column if current.startswith("-") else f"-{column}"
            direction = "descending" if current.startswith("-") else "ascending"
        else:
            target, direction = first, ""
        links[column] = {"url": f"?{query}&sort={target}" if query else f"?sort={target}", "direction": direction}
    return links


def _cancellable(user, job: Job) -> bool:
    """May the user cancel the job now (the job list's checkboxes, the job page's button)?"""
    return permissions.can_use(user, job) and job.status not in lifecycle.FINAL and job.cancel_requested_at is None


BULK_CANCEL_MAX = 200


@login_required
@require_POST
def job_bulk_cancel(request):
    """Cancel the selected jobs: first a page that names them (and those that cannot be cancelled), then,
    once confirmed, the cancel service per job, and a report of what was cancelled and what was not."""
    raw = request.POST.getlist("job")
    ids = sorted({int(value) for value in raw if value.isdigit()})
    if not ids:
        messages.error(request, _("Select the jobs to cancel first (the boxes in the first column)."))
        return redirect(_back_to_list(request))
    if len(ids) > BULK_CANCEL_MAX:
        messages.error(request, _("Cancel at most %(count)d jobs at a time.") % {"count": BULK_CANCEL_MAX})
        return redirect(_back_to_list(request))
    # Jobs the user may not see are left out as if they did not exist (tenancy): they are neither named nor cancelled.
    jobs = list(selectors.jobs_for(user=request.user).filter(pk__in=ids).order_by("pk"))
    cancellable = [job for job in jobs if _cancellable(request.user, job)]
    skipped = [(job, _why_not_cancellable(job)) for job in jobs if job not in cancellable]
    unknown = len(ids) - len(jobs)
    if request.POST.get("confirm") != "yes":
        context = {"cancellable": cancellable, "skipped": skipped, "unknown": unknown, "back": _back_to_list(request)}
        return render(request, "frontend/job_bulk_cancel.html", context)
    cancelled, failed = [], list(skipped)
    for job in cancellable:
        try:
            services.job_cancel(user=request.user, job=job)
        except Conflict as exc:
            failed.append((job, str(exc)))
        else:
            cancelled.append(job)
    if cancelled:
        messages.success(
            request,
            ngettext(
                "Cancel requested for %(count)d job: %(names)s.",
                "Cancel requested for %(count)d jobs: %(names)s.",
                len(cancelled),
            )
            % {"count": len(cancelled), "names": ", ".join(f"{job.name} #{job.pk}" for job in cancelled)},
        )
    for job, why in failed:
        messages.warning(
            request, _("Not cancelled: %(name)s #%(id)s (%(why)s)") % {"name": job.name, "id": job.pk, "why": why}
        )
    if unknown:
        messages.warning(
            request,
            ngettext(
                "%(count)d selected job is not in your departments and was left alone.",
                "%(count)d selected jobs are not in your departments and were left alone.",
                unknown,
            )
            % {"count": unknown},
        )
    return redirect(_back_to_list(request))


def _why_not_cancellable(job: Job) -> str:
    if job.status in lifecycle.FINAL:
        return _("it has already ended")
    if job.cancel_requested_at is not None:
        return _("it is being cancelled already")
    return _("you may not cancel jobs of department %(department)s") % {"department": job.department.slug}


def _back_to_list(request) -> str:
    """The jobs list with the filters and sort the selection was made under (only the list's own parameters)."""
    back = request.POST.get("back", "")
    safe = url_has_allowed_host_and_scheme(back, allowed_hosts={request.get_host()}, require_https=request.is_secure())
    return back if safe and (back == "/jobs/" or back.startswith("/jobs/?")) else reverse("job-list")


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
        "sizing": form.sizing(),
    }
    return render(request, "frontend/job_new.html", context)


@login_required
@require_POST
def job_new_preview(request):
    """The submit form's start preview as HTML: what POST /api/v1/jobs/preview/ answers (jobs.preview) for the form
    as it is filled in, in words. The form's script posts the form (with its CSRF token) as fields change."""
    form = JobForm(request.POST, user=request.user)
    values, type_errors = form.submission()
    asked = timezone.now()
    context: dict = {"preview": None, "alternatives": [], "problems": []}
    try:
        found = job_previews.job_preview(
            user=request.user, data=values, type_errors=type_errors, now=asked, partial=True
        )
    except InvalidInput as exc:
        for field, messages in exc.errors.items():
            shown = form.fields.get(FORM_FIELD.get(field, field))
            label = shown.label if shown is not None else ""
            for message in messages if isinstance(messages, list) else [messages]:
                context["problems"].append({"label": label, "message": str(message)})
    else:
        soon = asked + timedelta(seconds=job_previews.SOONER_BY_SECONDS)
        context["preview"] = found
        # "likely 14:20, at the latest 16:00" when history says sooner than the limits do
        context["ranged"] = bool(
            found.estimated_start and found.latest_start and found.latest_start - found.estimated_start > soon - asked
        )
        context["alternatives"] = [
            {**alternative.change, "now": alternative.estimated_start <= soon, "at": alternative.estimated_start}
            for alternative in found.alternatives
        ]
    return render(request, "frontend/partials/job_preview.html", context)


@login_required
def job_new_sizing(request):
    """The submit form's choices and sizing for a department, cluster and GPU type, as JSON: the GPU types and
    images offered there, and the sizing panel (free quota, idle GPUs) as HTML. The form's script asks on change."""
    chosen = {name: request.GET.get(name, "") for name in ("department", "cluster", "gpu_type", "image")}
    sizing = JobForm(user=request.user, initial=chosen).sizing()
    return JsonResponse(
        {
            "gpu_types": sizing["gpu_types"],
            "gpu_type": sizing["gpu_type"],
            "images": sizing["images"],
            "image": sizing["image"],
            "html": render_to_string("frontend/partials/job_sizing.html", {"sizing": sizing}, request=request),
        }
    )


def _int_or_404(value: str) -> int:
    try:
        return int(value)
    except ValueError:
        raise Http404(_("No job with that id in your departments.")) from None


@login_required
def job_detail(request, job_id: int):
    job = _visible_job(request, job_id)
    return _job_page(request, job)


def _job_page(request, job: Job, *, register_form: dict | None = None, status: int = 200):
    partial = request.headers.get("HX-Request") == "true"
    context = {
        "job": job,
        "events": selectors.job_events(job=job),
        "final": job.status in lifecycle.FINAL,
        "cancellable": _cancellable(request.user, job),
        "gpu_seconds_now": job_usage.gpu_seconds_so_far(job, now=timezone.now()),
        "holds_gpus": job.status in lifecycle.HOLDS_GPUS,
        "may_register": _may_register(request.user, job),
        # A run's log exists once it was launched (an admitted job has its run id before); a re-queued job
        # keeps showing its last run's.
        "log_started": bool(job.run_id) and (job.launched_at is not None or job.preemptions > 0),
        # The sections outside the live part: not read again for every poll of it.
        "tensorboard_offer": None if partial else _tensorboard_offer(job),
        "register": None
        if partial or not _may_register(request.user, job)
        else _register_context(request, job, register_form),
        "workers": range(job.workers),
        "logs_url": reverse("api-job-logs", args=[job.pk]),
        # Files removed after PORTAL_JOB_RETENTION_DAYS (jobs/retention.py): the page says how long after the end.
        "retention_days": (job.files_removed_at - job.finished_at).days
        if job.files_removed_at and job.finished_at
        else 0,
    }
    response = _render_live(request, "frontend/job_detail.html", "frontend/partials/job_live.html", context)
    response.status_code = status
    return response


def _tensorboard_offer(job: Job) -> dict:
    """Whether the job page offers "Open TensorBoard" and, when not, why not.

    Offered while the job runs (its events appear as it writes them) and, once it ran, when it wrote event
    files; a job still waiting gets the button as soon as it runs (portal.js, from the live part)."""
    if not job.tensorboard:
        return {"offer": False, "why": "off"}
    if job.status == lifecycle.RUNNING:
        return {"offer": True, "why": ""}
    if job.status in lifecycle.FINAL or job.started_at is not None or job.run_id:
        wrote = boards.job_wrote_events(job)
        if wrote or (wrote is None and job.launched_at is not None):
            return {"offer": True, "why": ""}
        if job.files_removed_at:
            return {"offer": False, "why": "removed"}
        if job.status in lifecycle.FINAL:
            return {"offer": False, "why": "no_events"}
    return {"offer": False, "why": "not_running"}


def _may_register(user, job: Job) -> bool:
    """A version can be registered from a succeeded job by those who may create models in its department."""
    return job.status == lifecycle.SUCCEEDED and permissions.can_use(user, job.department)


REGISTER_FIELDS = ("model", "artifact_path", "framework")


def _register_context(request, job: Job, form: dict | None) -> dict:
    output = registry_from_job.job_output(job=job)
    values = (form or {}).get("values") or {}
    entries = output.entries
    # Preselected: what was picked before, else a file at the top of the folder, one called model.* first.
    top_files = sorted(
        (entry.path for entry in entries if not entry.is_dir and "/" not in entry.path),
        key=lambda path: (not path.startswith("model"), path),
    )
    chosen = values.get("artifact_path") or (top_files[0] if top_files else "")
    return {
        "output": output,
        "chosen": chosen,
        "frameworks": registry_services.FRAMEWORKS,
        "framework": values.get("framework") or "sklearn",
        "model": values.get("model", ""),
        "models": [m.name for m in registry_selectors.models_for(user=request.user, department=job.department.slug)],
        "errors": (form or {}).get("errors") or {},
    }


@login_required
@require_POST
def job_register_version(request, job_id: int):
    """Register a version from the job's output: into the named model of the job's department, created here
    when there is none of that name yet; then to the new version's page. Problems go back to the form on
    the job page with what was typed."""
    job = _visible_job(request, job_id)
    if not _may_register(request.user, job):
        messages.error(
            request,
            _("Only the output of a succeeded job can be registered; this one is %(status)s.")
            % {"status": pgettext("status", job.status)},  # the words of frontend/templatetags/values.py
        )
        return redirect("job-detail", job_id=job.pk)
    typed = {name: request.POST.get(name, "").strip() for name in REGISTER_FIELDS}
    errors: dict[str, list[str]] = {}
    if not typed["model"]:
        errors["model"] = [
            _("Name the model: an existing model of %(department)s, or a new name to create one.")
            % {"department": job.department.slug}
        ]
    if not typed["artifact_path"]:
        errors["artifact_path"] = [_("Pick the file or folder to register from the job's output.")]
    if typed["framework"] not in registry_services.FRAMEWORKS:
        errors["framework"] = [_("Pick the framework from the list.")]
    if not errors:
        try:
            with transaction.atomic():  # a model created here is not kept when its first version is refused
                model = registry_selectors.model_get(user=request.user, name=typed["model"])
                if model is None:
                    model = registry_services.model_create(
                        user=request.user, name=typed["model"], department=job.department.slug
                    )
                version = registry_services.version_register(
                    user=request.user,
                    model=model,
                    source_job=job.pk,
                    artifact_path=typed["artifact_path"],
                    framework=typed["framework"],
                )
        except InvalidInput as exc:
            for field, problems in exc.errors.items():
                target = {"name": "model", "source_job": "model"}.get(field, field)
                target = target if target in REGISTER_FIELDS else "model"
                errors.setdefault(target, []).extend(str(problem) for problem in problems)
        else:
            messages.success(
                request,
                _("Version %(number)s of %(model)s registered from job %(job)s; its files are being copied.")
                % {"number": version.version, "model": model.name, "job": job.name},
            )
            return redirect(_version_url(model.name, version.version))
    return _job_page(request, job, register_form={"values": typed, "errors": errors}, status=400)


def _version_url(model: str, number: int) -> str:
    """The page of one model version (models_registry's), by name when it is routed, else by its path."""
    try:
        return reverse("model-version", kwargs={"name": model, "number": number})
    except NoReverseMatch:
        return f"/models/{model}/versions/{number}/"


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
        (cluster, [(pool, allocated.get(pool.pk, 0)) for pool in cluster.pools.all()], cluster_health_shown(cluster))
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
        "health": cluster_health_shown(cluster),
        "containment_warnings": cluster_warnings(cluster=cluster),
        "live_departments": [d.slug for d in account_selectors.departments_usable(user=request.user)],
    }
    return _render_live(request, "frontend/cluster_detail.html", "frontend/partials/cluster_live.html", context)
