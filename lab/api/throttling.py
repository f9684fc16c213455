"""The API's default throttle: writes and exports are rate-limited per user, reads are not.

Counts live in Django's cache: with ``REDIS_URL`` set (``config/settings``) every gunicorn process
shares them, so a limit is a limit for the whole deployment, not per process."""
from __future__ import annotations

from django.conf import settings
from rest_framework.permissions import SAFE_METHODS
from rest_framework.throttling import ScopedRateThrottle

WRITE_SCOPE = "api_write"


class ApiScopedRateThrottle(ScopedRateThrottle):
    """The scope is the view's ``throttle_scope_for_action[action]`` (e.g. exports), else
    ``api_write`` for any unsafe method; rates come from ``settings.RL_API_THROTTLE_RATES`` at call
    time. Safe requests without a scope are not throttled."""

    def allow_request(self, request, view):
        scope = getattr(view, "throttle_scope_for_action", {}).get(getattr(view, "action", None))
        if scope is None and request.method not in SAFE_METHODS:
            scope = WRITE_SCOPE
        if scope is None:
            return True
        view.throttle_scope = scope
        return super().allow_request(request, view)

    def get_rate(self):
        return settings.RL_API_THROTTLE_RATES.get(self.scope)
