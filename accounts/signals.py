"""Signals of accounts that higher apps connect to in their AppConfig.ready() (docs/architecture.md "The stack").

- ``token_revoked(sender=ApiToken, token=<ApiToken>)``: sent after the revocation of a personal API token is
  saved (the page, ``DELETE /api/v1/tokens/<id>/``), so that whatever still holds a connection opened with it
  (a websocket) can close it. Django's own ``user_logged_out`` is the one for sessions.
"""

from django.dispatch import Signal

token_revoked = Signal()
