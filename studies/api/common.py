"""Building blocks shared by the API of every app: authentication, permissions, study visibility,
worker pseudonyms, pagination and throttling.

Access rules (docs/README "REST API"):
- anonymous requests (crowdworkers included) get 401 everywhere;
- a researcher sees the studies they own and those shared with them; staff and superusers see all;
  a study the user cannot see answers 404, never 403;
- read-only API tokens may only use safe methods (403 otherwise);
- worker ids are HMAC-SHA256 pseudonyms; raw platform ids only for staff holding
  ``studies.view_raw_worker_ids`` who ask for them explicitly.
"""
from __future__ import annotations

import hashlib
import hmac

from django.conf import settings
from django.db.models import Q, QuerySet
from drf_spectacular.extensions import OpenApiAuthenticationExtension
from rest_framework import exceptions
from rest_framework.authentication import (
    BaseAuthentication,
    SessionAuthentication,
    TokenAuthentication,
    get_authorization_header,
)
from rest_framework.pagination import CursorPagination
from rest_framework.permissions import SAFE_METHODS, BasePermission, IsAuthenticated
from rest_framework.throttling import ScopedRateThrottle

from studies.models import ApiToken, Study

from .tokens import api_token_get_valid, is_api_token_key

RAW_WORKER_IDS_PERMISSION = "studies.view_raw_worker_ids"
RAW_WORKER_IDS_PARAM = "include_raw_worker_ids"


# --- Authentication ---------------------------------------------------------------------------
class ApiTokenAuthentication(BaseAuthentication):
    """``Authorization: Token rl_...`` (or ``Bearer rl_...``) with an :class:`ApiToken`.

    Keys without the ``rl_`` prefix are left to DRF's ``TokenAuthentication``."""

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
        if not is_api_token_key(key):
            return None
        token = api_token_get_valid(key=key)
        if token is None:
            raise exceptions.AuthenticationFailed("Invalid, expired or revoked token.")
        return token.user, token

    def authenticate_header(self, request):
        return 'Token realm="api"'


class ApiTokenScheme(OpenApiAuthenticationExtension):
    target_class = "studies.api.common.ApiTokenAuthentication"
    name = "apiTokenAuth"

    def get_security_definition(self, auto_schema):
        return {
            "type": "apiKey",
            "in": "header",
            "name": "Authorization",
            "description": (
                "`Token <key>`: an API token created in the admin (API tokens). Read-only tokens may "
                "only use GET; DRF tokens (keys without the `rl_` prefix) are accepted too."
            ),
        }


AUTHENTICATION_CLASSES = [ApiTokenAuthentication, TokenAuthentication, SessionAuthentication]


class ServiceUnavailable(exceptions.APIException):
    """503 for a write whose service is left out of this installation."""

    status_code = 503
    default_detail = "This feature is not available in this installation."
    default_code = "not_available"


def import_service(module: str, name: str, feature: str):
    """``module.name``, imported when a request needs it; 503 naming it when this installation
    lacks the module or the name. Any other import error is a bug and propagates."""
    import importlib

    try:
        mod = importlib.import_module(module)
    except ModuleNotFoundError as exc:
        if exc.name and (module == exc.name or module.startswith(exc.name + ".")):
            raise ServiceUnavailable(f"{feature} is not available in this installation ({module} is missing).") from exc
        raise
    try:
        return getattr(mod, name)
    except AttributeError as exc:
        raise ServiceUnavailable(f"{feature} is not available in this installation ({module}.{name} is missing).") from exc


# --- Permissions ------------------------------------------------------------------------------
class ReadOnlyTokenPermission(BasePermission):
    message = "This API token is read-only: use a read-write token for this request."

    def has_permission(self, request, view):
        if request.method in SAFE_METHODS:
            return True
        return not (isinstance(request.auth, ApiToken) and request.auth.read_only)


class HasModelPermission(BasePermission):
    """Writes need the Django permission named by the view's ``write_permissions[action]``."""

    def has_permission(self, request, view):
        if request.method in SAFE_METHODS:
            return True
        needed = getattr(view, "write_permissions", {}).get(getattr(view, "action", None))
        if needed is None:
            return True
        if request.user.has_perm(needed):
            return True
        self.message = f"You need the permission '{needed}' for this request."
        return False


PERMISSION_CLASSES = [IsAuthenticated, ReadOnlyTokenPermission, HasModelPermission]


def can_view_raw_worker_ids(user) -> bool:
    return bool(user and user.is_authenticated and user.is_staff and user.has_perm(RAW_WORKER_IDS_PERMISSION))


def wants_raw_worker_ids(request) -> bool:
    """True when the request asks for raw worker ids; PermissionDenied when the user may not."""
    value = request.query_params.get(RAW_WORKER_IDS_PARAM, "").strip().lower()
    if value not in {"1", "true", "yes", "on"}:
        return False
    if not can_view_raw_worker_ids(request.user):
        raise exceptions.PermissionDenied(
            f"{RAW_WORKER_IDS_PARAM}: raw worker ids are for staff with the permission "
            f"'{RAW_WORKER_IDS_PERMISSION}'; the pseudonymised 'worker' column is always there."
        )
    return True


# --- Study visibility -------------------------------------------------------------------------
def visible_studies(user) -> QuerySet[Study]:
    """Studies ``user`` may read: all for staff/superusers, else owned or shared ones."""
    if not (user and user.is_authenticated):
        return Study.objects.none()
    if user.is_staff or user.is_superuser:
        return Study.objects.all()
    ids = Study.objects.filter(Q(owner=user) | Q(shared_with=user)).values("pk")
    return Study.objects.filter(pk__in=ids)


# --- Worker pseudonyms ------------------------------------------------------------------------
def worker_pseudonym(platform: str, external_id: str) -> str:
    """Keyed pseudonym of a platform worker: ``w_`` + 16 hex digits of HMAC-SHA256.

    Keyed by ``settings.RL_PSEUDONYM_SALT``, so stable within a deployment and not reversible
    (nor recomputable from a public id list) without the salt."""
    key = str(settings.RL_PSEUDONYM_SALT).encode("utf-8")
    msg = f"{platform}:{external_id}".encode()
    return "w_" + hmac.new(key, msg, hashlib.sha256).hexdigest()[:16]


class PseudonymCache:
    """Memoises pseudonyms by participant id; bounded by the number of workers, not rows."""

    def __init__(self) -> None:
        self._cache: dict[int, str] = {}

    def get(self, participant_id: int, platform: str, external_id: str) -> str:
        value = self._cache.get(participant_id)
        if value is None:
            value = self._cache[participant_id] = worker_pseudonym(platform, external_id)
        return value


def participant_ids_for_pseudonyms(pseudonyms: list[str], participants: QuerySet) -> list[int]:
    """Ids of the participants in ``participants`` whose pseudonym is one of ``pseudonyms``."""
    wanted = {p.strip() for p in pseudonyms if p.strip()}
    found = []
    for pk, platform, external_id in participants.values_list("pk", "platform", "external_id").iterator(
        chunk_size=2000
    ):
        if worker_pseudonym(platform, external_id) in wanted:
            found.append(pk)
    return found


# --- Pagination and throttling ----------------------------------------------------------------
class ApiCursorPagination(CursorPagination):
    """Cursor pagination: pages stay correct while rows are added (no skipped or repeated rows)."""

    ordering = "id"
    page_size = 100
    page_size_query_param = "page_size"
    max_page_size = 1000


class ApiScopedRateThrottle(ScopedRateThrottle):
    """ScopedRateThrottle with its rates read from ``settings.RL_API_THROTTLE_RATES`` at call time."""

    def get_rate(self):
        rates = getattr(settings, "RL_API_THROTTLE_RATES", {})
        if self.scope not in rates:
            return None
        return rates[self.scope]


class ApiViewMixin:
    """Authentication, permissions, pagination and write throttling of every API view."""

    authentication_classes = AUTHENTICATION_CLASSES
    permission_classes = PERMISSION_CLASSES
    pagination_class = ApiCursorPagination
    write_throttle_scope = "api_write"

    def get_throttles(self):
        scope = getattr(self, "throttle_scope_for_action", {}).get(getattr(self, "action", None))
        if scope is None and self.request.method not in SAFE_METHODS:
            scope = self.write_throttle_scope
        if scope is None:
            return []
        self.throttle_scope = scope
        return [ApiScopedRateThrottle()]
