"""Form helpers every app's HTML pages share (Django forms, no app's models)."""

from __future__ import annotations

from django import forms

from core.errors import InvalidInput


def show_errors(form: forms.Form, exc: InvalidInput) -> None:
    """Put a service's InvalidInput on the form: each problem on its field, or on the form when no field has the name."""
    for field, problems in exc.errors.items():
        form.add_error(field if field in form.fields else None, [str(problem) for problem in problems])
