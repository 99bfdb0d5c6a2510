"""Browser pages of the model registry. Thin: look up what the user may see, call a service, render.

/models/ lists the models of the user's departments; /models/<name>/ shows the versions with their
lineage, metrics side by side, aliases and tags, with POST forms to move aliases and edit tags.
"""

from __future__ import annotations

import re

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.shortcuts import redirect, render
from django.utils.translation import gettext as _
from django.views.decorators.http import require_POST

from accounts import selectors as account_selectors
from core.api import visible_or_404
from core.errors import Conflict, InvalidInput
from models_registry import selectors, services
from models_registry.models import ModelVersion, RegisteredModel

SUGGESTED_ALIASES = ("champion", "challenger")
COMPARE_DEFAULT = 5  # without a selection, the newest versions are compared


def _visible_model(request, name: str) -> RegisteredModel:
    return visible_or_404(
        selectors.model_get(user=request.user, name=name), _("No model with that name in your departments.")
    )


def _visible_version(request, name: str, number: int) -> ModelVersion:
    return visible_or_404(
        selectors.version_get(model=_visible_model(request, name), number=number),
        _("The model has no version with that number."),
    )


def _problems(exc: InvalidInput) -> str:
    return " ".join(str(message) for messages_ in exc.errors.values() for message in messages_)


def commit_url(code_url: str, commit: str) -> str | None:
    """A link to the commit on the code host, for https URLs of GitHub/GitLab/Gitea-style hosts."""
    if not commit or not re.fullmatch(r"https://[^\s?#]+", code_url or ""):
        return None
    base = code_url.rstrip("/").removesuffix(".git")
    return f"{base}/commit/{commit}"


@login_required
def model_list(request):
    search = request.GET.get("q", "").strip()
    department = request.GET.get("department", "")
    context = {
        "models": selectors.models_for(user=request.user, department=department, search=search),
        "departments": account_selectors.departments_usable(user=request.user),
        "filters": {"q": search, "department": department},
        "form": {"name": "", "department": "", "description": ""},
        "errors": {},
    }
    if request.method == "POST":
        form = {key: request.POST.get(key, "").strip() for key in ("name", "department", "description")}
        try:
            model = services.model_create(user=request.user, **form)
        except InvalidInput as exc:
            context.update(form=form, errors=exc.errors)
            return render(request, "models_registry/model_list.html", context, status=400)
        messages.success(request, _("Model %(name)s created.") % {"name": model.name})
        return redirect("model-detail", name=model.name)
    return render(request, "models_registry/model_list.html", context)


@login_required
def model_detail(request, name: str):
    model = _visible_model(request, name)
    versions = list(selectors.versions_of(model=model))
    chosen = {int(value) for value in request.GET.getlist("compare") if value.isdigit()}
    compared = [v for v in versions if v.version in chosen] if chosen else versions[-COMPARE_DEFAULT:]
    rows = []
    for version in versions:
        lineage = version.lineage or {}
        rows.append(
            {
                "version": version,
                "lineage": lineage,
                "job_id": version.source_job_id,
                "commit_url": commit_url(lineage.get("code_url", ""), lineage.get("commit", "")),
                "tags": sorted(version.tags.items()),
                "aliases": [alias.name for alias in version.aliases.all()],
            }
        )
    metric_names = selectors.metric_names(compared)
    context = {
        "model": model,
        "rows": list(reversed(rows)),  # newest first
        "compared": compared,
        "chosen": chosen,
        "metrics": [(metric, [v.metrics.get(metric) for v in compared]) for metric in metric_names],
        "suggested_aliases": SUGGESTED_ALIASES,
    }
    return render(request, "models_registry/model_detail.html", context)


@login_required
@require_POST
def version_alias(request, name: str, number: int):
    version = _visible_version(request, name, number)
    alias = request.POST.get("alias", "").strip()
    try:
        if request.POST.get("remove"):
            services.alias_remove(user=request.user, model=version.model, name=alias)
            messages.success(request, _("Alias %(alias)s removed.") % {"alias": alias})
        else:
            services.alias_set(user=request.user, version=version, name=alias)
            messages.success(
                request, _("%(alias)s now points to version %(number)s.") % {"alias": alias, "number": number}
            )
    except InvalidInput as exc:
        messages.error(request, _problems(exc))
    except Conflict as exc:
        messages.error(request, str(exc))
    return redirect("model-detail", name=name)


@login_required
@require_POST
def version_tags(request, name: str, number: int):
    version = _visible_version(request, name, number)
    key = request.POST.get("key", "").strip()
    value = None if request.POST.get("remove") else request.POST.get("value", "").strip()
    try:
        services.version_update(user=request.user, version=version, tags={key: value})
    except InvalidInput as exc:
        messages.error(request, _problems(exc))
    else:
        if value is None:
            messages.success(
                request, _("Tag %(key)s removed from version %(number)s.") % {"key": key, "number": number}
            )
        else:
            messages.success(request, _("Tag %(key)s set on version %(number)s.") % {"key": key, "number": number})
    return redirect("model-detail", name=name)


@login_required
@require_POST
def version_register(request, name: str):
    model = _visible_model(request, name)
    job = request.POST.get("source_job", "").strip()
    if not job.isdigit():
        messages.error(request, _("Give the id of a succeeded job of the department, e.g. 42."))
        return redirect("model-detail", name=name)
    try:
        version = services.version_register(
            user=request.user,
            model=model,
            source_job=int(job),
            artifact_path=request.POST.get("artifact_path", "").strip(),
            framework=request.POST.get("framework", "sklearn") or "sklearn",
        )
    except InvalidInput as exc:
        messages.error(request, _problems(exc))
    else:
        messages.success(request, _("Version %(number)s registered.") % {"number": version.version})
    return redirect("model-detail", name=name)
