"""DRF authentication with personal API tokens: `Authorization: Token <key>` (API.md "Conventions")."""

from rest_framework import authentication, exceptions

from accounts import tokens


class ApiTokenAuthentication(authentication.TokenAuthentication):
    """DRF's header parsing and `WWW-Authenticate: Token` (so anonymous calls get 401, not 403),
    with keys looked up by hash among the named ApiTokens instead of DRF's clear-text table."""

    keyword = "Token"

    def authenticate_credentials(self, key):
        token = tokens.token_authenticate(key)
        if token is None:
            raise exceptions.AuthenticationFailed(tokens.token_refusal(key))
        return token.user, token
