"""Browser pages of deployments: /deployments/ lists those of the user's departments; /deployments/<name>/
shows the variants and weights, live per-variant charts (polling the metrics API), the A/B verdict, the
rollout's progress, every revision, and POST forms to promote a variant or roll back (each asks first). The
variants, verdict, rollout and revisions refresh themselves (htmx polling the same URL for its live parts).
Thin: look up, call a service, render.
"""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.shortcuts import redirect, render
from django.utils.cache import patch_vary_headers
from django.utils.translation import gettext as _
from django.views.decorators.http import require_POST

from core.api import visible_or_404
from core.errors import Conflict, InvalidInput
from serving import selectors, services
from serving.models import Deployment


def _visible(request, name: str) -> Deployment:
    return visible_or_404(
        selectors.deployment_get(user=request.user, name=name), _("No deployment with that name in your departments.")
    )


@login_required
def deployment_list(request):
    department = request.GET.get("department", "")
    rows = selectors.deployments_for(user=request.user, department=department).prefetch_related("variants__version")
    return render(request, "models_registry/deployments/list.html", {"deployments": rows, "department": department})


def _percent(rate) -> float | None:
    return None if rate is None else rate * 100


@login_required
def deployment_detail(request, name: str):
    """The page; or, when htmx polls for it (``HX-Request``), only its live part: the variants with their
    counts, the verdict and the rollout (``?part=history``: the revisions)."""
    deployment = _visible(request, name)
    metrics = selectors.deployment_metrics(deployment=deployment)
    variants = [
        {
            **row,
            "success_percent": _percent(row["outcomes"]["rate"]),
            "error_percent": _percent(row["error_rate"]),
            "agreement_percent": _percent(row.get("agreement", {}).get("rate")),
        }
        for row in metrics["variants"]
    ]
    history = metrics["rollout"]["history"]
    context = {
        "deployment": deployment,
        "metrics": metrics,
        "variants": variants,
        "history": history,
        "rollback_to": history[-1] if history else None,
        "revisions": selectors.deployment_revisions(deployment),
    }
    if request.headers.get("HX-Request") == "true":
        part = "history" if request.GET.get("part") == "history" else "live"
        template = f"models_registry/deployments/partials/{part}.html"
    else:
        template = "models_registry/deployments/detail.html"
    response = render(request, template, context)
    patch_vary_headers(response, ["HX-Request"])  # one URL, two bodies: a cached part never stands in for the page
    return response


@login_required
@require_POST
def deployment_promote(request, name: str):
    deployment = _visible(request, name)
    variant = request.POST.get("variant", "")
    try:
        services.deployment_promote(user=request.user, deployment=deployment, variant=variant)
    except InvalidInput as exc:
        messages.error(request, " ".join(str(m) for ms in exc.errors.values() for m in ms))
    else:
        messages.success(request, _("Variant %(variant)s now gets all the traffic.") % {"variant": variant})
    return redirect("deployment-detail", name=name)


@login_required
@require_POST
def deployment_rollback(request, name: str):
    deployment = _visible(request, name)
    try:
        services.deployment_rollback(user=request.user, deployment=deployment)
    except Conflict as exc:
        messages.error(request, str(exc))
    else:
        messages.success(request, _("Rolled back to the previous variants."))
    return redirect("deployment-detail", name=name)
