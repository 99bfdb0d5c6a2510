"""How pages show a waiting job's estimated start: never as a time already past."""

from datetime import timedelta

from django import template
from django.utils import timezone

register = template.Library()


@register.filter
def any_moment(estimated_start) -> bool:
    """True when the estimate is due within a minute or already past: "in 0 minutes" or a past time would mislead."""
    return estimated_start is not None and estimated_start <= timezone.now() + timedelta(minutes=1)
