"""Who the API serves: API-token authentication (``REST_FRAMEWORK``'s default, with sessions) and
the one question about raw worker ids.

Access rules (README "REST API" and "Security model"):
- anonymous requests (crowdworkers included) get 401 everywhere;
- a study the user may not see (``studies.selectors.studies_for_user``) answers 404, never 403;
- read-only API tokens may only use safe methods (403 otherwise);
- worker ids are keyed pseudonyms; raw platform ids only for holders of
  ``studies.view_raw_worker_ids`` who ask for them explicitly.
"""
from __future__ import annotations

from drf_spectacular.extensions import OpenApiAuthenticationExtension
from rest_framework import exceptions
from rest_framework.authentication import BaseAuthentication, get_authorization_header

from lab.api.filters import boolean_query_param
from studies.selectors import RAW_WORKER_IDS_PERMISSION, user_may_see_raw_worker_ids

from .tokens import api_token_get_valid

RAW_WORKER_IDS_PARAM = "include_raw_worker_ids"


class ApiTokenAuthentication(BaseAuthentication):
    """``Authorization: Token rl_...`` (or ``Bearer rl_...``) with an :class:`ApiToken`."""

    keywords = (b"token", b"bearer")

    def authenticate(self, request):
        auth = get_authorization_header(request).split()
        if not auth or auth[0].lower() not in self.keywords:
            return None
        if len(auth) != 2:
            raise exceptions.AuthenticationFailed("Invalid token header: expected 'Token <key>'.")
        try:
            key = auth[1].decode("ascii")
        except UnicodeError as exc:
            raise exceptions.AuthenticationFailed("Invalid token header: the key has non-ASCII characters.") from exc
        token = api_token_get_valid(key=key)
        if token is None:
            raise exceptions.AuthenticationFailed("Invalid, expired or revoked token, or one ended by a change of its user's password.")
        return token.user, token

    def authenticate_header(self, request):
        return 'Token realm="api"'


class ApiTokenScheme(OpenApiAuthenticationExtension):
    target_class = "studies.api.access.ApiTokenAuthentication"
    name = "apiTokenAuth"

    def get_security_definition(self, auto_schema):
        return {
            "type": "apiKey",
            "in": "header",
            "name": "Authorization",
            "description": (
                "`Token <key>`: an API token created in the admin (API tokens). Read-only tokens may only use GET."
            ),
        }


def wants_raw_worker_ids(request) -> bool:
    """True when the request asks for raw worker ids (the API's one yes/no rule,
    ``lab.api.filters.parse_boolean``: a value that is not a yes/no word is a 400); PermissionDenied
    when the user may not."""
    if not boolean_query_param(request, RAW_WORKER_IDS_PARAM):
        return False
    if not user_may_see_raw_worker_ids(request.user):
        raise exceptions.PermissionDenied(
            f"{RAW_WORKER_IDS_PARAM}: raw worker ids are for holders of the permission "
            f"'{RAW_WORKER_IDS_PERMISSION}'; the pseudonymised 'worker' column is always there."
        )
    return True
