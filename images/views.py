"""Browser pages for the image catalogue and image builds. Thin: look up what the user may see, call a service,
render. The build page's status and log poll themselves with htmx while the build runs."""

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.shortcuts import redirect, render
from django.utils.cache import patch_vary_headers
from django.utils.translation import gettext as _
from django.views.decorators.http import require_POST

from clusters.errors import ExecutorError
from core.api import visible_or_404
from core.celery import TransientError
from core.errors import Conflict, InvalidInput
from images import selectors, services
from images import selectors as image_selectors
from images.forms import BuildForm
from images.models import ImageBuild

RECENT_BUILDS = 50


@login_required
def image_list(request):
    user = request.user
    form = BuildForm(request.POST or None, user=user)
    if request.method == "POST":
        try:
            build = services.build_submit(user=user, data=form.submission())
        except InvalidInput as exc:
            form.add_service_errors(exc.errors)
        else:
            messages.success(request, _("Build of image %(name)s submitted.") % {"name": build.name})
            return redirect("image-build-detail", build_id=build.pk)
    context = {
        "images": image_selectors.images_for(user=user),
        "builds": selectors.builds_for(user=user)[:RECENT_BUILDS],
        "form": form,
        "can_build": bool(form.fields["department"].choices),
    }
    return render(request, "images/image_list.html", context, status=400 if form.errors else 200)


@login_required
def build_detail(request, build_id: int):
    build = _visible_build(request, build_id)
    log, log_error = "", ""
    try:
        log = services.build_logs(build=build)
    except (ExecutorError, TransientError) as exc:
        log_error = str(exc)
    context = {"build": build, "log": log, "log_error": log_error, "active": build.status in ImageBuild.ACTIVE}
    live = request.headers.get("HX-Request") == "true"
    response = render(request, "images/partials/build_live.html" if live else "images/build_detail.html", context)
    patch_vary_headers(response, ["HX-Request"])
    return response


@login_required
@require_POST
def build_cancel(request, build_id: int):
    build = _visible_build(request, build_id)
    try:
        services.build_cancel(user=request.user, build=build)
    except (Conflict, PermissionDenied) as exc:
        messages.error(request, str(exc))
    else:
        messages.success(request, _("Build of image %(name)s cancelled.") % {"name": build.name})
    return redirect("image-build-detail", build_id=build.pk)


def _visible_build(request, build_id: int) -> ImageBuild:
    return visible_or_404(
        selectors.build_get(user=request.user, build_id=build_id), _("No image build with that id in your departments.")
    )
