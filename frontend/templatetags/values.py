"""Values as people read them: durations and GPU-hours rounded with units, metrics to sensible precision,
statuses and reasons as words, times in the reader's time zone.

Every page shows numbers through these filters, never raw: ``{% load values %}`` then
``{{ seconds|duration }}``, ``{{ job.gpu_seconds|gpu_hours }}``, ``{{ value|metric }}``, ``{{ job.status|status_word }}``,
``{{ some_datetime|when }}``. The API keeps the raw values; these are for pages only.
"""

from __future__ import annotations

import math
from datetime import datetime, timedelta

from django import template
from django.utils import formats, timezone
from django.utils.html import format_html
from django.utils.translation import gettext as _
from django.utils.translation import ngettext, pgettext

register = template.Library()

_STATUS_WORDS = {
    # Job statuses
    "queued": lambda: pgettext("status", "queued"),
    "admitted": lambda: pgettext("status", "admitted"),
    "starting": lambda: pgettext("status", "starting"),
    "running": lambda: pgettext("status", "running"),
    "succeeded": lambda: pgettext("status", "succeeded"),
    "failed": lambda: pgettext("status", "failed"),
    "cancelled": lambda: pgettext("status", "cancelled"),
    "preempted": lambda: pgettext("status", "preempted"),
    # Builds, model copies, deployments, rollouts, servers, boards
    "pending": lambda: pgettext("status", "pending"),
    "building": lambda: pgettext("status", "building"),
    "copying": lambda: pgettext("status", "copying"),
    "ready": lambda: pgettext("status", "ready"),
    "serving": lambda: pgettext("status", "serving"),
    "stopped": lambda: pgettext("status", "stopped"),
    "stopping": lambda: pgettext("status", "stopping"),
    "in_progress": lambda: pgettext("status", "in progress"),
    "paused": lambda: pgettext("status", "paused"),
    "completed": lambda: pgettext("status", "completed"),
    "rolled_back": lambda: pgettext("status", "rolled back"),
    "rolling_back": lambda: pgettext("status", "rolling back"),
    "promoted": lambda: pgettext("status", "promoted"),
    "active": lambda: pgettext("status", "active"),
    "inactive": lambda: pgettext("status", "inactive"),
    "healthy": lambda: pgettext("status", "healthy"),
    "unhealthy": lambda: pgettext("status", "unhealthy"),
    "reachable": lambda: pgettext("status", "reachable"),
    "unreachable": lambda: pgettext("status", "unreachable"),
    "unknown": lambda: pgettext("status", "unknown"),
    "delivered": lambda: pgettext("status", "delivered"),
    "retrying": lambda: pgettext("status", "retrying"),
    "error": lambda: pgettext("status", "error"),
}

_REASON_LABELS = {
    "quota_exhausted": lambda: _("Quota used up"),
    "borrowing_limit": lambda: _("Borrowing limit reached"),
    "no_capacity": lambda: _("Not enough free GPUs"),
    "gang_does_not_fit": lambda: _("The workers do not fit on the free GPUs"),
    "lower_in_queue": lambda: _("Behind other jobs in the queue"),
    "preemption_in_progress": lambda: _("Waiting for preempted jobs to stop"),
    "gpu_type_unavailable": lambda: _("GPU type not available"),
    "cluster_unreachable": lambda: _("Cluster cannot be reached"),
}


def _seconds(value) -> float | None:
    if value is None or value == "":
        return None
    if isinstance(value, timedelta):
        return value.total_seconds()
    try:
        seconds = float(value)
    except (TypeError, ValueError):
        return None
    return seconds if math.isfinite(seconds) else None


@register.filter
def duration(value) -> str:
    """Seconds (or a timedelta) as "42 s", "3 min 05 s", "2 h 05 min", "3 d 4 h": two units at most, rounded down."""
    seconds = _seconds(value)
    if seconds is None:
        return "—"
    whole = int(max(0.0, seconds))
    days, rest = divmod(whole, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    if days:
        return _("%(days)d d %(hours)d h") % {"days": days, "hours": hours}
    if hours:
        return _("%(hours)d h %(minutes)02d min") % {"hours": hours, "minutes": minutes}
    if minutes:
        return _("%(minutes)d min %(seconds)02d s") % {"minutes": minutes, "seconds": secs}
    return _("%(seconds)d s") % {"seconds": secs}


@register.filter
def elapsed(start, end=None) -> str:
    """The duration from ``start`` to ``end`` (now when None): ``{{ job.started_at|elapsed:job.finished_at }}``."""
    if start is None:
        return "—"
    return duration(((end or timezone.now()) - start).total_seconds())


def _rounded(number: float) -> str:
    """A positive amount to a precision people read: 3 significant digits below 100, whole numbers above."""
    if number == 0:
        return formats.number_format(0)
    magnitude = abs(number)
    if magnitude >= 100:
        return formats.number_format(round(number), 0, use_l10n=True, force_grouping=True)
    if magnitude < 0.01:
        return formats.number_format(number, 3, use_l10n=True)
    decimals = max(0, 2 - math.floor(math.log10(magnitude)))
    rounded = round(number, decimals)
    while decimals and round(rounded, decimals - 1) == rounded:  # no trailing zeros: 1, 0.5, 2.05
        decimals -= 1
    return formats.number_format(rounded, decimals, use_l10n=True)


@register.filter
def hours_number(value) -> str:
    """An amount of GPU-hours as a number only (tables whose header carries the unit)."""
    try:
        number = float(value)
    except (TypeError, ValueError):
        return "—"
    return _rounded(number) if math.isfinite(number) else "—"


@register.filter
def gpu_hours(value, unit: str = "seconds") -> str:
    """GPU-seconds (or GPU-hours with ``:"hours"``) as "0.2 GPU-hours", "1,234 GPU-hours", "12 GPU-minutes"."""
    try:
        number = float(value)
    except (TypeError, ValueError):
        return "—"
    if not math.isfinite(number):
        return "—"
    hours = number if unit == "hours" else number / 3600
    if 0 < hours < 0.1:
        minutes = hours * 60
        # "1 GPU-minute", but "0.192 GPU-minutes": only exactly one is singular (English; Chinese has one form).
        return ngettext("%(amount)s GPU-minute", "%(amount)s GPU-minutes", 1 if minutes == 1 else 2) % {
            "amount": _rounded(minutes)
        }
    return ngettext("%(amount)s GPU-hour", "%(amount)s GPU-hours", 1 if hours == 1 else 2) % {"amount": _rounded(hours)}


@register.filter
def metric(value) -> str:
    """A metric to 4 significant digits (0.97333336 → 0.9733; 1234.5678 → 1,235; 1e-05 stays 1e-05)."""
    try:
        number = float(value)
    except (TypeError, ValueError):
        return "—" if value in (None, "") else str(value)
    if not math.isfinite(number):
        return str(number)
    if number == 0:
        return "0"
    magnitude = abs(number)
    if magnitude < 1e-3 or magnitude >= 1e9:
        return f"{number:.3g}"
    if magnitude >= 1000:
        return formats.number_format(round(number), 0, use_l10n=True, force_grouping=True)
    decimals = max(0, 3 - math.floor(math.log10(magnitude)))
    text = f"{number:.{decimals}f}"
    if "." in text:
        text = text.rstrip("0").rstrip(".")
    return text


@register.filter
def status_word(value) -> str:
    """A status code as a translated word: "rolled_back" → "rolled back" (回滚); unknown codes with spaces."""
    if value is None:
        return ""
    word = _STATUS_WORDS.get(str(value))
    return word() if word else str(value).replace("_", " ")


@register.filter
def reason_label(value) -> str:
    """A pending reason as its label, without its code: "quota_exhausted" → "Quota used up"."""
    if not value:
        return ""
    label = _REASON_LABELS.get(str(value))
    return label() if label else str(value).replace("_", " ").capitalize()


@register.filter
def reason(value):
    """A pending reason as its label with its code in a tooltip: ``<span title="quota_exhausted">Quota used up</span>``."""
    if not value:
        return ""
    return format_html('<span class="reason" title="{}">{}</span>', value, reason_label(value))


@register.filter
def when(value) -> str:
    """A time in the reader's time zone and locale ("4 Dec 2026, 14:15"); the exact ISO time is in ``<time>``."""
    if not isinstance(value, datetime):
        return "—" if value in (None, "") else str(value)
    local = timezone.localtime(value) if timezone.is_aware(value) else value
    return formats.date_format(local, "DATETIME_FORMAT", use_l10n=True)


@register.filter
def when_html(value):
    """``when`` inside ``<time datetime="...">`` so scripts and tooltips keep the exact moment."""
    if not isinstance(value, datetime):
        return when(value)
    return format_html('<time datetime="{}" title="{}">{}</time>', value.isoformat(), value.isoformat(), when(value))


@register.filter
def best_index(values, goal: str = "max") -> int | None:
    """The index of the best value in a list of numbers (``"min"`` for losses): for marking the best one."""
    numbers = []
    for index, value in enumerate(values or ()):
        try:
            number = float(value)
        except (TypeError, ValueError):
            continue
        if math.isfinite(number):
            numbers.append((number, index))
    if not numbers:
        return None
    return (min(numbers) if goal == "min" else max(numbers))[1]


def lower_is_better(metric_name: str) -> bool:
    """Loss, error, perplexity, latency and the like are better low; everything else (accuracy, F1, ...) high."""
    name = metric_name.lower()
    return any(word in name for word in ("loss", "error", "err", "perplexity", "latency", "mse", "mae", "rmse", "wer"))


@register.filter
def best_index_for(values, metric_name) -> int | None:
    """The index of the best value of the metric ``metric_name`` (lowest for losses, highest otherwise):
    ``{% with best=values|best_index_for:name %}``."""
    return best_index(values, "min" if lower_is_better(str(metric_name)) else "max")
