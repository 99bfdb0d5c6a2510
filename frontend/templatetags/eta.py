"""How pages show a waiting job's estimated start: never as a time already past, and as a range ("likely 14:20, at
the latest 16:00") when the likely start is earlier than the latest."""

from datetime import timedelta

from django import template
from django.utils import timezone

register = template.Library()

TOLERANCE = timedelta(minutes=1)  # jobs.admission.ETA_TOLERANCE_SECONDS: closer than that is one time


@register.filter
def any_moment(estimated_start) -> bool:
    """True when the estimate is due within a minute or already past: "in 0 minutes" or a past time would mislead."""
    return estimated_start is not None and estimated_start <= timezone.now() + TOLERANCE


@register.filter
def start_range(job) -> bool:
    """True when the job's likely start and its start at the latest are both known and more than a minute apart,
    the latest one not yet due: then both are shown. Otherwise one time is (the likely one where known)."""
    likely, latest = getattr(job, "estimated_start", None), getattr(job, "latest_start", None)
    if likely is None or latest is None or any_moment(latest):
        return False
    return latest - likely > TOLERANCE
