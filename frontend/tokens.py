"""The API tokens page: list my personal API tokens, create one (its key shown once), revoke one.

Included from frontend/urls.py as `tokens/`; the work is done by accounts.tokens.
"""

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.shortcuts import redirect, render
from django.urls import path
from django.utils.translation import gettext as _
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_http_methods, require_POST

from accounts import tokens
from core.api import visible_or_404
from core.errors import InvalidInput


# never_cache: the response that carries a new key must not be kept by the browser or a proxy.
@never_cache
@login_required
@require_http_methods(["GET", "POST"])
def tokens_page(request):
    created, key, errors, name = None, None, {}, ""
    longest = tokens.max_days()
    days = str(longest or "")
    if request.method == "POST":
        name, days = request.POST.get("name", ""), request.POST.get("expires_in_days", "").strip()
        try:
            created, key = tokens.token_create(user=request.user, name=name, expires_in_days=days or None)
            name, days = "", str(longest or "")
        except InvalidInput as error:
            errors = error.errors
    # Rendered, not redirected, after a create: the key lives only in this one response.
    return render(
        request,
        "frontend/tokens.html",
        {
            "tokens": tokens.active_tokens(user=request.user),
            "created": created,
            "key": key,
            "errors": errors,
            "name": name,
            "name_max_length": tokens.NAME_MAX_LENGTH,
            "expires_in_days": days,
            "max_days": longest,
        },
        status=400 if errors else 200,
    )


@login_required
@require_POST
def token_revoke(request, token_id):
    token = visible_or_404(tokens.token_revoke(user=request.user, token_id=token_id), _("No such token among yours."))
    messages.success(
        request,
        _("Revoked the token “%(name)s”. Requests with its key are refused from now on.") % {"name": token.name},
    )
    return redirect("tokens")


urlpatterns = [
    path("", tokens_page, name="tokens"),
    path("<int:token_id>/revoke/", token_revoke, name="token-revoke"),
]
