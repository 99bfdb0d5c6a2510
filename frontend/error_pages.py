"""The portal's own error pages for browsers: 400, 403 (CSRF failures too), 404 and 500.

config/errors.py answers JSON under /api/ and /serve/ and calls these for every other path. Each page says what
happened in a sentence and what to do next, with links; 403 and 404 have the portal's navigation (base.html).
The 400 and 500 pages are rendered without the request: no session, no user, no query, so that they render
even when the database is down or the request itself is what is wrong (a disallowed host). Should a styled page
still fail, the bare page of config.edge answers instead: an error page never becomes a second error.

What a page says follows the section of the address (a job, a model, the console ...), not the exception's
text: Django's own messages ("No Membership matches the given query.") are for developers. A message the portal
raised for people (PermissionDenied("Only platform admins can change quotas."), visible_or_404's "No job with
that id in your departments.") is shown as it is.
"""

from __future__ import annotations

import html
import logging
from dataclasses import dataclass

from django.db import DatabaseError
from django.http import HttpResponse
from django.template import loader
from django.urls import Resolver404, reverse
from django.utils.functional import Promise
from django.utils.http import urlencode
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy

logger = logging.getLogger(__name__)

# Django's own texts, written for developers: the page says the section's sentence instead.
_DEVELOPER_TEXTS = ("matches the given query.", "No %s found matching the query")


@dataclass(frozen=True)
class Section:
    """What a 404 under ``prefix`` means and where to go instead (``url_name``, ``link``)."""

    prefix: str
    missing: Promise
    url_name: str
    link: Promise


SECTIONS = (
    Section(
        "/jobs/",
        gettext_lazy("The job does not exist or belongs to a department you are not in."),
        "job-list",
        gettext_lazy("See your jobs"),
    ),
    Section(
        "/tensorboard/",
        gettext_lazy("This TensorBoard does not exist or shows a job of a department you are not in."),
        "job-list",
        gettext_lazy("Open TensorBoard from one of your jobs"),
    ),
    Section(
        "/tensorboards/",
        gettext_lazy("This TensorBoard does not exist or shows a job of a department you are not in."),
        "job-list",
        gettext_lazy("Compare your jobs from the job list"),
    ),
    Section(
        "/models/",
        gettext_lazy("The model or version does not exist or belongs to a department you are not in."),
        "model-list",
        gettext_lazy("See your models"),
    ),
    Section(
        "/deployments/",
        gettext_lazy("The deployment does not exist or belongs to a department you are not in."),
        "deployment-list",
        gettext_lazy("See your deployments"),
    ),
    Section(
        "/images/",
        gettext_lazy("The image or build does not exist or belongs to a department you are not in."),
        "image-list",
        gettext_lazy("See the images"),
    ),
    Section(
        "/clusters/",
        gettext_lazy("There is no cluster with that name."),
        "cluster-list",
        gettext_lazy("See the clusters"),
    ),
    Section(
        "/console/",
        gettext_lazy("This page of the admin console does not exist, or is about a department you do not manage."),
        "console:index",
        gettext_lazy("Back to the admin console"),
    ),
    Section(
        "/tokens/",
        gettext_lazy("There is no such token among yours."),
        "tokens",
        gettext_lazy("See your API tokens"),
    ),
)
NOWHERE = gettext_lazy("There is no page at this address. Check the address, or start again from the dashboard.")


def section_of(path: str) -> Section | None:
    return next((section for section in SECTIONS if path.startswith(section.prefix)), None)


def message_for_people(exception) -> str:
    """The exception's message when the portal wrote it for people; "" for Django's own and for none."""
    if exception is None or isinstance(exception, Resolver404) or not exception.args:
        return ""
    message = exception.args[0]
    if not isinstance(message, str | Promise):
        return ""
    message = str(message)
    return "" if any(text in message for text in _DEVELOPER_TEXTS) else message


def _links(request, section: Section | None) -> list[tuple[str, str]]:
    """Where to go from here: the section's page, signing in for a visitor, the dashboard."""
    links = []
    if section is not None:
        links.append((reverse(section.url_name), str(section.link)))
    user = getattr(request, "user", None)
    if user is None or not user.is_authenticated:
        links.append((f"{reverse('login')}?{urlencode({'next': request.get_full_path()})}", _("Sign in")))
    links.append((reverse("home"), _("Go to the dashboard")))
    return links


def _render(request, status: int, context: dict, section: Section | None = None) -> HttpResponse:
    """The page with the portal's navigation; the query-free one if the database fails meanwhile."""
    try:
        context = {**context, "links": _links(request, section)}
        body = loader.render_to_string("frontend/errors/page.html", context, request)
    except DatabaseError:
        logger.warning("The %s page of %s is shown without navigation: the database failed", status, request.path)
        return _bare(status, context)
    return HttpResponse(body, status=status)


def _bare(status: int, context: dict) -> HttpResponse:
    """The page without the request (no session, no user, no query); a plain one should even that fail."""
    body: str
    try:
        body = loader.render_to_string("frontend/errors/bare.html", context)
    except Exception:  # an error page must never become a second error: the plainest answer there is
        logger.exception("The %s page could not be rendered", status)
        title, lead = html.escape(str(context["title"])), html.escape(str(context["lead"]))
        body = (
            f'<!doctype html>\n<html><head><meta charset="utf-8"><title>{title}</title></head>'
            f"<body><h1>{title}</h1><p>{lead}</p></body></html>\n"
        )
    return HttpResponse(body, status=status)


def page_not_found(request, exception=None) -> HttpResponse:
    section = section_of(request.path)
    lead = message_for_people(exception) or str(section.missing if section else NOWHERE)
    hint = str(section.missing) if section and lead != str(section.missing) else ""
    context = {
        "status": 404,
        "title": _("Page not found"),
        "lead": lead,
        "hint": hint,
    }
    return _render(request, 404, context, section)


def permission_denied(request, exception=None) -> HttpResponse:
    context = {
        "status": 403,
        "title": _("You may not open this page"),
        "lead": message_for_people(exception) or _("Your account does not have the role this page needs."),
        "hint": _("If you need it, ask an admin of your department or a platform admin."),
    }
    return _render(request, 403, context)


def csrf_failure(request, reason: str = "") -> HttpResponse:
    """CSRF_FAILURE_VIEW: a form sent without its security token (an old tab, blocked cookies)."""
    context = {
        "status": 403,
        "title": _("The form could not be sent"),
        "lead": _(
            "The form arrived without a valid security token, usually because the page was open for a long time, "
            "you signed in or out in another tab, or the browser blocks cookies for the portal."
        ),
        "hint": _("Go back, reload the page and send the form again. Nothing was changed."),
    }
    return _render(request, 403, context)


def bad_request(request, exception=None) -> HttpResponse:
    """A request the portal could not accept (a disallowed host, a malformed body): rendered without it."""
    return _bare(
        400,
        {
            "status": 400,
            "title": _("The portal could not accept this request"),
            "lead": _("The request was not sent the way the portal accepts. Check the address you opened."),
            "hint": _("If you followed a link of the portal, go back and try again."),
        },
    )


def server_error(request) -> HttpResponse:
    """Rendered without the request: it must render with the database down."""
    return _bare(
        500,
        {
            "status": 500,
            "title": _("Something went wrong on the portal"),
            "lead": _("The portal failed on this request. The error is logged for its operators."),
            "hint": _("Try again in a moment. If it keeps failing, tell your platform admins what you were doing."),
        },
    )
