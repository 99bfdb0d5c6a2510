"""Personal API tokens: issue (the key is returned once), revoke, and authenticate a key.

Owns the ApiToken rows. Keys come from `secrets.token_urlsafe`; only their SHA-256 hash is stored, so
a copy of the database lets nobody call the API. The hash is what we look up and compare: a key is
high-entropy, so a plain digest (no salt, no slow hasher) is enough and keeps each request cheap.
"""

from __future__ import annotations

import hashlib
import secrets
from datetime import datetime, timedelta

from django.db.models import Q, QuerySet
from django.utils import timezone
from django.utils.translation import gettext as _

from accounts.models import ApiToken
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


def token_create(*, user, name: str) -> tuple[ApiToken, str]:
    """A new token for the user and its key. The key is not stored: show it now or never."""
    name = (name or "").strip()
    if not name:
        raise InvalidInput({"name": [_("Give the token a name, e.g. the script or machine that will use it.")]})
    if len(name) > NAME_MAX_LENGTH:
        raise InvalidInput(
            {
                "name": [
                    _("Use at most %(max)d characters (this name has %(length)d).")
                    % {"max": NAME_MAX_LENGTH, "length": len(name)}
                ]
            }
        )
    key = secrets.token_urlsafe(32)
    token = ApiToken.objects.create(user=user, name=name, prefix=key[:8], key_hash=key_hash(key))
    return token, key


def token_revoke(*, user, token_id: int) -> ApiToken | None:
    """Revoke one of the user's working tokens; None when the user has no such token."""
    token = active_tokens(user=user).filter(pk=token_id).first()
    if token is None:
        return None
    token.revoked_at = timezone.now()
    token.save(update_fields=["revoked_at"])
    return token


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
