"""Browser pages of the model registry. Thin: look up what the user may see, call a service, render.

/models/ lists the models of the user's departments; /models/<name>/ shows the versions with their
lineage, metrics side by side, aliases and tags, with POST forms to move aliases, edit tags and register a
version; /models/<name>/versions/<n>/ is one version: lineage, metrics (the best of the model's marked),
aliases, tags, the artifact's files and the deployments that serve it.
"""

from __future__ import annotations

import re

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.shortcuts import redirect, render
from django.utils.dateparse import parse_datetime
from django.utils.translation import gettext as _
from django.views.decorators.http import require_POST

from accounts import selectors as account_selectors
from core.api import visible_or_404
from core.errors import Conflict, InvalidInput
from jobs import lifecycle
from jobs import selectors as job_selectors
from models_registry import artifacts, selectors, services
from models_registry.models import ModelVersion, RegisteredModel

SUGGESTED_ALIASES = ("champion", "challenger")
COMPARE_DEFAULT = 5  # without a selection, the newest versions are compared
JOBS_OFFERED = 20  # succeeded jobs offered in the "register a version" form (any other id can be typed)


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


def _lineage_row(version: ModelVersion) -> dict:
    lineage = version.lineage or {}
    return {
        "version": version,
        "lineage": lineage,
        "job_id": version.source_job_id,
        "commit_url": commit_url(lineage.get("code_url", ""), lineage.get("commit", "")),
        "tags": sorted(version.tags.items()),
        "aliases": [alias.name for alias in version.aliases.all()],
    }


def _register_form(request, model: RegisteredModel, form: dict | None = None) -> dict:
    """The "register a version" form: what was typed (kept on an error), the frameworks, and the department's
    latest succeeded jobs to pick from."""
    jobs = job_selectors.jobs_for(user=request.user, department=model.department.slug, status=lifecycle.SUCCEEDED)
    return {
        "values": form or {"source_job": "", "artifact_path": "model.joblib", "framework": "sklearn"},
        "frameworks": services.FRAMEWORKS,
        "jobs": list(jobs.order_by("-finished_at", "-pk")[:JOBS_OFFERED]),
    }


def _model_page(request, model: RegisteredModel, *, form: dict | None = None, errors: dict | None = None, status=200):
    versions = list(selectors.versions_of(model=model))
    chosen = {int(value) for value in request.GET.getlist("compare") if value.isdigit()}
    compared = [v for v in versions if v.version in chosen] if chosen else versions[-COMPARE_DEFAULT:]
    rows = [_lineage_row(version) for version in versions]
    metric_names = selectors.metric_names(compared)
    context = {
        "model": model,
        "rows": list(reversed(rows)),  # newest first
        "compared": compared,
        "chosen": chosen,
        "metrics": [(metric, [v.metrics.get(metric) for v in compared]) for metric in metric_names],
        "suggested_aliases": SUGGESTED_ALIASES,
        "register": _register_form(request, model, form),
        "register_errors": errors or {},
    }
    return render(request, "models_registry/model_detail.html", context, status=status)


@login_required
def model_detail(request, name: str):
    return _model_page(request, _visible_model(request, name))


@login_required
def version_detail(request, name: str, number: int):
    version = _visible_version(request, name, number)
    versions = list(selectors.versions_of(model=version.model))
    files, file_count = artifacts.files_of(version)
    context = {
        **_lineage_row(version),
        "model": version.model,
        "metrics": selectors.metric_series(version, versions),
        "version_count": len(versions),
        "files": files,
        "file_count": file_count,
        "deployments": selectors.version_deployments(version),
        "job_finished_at": parse_datetime((version.lineage or {}).get("finished_at") or ""),
        "suggested_aliases": SUGGESTED_ALIASES,
    }
    return render(request, "models_registry/version_detail.html", context)


def _back(request, name: str, number: int):
    """Where an alias or tag form came from: the version's page (``back=version``) or the model's."""
    if request.POST.get("back") == "version":
        return redirect("model-version", name=name, number=number)
    return redirect("model-detail", name=name)


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
    return _back(request, name, number)


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
    return _back(request, name, number)


@login_required
@require_POST
def version_register(request, name: str):
    """Register a succeeded job's output; on a problem the model page again, with what was typed and the
    problems beside their fields (400)."""
    model = _visible_model(request, name)
    form = {key: request.POST.get(key, "").strip() for key in ("source_job", "artifact_path", "framework")}
    form["framework"] = form["framework"] or "sklearn"
    if not form["source_job"].isdigit():
        errors = {"source_job": [_("Give the id of a succeeded job of the department, e.g. 42.")]}
        return _model_page(request, model, form=form, errors=errors, status=400)
    try:
        version = services.version_register(
            user=request.user,
            model=model,
            source_job=int(form["source_job"]),
            artifact_path=form["artifact_path"],
            framework=form["framework"],
        )
    except InvalidInput as exc:
        return _model_page(request, model, form=form, errors=exc.errors, status=400)
    messages.success(request, _("Version %(number)s registered.") % {"number": version.version})
    return redirect("model-version", name=name, number=version.version)
