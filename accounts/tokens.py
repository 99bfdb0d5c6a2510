"""Personal API tokens: issue (the key is returned once), revoke, and authenticate a key.

Owns the ApiToken rows. Keys come from `secrets.token_urlsafe`; only their SHA-256 hash is stored, so
a copy of the database lets nobody call the API. The hash is what we look up and compare: a key is
high-entropy, so a plain digest (no salt, no slow hasher) is enough and keeps each request cheap.
"""

from __future__ import annotations

import hashlib
import secrets
from datetime import datetime, timedelta

from django.conf import settings
from django.db.models import Q, QuerySet
from django.utils import timezone
from django.utils.translation import gettext as _

from accounts.models import ApiToken
from accounts.services import audit_record
from accounts.signals import token_revoked
from core.errors import InvalidInput

NAME_MAX_LENGTH = ApiToken._meta.get_field("name").max_length
# Writing last_used_at on every request would turn each API read into a write.
LAST_USED_RESOLUTION = timedelta(minutes=1)


def key_hash(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


def active_tokens(*, user) -> QuerySet[ApiToken]:
    """The user's tokens that still work, newest first."""
    now = timezone.now()
    return ApiToken.objects.filter(user=user, revoked_at__isnull=True).filter(
        Q(expires_at__isnull=True) | Q(expires_at__gt=now)
    )


def max_days() -> int | None:
    """The longest lifetime a new token may have (PORTAL_TOKEN_MAX_DAYS), None when unbounded."""
    return settings.PORTAL_TOKEN_MAX_DAYS or None


def _expiry(expires_in_days, expires_at: datetime | None, *, now: datetime) -> tuple[datetime | None, list[str]]:
    """When a new token expires: in ``expires_in_days`` days, at ``expires_at``, never (neither given and no
    bound), or after the longest allowed lifetime (neither given under a bound); with the problems found."""
    longest = max_days()
    limit = _(" (the longest this portal allows is %(max)d days)") % {"max": longest} if longest else ""
    if expires_in_days not in (None, "") and expires_at is not None:
        return None, [_("Give either expires_in_days or expires_at, not both.")]
    if expires_in_days not in (None, ""):
        try:
            days = int(str(expires_in_days).strip())
        except ValueError:
            return None, [_("Give the lifetime as a whole number of days, e.g. 90%(limit)s.") % {"limit": limit}]
        if days < 1:
            return None, [_("A token must live at least 1 day; leave it empty for the longest allowed lifetime.")]
        if longest and days > longest:
            return None, [_("%(days)d days is too long%(limit)s.") % {"days": days, "limit": limit}]
        return now + timedelta(days=days), []
    if expires_at is not None:
        if expires_at <= now:
            return None, [_("This time has passed: give an expiry in the future (times are UTC).")]
        if longest and expires_at > now + timedelta(days=longest):
            return None, [_("This is too far ahead%(limit)s.") % {"limit": limit}]
        return expires_at, []
    return (now + timedelta(days=longest) if longest else None), []


def token_create(
    *, user, name: str, expires_in_days: int | str | None = None, expires_at: datetime | None = None
) -> tuple[ApiToken, str]:
    """A new token for the user and its key. The key is not stored: show it now or never.

    Its expiry: ``expires_in_days`` from now or ``expires_at`` (at most PORTAL_TOKEN_MAX_DAYS ahead when that
    is set); neither gives the longest allowed lifetime, which without a bound is "never"."""
    name = (name or "").strip()
    errors: dict[str, list[str]] = {}
    if not name:
        errors["name"] = [_("Give the token a name, e.g. the script or machine that will use it.")]
    elif len(name) > NAME_MAX_LENGTH:
        errors["name"] = [
            _("Use at most %(max)d characters (this name has %(length)d).")
            % {"max": NAME_MAX_LENGTH, "length": len(name)}
        ]
    now = timezone.now()
    expiry, problems = _expiry(expires_in_days, expires_at, now=now)
    if problems:
        errors["expires_at" if expires_at is not None and expires_in_days in (None, "") else "expires_in_days"] = (
            problems
        )
    if errors:
        raise InvalidInput(errors)
    key = secrets.token_urlsafe(32)
    token = ApiToken.objects.create(
        user=user, name=name, prefix=key[:8], key_hash=key_hash(key), created_at=now, expires_at=expiry
    )
    audit_record(
        actor=user,
        action="token.create",
        target=f"{name} ({token.prefix}…)",
        data={"token": token.pk, "expires_at": expiry.isoformat() if expiry else None},
    )
    return token, key


def token_revoke(*, user, token_id: int) -> ApiToken | None:
    """Revoke one of the user's working tokens; None when the user has no such token."""
    token = active_tokens(user=user).filter(pk=token_id).first()
    if token is None:
        return None
    token.revoked_at = timezone.now()
    token.save(update_fields=["revoked_at"])
    audit_record(actor=user, action="token.revoke", target=f"{token.name} ({token.prefix}…)", data={"token": token.pk})
    token_revoked.send(sender=ApiToken, token=token)
    return token


def token_refusal(key: str, *, now: datetime | None = None) -> str:
    """Why a key that token_authenticate refused does not work, as a sentence for the 401."""
    now = now or timezone.now()
    refused = _("Invalid, revoked or expired token.")
    token = ApiToken.objects.filter(key_hash=key_hash(key)).select_related("user").first()
    if token is None or token.revoked_at is not None or not token.user.is_active or token.expires_at is None:
        return refused
    if token.expires_at > now:
        return refused
    return (
        refused
        + " "
        + _(
            "This one expired at %(time)s UTC: create a new token on the API tokens page (/tokens/) or with "
            "`portalctl login`."
        )
        % {"time": token.expires_at.strftime("%Y-%m-%d %H:%M")}
    )


def token_authenticate(key: str, *, now: datetime | None = None) -> ApiToken | None:
    """The working token (with its active user) that the key belongs to, or None."""
    now = now or timezone.now()
    token = (
        ApiToken.objects.select_related("user")
        .filter(key_hash=key_hash(key), revoked_at__isnull=True, user__is_active=True)
        .filter(Q(expires_at__isnull=True) | Q(expires_at__gt=now))
        .first()
    )
    if token is None:
        return None
    if token.last_used_at is None or token.last_used_at <= now - LAST_USED_RESOLUTION:
        # Conditional update: of several concurrent requests only one writes.
        ApiToken.objects.filter(pk=token.pk).filter(
            Q(last_used_at__isnull=True) | Q(last_used_at__lte=now - LAST_USED_RESOLUTION)
        ).update(last_used_at=now)
        token.last_used_at = now
    return token
