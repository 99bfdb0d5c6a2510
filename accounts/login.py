"""Signing in with a password: lock-outs after repeated failures (django-axes), their page and JSON answer,
lifting them, and the audit entries of sign-ins, failures, lock-outs and sign-outs.

django-axes counts failures per account and per address (PORTAL_LOGIN_LOCKOUT_BY) on every path that calls
``django.contrib.auth.authenticate``: the login page, the Django admin's and ``POST /api/v1/auth/token/``. Its
backend comes first in AUTHENTICATION_BACKENDS and refuses a locked account or address before the password is
looked at, so the right password fails too until the lock-out ends or an admin lifts it. The address is
``REMOTE_ADDR`` (the ASGI layer makes it the real client behind trusted proxies), never a forwarded header.
"""

from __future__ import annotations

from datetime import datetime

from axes.handlers.proxy import AxesProxyHandler
from axes.helpers import get_cool_off, get_lockout_parameters
from axes.models import AccessAttempt
from axes.signals import user_locked_out
from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.auth.backends import ModelBackend
from django.contrib.auth.forms import AuthenticationForm
from django.contrib.auth.signals import user_logged_out, user_login_failed
from django.core.exceptions import PermissionDenied
from django.dispatch import receiver
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import render
from django.utils import timezone
from django.utils.translation import gettext as _

from accounts import permissions
from accounts.services import audit_record

TARGET_MAX = 200  # AuditEvent.target


def client_address(request) -> str | None:
    """AXES_CLIENT_IP_CALLABLE: the address failures are counted by."""
    return request.META.get("REMOTE_ADDR") or None


def _clean(text) -> str:
    """A submitted username as an audit target: NUL (refused by PostgreSQL) made visible, length bounded."""
    return str(text or "").replace("\0", "\\x00")[:TARGET_MAX]


def _user_named(username) -> object | None:
    if not username:
        return None
    return get_user_model().objects.filter(username=_clean(username)).first()


def _via(request) -> str:
    return request.path if isinstance(request, HttpRequest) else ""


class PasswordBackend(ModelBackend):
    """Django's ModelBackend; a right password also writes the "login.succeeded" audit entry."""

    def authenticate(self, request, username=None, password=None, **kwargs):
        user = super().authenticate(request, username=username, password=password, **kwargs)
        if user is not None and request is not None:
            audit_record(
                actor=user,
                action="login.succeeded",
                target=user.get_username(),
                data={"address": client_address(request), "path": _via(request)},
            )
        return user


def _refused_while_locked(request) -> bool:
    """axes refused this try because of an earlier lock-out (it counts nothing then)."""
    return bool(getattr(request, "axes_locked_out", False)) and getattr(request, "axes_failures_since_start", 0) is None


@receiver(user_login_failed, dispatch_uid="accounts.login.failed")
def _audit_failure(sender, credentials, request=None, **kwargs):
    if request is None or _refused_while_locked(request):
        return  # a locked account's tries are not entries each: the lock-out is one
    username = credentials.get("username")
    audit_record(
        actor=None,
        action="login.failed",
        target=_clean(username),
        data={
            "address": client_address(request),
            "path": _via(request),
            "known_user": _user_named(username) is not None,
        },
    )


@receiver(user_locked_out, dispatch_uid="accounts.login.locked_out")
def _audit_lockout(sender, request, username, ip_address, **kwargs):
    if _refused_while_locked(request):
        return
    until = lockout_end(username=username, address=ip_address)
    audit_record(
        actor=None,
        action="login.locked_out",
        target=_clean(username),
        data={
            "address": ip_address,
            "path": _via(request),
            "failures": getattr(request, "axes_failures_since_start", None),
            "until": until.isoformat() if until else None,
        },
    )


@receiver(user_logged_out, dispatch_uid="accounts.login.logged_out")
def _audit_logout(sender, request, user, **kwargs):
    if user is None:
        return
    audit_record(
        actor=user, action="login.logout", target=user.get_username(), data={"address": client_address(request)}
    )


# --- Lock-outs: until when, the answer, lifting -----------------------------------------------------------


def _end_of(attempts, *, now: datetime) -> tuple[bool, datetime | None]:
    """(locked, until) for one lock-out parameter's attempts. Rows drop out of the count cool-off after their
    last failure, oldest first: the lock ends when the row that brings the newest ones to the limit drops out."""
    cool_off = get_cool_off()
    if cool_off is not None:
        attempts = attempts.filter(attempt_time__gte=now - cool_off)
    total = 0
    for failures, at in attempts.order_by("-attempt_time").values_list("failures_since_start", "attempt_time"):
        total += failures
        if total >= settings.AXES_FAILURE_LIMIT:
            return True, (at + cool_off) if cool_off is not None else None
    return False, None


def lockout_state(
    *, username: str | None, address: str | None, now: datetime | None = None
) -> tuple[bool, datetime | None]:
    """Whether sign-ins as ``username`` from ``address`` are locked out, and until when (None: until an admin
    lifts it)."""
    now = now or timezone.now()
    values = {"username": username, "ip_address": address}
    locked, latest = False, None
    for parameter in get_lockout_parameters(HttpRequest()):
        fields = [parameter] if isinstance(parameter, str) else list(parameter)
        if any(values[field] is None for field in fields):
            continue
        this_locked, until = _end_of(AccessAttempt.objects.filter(**{f: values[f] for f in fields}), now=now)
        if not this_locked:
            continue
        if not locked or until is None or (latest is not None and until > latest):
            latest = until
        locked = True
    return locked, latest


def lockout_end(*, username: str | None, address: str | None) -> datetime | None:
    return lockout_state(username=username, address=address)[1]


def lockout_message(until: datetime | None, *, now: datetime | None = None) -> str:
    now = now or timezone.now()
    lead = _("Too many failed sign-ins for this account or from your address, so signing in is locked for now.")
    if until is None:
        return (
            lead
            + " "
            + _("The lock-out lasts until an admin lifts it: ask a platform admin (or your department admin).")
        )
    minutes = max(1, -(-int((until - now).total_seconds()) // 60))
    return (
        lead
        + " "
        + _(
            "Try again after %(time)s UTC (in %(minutes)d minutes), or ask a platform admin (or your department "
            "admin) to lift the lock-out sooner."
        )
        % {"time": until.strftime("%Y-%m-%d %H:%M"), "minutes": minutes}
    )


def lockout_response(request, original_response=None, credentials=None) -> HttpResponse:
    """AXES_LOCKOUT_CALLABLE: the API's JSON 429, or the login page saying when to try again. (axes' async
    middleware passes the credentials second: they are read from the request instead.)"""
    credentials = getattr(request, "axes_credentials", None) or {}
    username = credentials.get("username")
    now = timezone.now()
    locked, until = lockout_state(username=username, address=client_address(request), now=now)
    message = lockout_message(until, now=now)
    headers = {"Retry-After": str(max(1, int((until - now).total_seconds())))} if until else {}
    if request.path.startswith("/api/"):
        body = {"detail": message, "locked_until": until.isoformat() if until else None}
        return JsonResponse(body, status=429, headers=headers)
    form = AuthenticationForm(request, initial={"username": _clean(username)})
    context = {"form": form, "lockout": message, "next": request.POST.get("next", "")}
    response = render(request, "registration/login.html", context, status=429)
    for name, value in headers.items():
        response[name] = value
    return response


def lockouts_of(*, usernames: list[str]) -> dict[str, datetime | None]:
    """Of these usernames, those locked out (from any address), each with the end of its lock-out."""
    found: dict[str, datetime | None] = {}
    candidates = AccessAttempt.objects.filter(username__in=usernames).values_list("username", flat=True).distinct()
    for username in candidates:
        locked, until = lockout_state(username=username, address=None)
        if locked:
            found[username] = until
    return found


def lockout_lift(*, actor, username: str) -> int:
    """Forget the failed sign-ins of ``username`` (which also lowers its addresses' counts); the number of
    attempt records dropped. Audited."""
    target = _user_named(username)
    if not permissions.can_lift_lockout(actor, target):
        raise PermissionDenied(
            _("Only a platform admin, or an admin of %(user)s's department, can lift it.") % {"user": username}
        )
    dropped = AxesProxyHandler.reset_attempts(username=username)
    audit_record(actor=actor, action="login.lockout_lifted", target=_clean(username), data={"attempts": dropped})
    return dropped
