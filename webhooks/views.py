"""The "Webhooks" pages of the department admin console: list, add (the secret shown once), edit, rotate the
secret, delete, send a ping, and each webhook's delivery log with redeliver.

Like the rest of the console: a department the user is not in answers 404, one they are only a member of
403. Views stay thin: look up, check, call one service or selector, render.
"""

from __future__ import annotations

import json

from django import forms
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.paginator import Paginator
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy
from django.views.decorators.http import require_POST

from accounts.access import managed_department
from core.api import visible_or_404
from core.errors import Conflict, InvalidInput
from core.forms import form_page, show_errors
from webhooks import selectors, services, signing

DELIVERY_PAGE_SIZE = 25
EVENT_LABELS = {
    "job.succeeded": gettext_lazy("A job succeeded"),
    "job.failed": gettext_lazy("A job failed"),
    "job.cancelled": gettext_lazy("A job was cancelled"),
    "model.version_registered": gettext_lazy("A model version was registered"),
    "model.alias_moved": gettext_lazy("A model alias was set, moved or removed"),
    "deployment.rolled_back": gettext_lazy("A deployment was rolled back"),
}


class WebhookForm(forms.Form):
    name = forms.CharField(label=gettext_lazy("Name"), max_length=100)
    url = forms.CharField(
        label=gettext_lazy("URL"),
        max_length=2000,
        help_text=gettext_lazy("An http(s) address that accepts signed POST requests."),
    )
    # Not required here: the service says what is missing together with the other fields' problems.
    events = forms.MultipleChoiceField(
        label=gettext_lazy("Events"),
        widget=forms.CheckboxSelectMultiple,
        required=False,
        choices=[(event, EVENT_LABELS[event]) for event in services.EVENTS],
    )
    active = forms.BooleanField(
        label=gettext_lazy("Active"),
        required=False,
        initial=True,
        help_text=gettext_lazy("Inactive webhooks receive no events (a ping still goes out)."),
    )


def _webhook(request, slug: str, webhook_id: int):
    department = managed_department(request, slug)
    webhook = visible_or_404(
        selectors.webhooks_for(user=request.user).filter(pk=webhook_id, department=department).first(),
        _("%(department)s has no webhook with that id.") % {"department": department.slug},
    )
    return department, webhook


def _secret_page(request, department, webhook, *, created: bool):
    return render(
        request,
        "webhooks/secret.html",
        {
            "department": department,
            "section": "webhooks",
            "webhook": webhook,
            "created": created,
            "window": signing.REPLAY_WINDOW_SECONDS // 60,
        },
    )


@login_required
def webhook_list(request, slug):
    department = managed_department(request, slug)
    form = WebhookForm(request.POST or None)
    if request.method == "POST" and form.is_valid():
        try:
            webhook = services.webhook_create(actor=request.user, department=department, **form.cleaned_data)
        except InvalidInput as exc:
            show_errors(form, exc)
        else:
            return _secret_page(request, department, webhook, created=True)
    rows = [
        (webhook, webhook.deliveries.first())
        for webhook in selectors.webhooks_for(user=request.user).filter(department=department)
    ]
    return render(
        request,
        "webhooks/list.html",
        {
            "department": department,
            "section": "webhooks",
            "form": form,
            "rows": rows,
            "labels": EVENT_LABELS,
        },
        status=400 if request.method == "POST" else 200,
    )


@login_required
def webhook_edit(request, slug, webhook_id):
    department, webhook = _webhook(request, slug, webhook_id)
    return form_page(
        request,
        WebhookForm(
            request.POST or None,
            initial={"name": webhook.name, "url": webhook.url, "events": webhook.events, "active": webhook.active},
        ),
        save=lambda values: services.webhook_update(actor=request.user, webhook=webhook, values=values),
        saved=_("Webhook %(name)s saved.") % {"name": webhook.name},
        done=reverse("console:webhooks", kwargs={"slug": department.slug}),
        template="webhooks/edit.html",
        context={"department": department, "section": "webhooks", "webhook": webhook},
    )


@login_required
def webhook_delete(request, slug, webhook_id):
    department, webhook = _webhook(request, slug, webhook_id)
    if request.method == "POST":
        services.webhook_delete(actor=request.user, webhook=webhook)
        messages.success(request, _("Webhook %(name)s deleted.") % {"name": webhook.name})
        return redirect("console:webhooks", slug=department.slug)
    return render(
        request, "webhooks/delete.html", {"department": department, "section": "webhooks", "webhook": webhook}
    )


@login_required
@require_POST
def webhook_rotate_secret(request, slug, webhook_id):
    department, webhook = _webhook(request, slug, webhook_id)
    webhook = services.webhook_rotate_secret(actor=request.user, webhook=webhook)
    return _secret_page(request, department, webhook, created=False)


@login_required
@require_POST
def webhook_ping(request, slug, webhook_id):
    department, webhook = _webhook(request, slug, webhook_id)
    services.webhook_ping(actor=request.user, webhook=webhook)
    messages.success(
        request, _("Ping queued for %(name)s; its delivery is at the top of the log.") % {"name": webhook.name}
    )
    return redirect("console:webhook-deliveries", slug=department.slug, webhook_id=webhook.pk)


@login_required
def webhook_deliveries(request, slug, webhook_id):
    department, webhook = _webhook(request, slug, webhook_id)
    page = Paginator(selectors.deliveries_of(webhook=webhook), DELIVERY_PAGE_SIZE).get_page(request.GET.get("page"))
    return render(
        request,
        "webhooks/deliveries.html",
        {
            "department": department,
            "section": "webhooks",
            "webhook": webhook,
            "page": page,
            "rows": [(delivery, json.dumps(delivery.payload, indent=1, sort_keys=True)) for delivery in page],
        },
    )


@login_required
@require_POST
def delivery_redeliver(request, slug, webhook_id, delivery_id):
    department, webhook = _webhook(request, slug, webhook_id)
    delivery = visible_or_404(
        selectors.delivery_get(webhook=webhook, delivery_id=delivery_id),
        _("This webhook has no delivery with that id."),
    )
    try:
        services.delivery_redeliver(actor=request.user, delivery=delivery)
    except Conflict as exc:
        messages.error(request, str(exc))
    else:
        messages.success(request, _("Event %(event)s queued again as a new delivery.") % {"event": delivery.event})
    return redirect("console:webhook-deliveries", slug=department.slug, webhook_id=webhook.pk)
