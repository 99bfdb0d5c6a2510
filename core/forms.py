"""Form helpers every app's HTML pages share (Django forms, no app's models)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django import forms
from django.contrib import messages
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render

from core.errors import InvalidInput


def show_errors(form: forms.Form, exc: InvalidInput) -> None:
    """Put a service's InvalidInput on the form: each problem on its field, or on the form when no field has the name."""
    for field, problems in exc.errors.items():
        form.add_error(field if field in form.fields else None, [str(problem) for problem in problems])


def form_page(
    request: HttpRequest,
    form: forms.Form,
    *,
    save: Callable[[dict[str, Any]], Any],
    saved: str | Callable[[Any], str],
    done: str,
    template: str,
    context: dict[str, Any],
) -> HttpResponse:
    """The page of a form that one service call saves: create or edit, on the console's pages and the like.

    A valid POST calls ``save(form.cleaned_data)``: its InvalidInput goes on the form (show_errors); otherwise
    ``saved`` (or ``saved(what save returned)``) is flashed as a success and the browser is sent to ``done`` (a
    URL, or a URL name without arguments). Otherwise ``template`` is rendered with ``context`` and the form:
    400 after a POST (invalid, or refused by the service), 200 for a GET.
    """
    if request.method == "POST" and form.is_valid():
        try:
            result = save(form.cleaned_data)
        except InvalidInput as exc:
            show_errors(form, exc)
        else:
            messages.success(request, saved if isinstance(saved, str) else saved(result))
            return redirect(done)
    return render(request, template, {**context, "form": form}, status=400 if request.method == "POST" else 200)
