"""Permission classes that ``REST_FRAMEWORK`` applies to every API view (see ``config/settings``).

Which *rows* a user may read is each view's ``get_queryset`` (through the per-study access
selector); these classes decide which *requests* may run at all. A method the route does not map (PUT, PATCH
or DELETE on a read-only resource) is let through to the view, whose answer is 405 Method Not
Allowed with the ``Allow`` header, not a 403 that reads as a missing right."""
from __future__ import annotations

from rest_framework.permissions import SAFE_METHODS, BasePermission


def method_not_mapped(request, view) -> bool:
    """Whether ``view`` has no handler for the request's method: DRF then answers 405 (after the
    permission checks, which must not turn it into a 403). A viewset binds only the methods its
    route maps (``action_map``); an ``APIView`` defines its handlers as methods."""
    action_map = getattr(view, "action_map", None)
    if action_map is not None:
        return request.method.lower() not in action_map
    return getattr(view, request.method.lower(), None) is None


class ReadOnlyTokenPermission(BasePermission):
    """A token whose ``read_only`` flag is set may only use safe methods."""

    message = "This API token is read-only: use a read-write token for this request."

    def has_permission(self, request, view):
        if request.method in SAFE_METHODS or method_not_mapped(request, view):
            return True
        return not getattr(request.auth, "read_only", False)


class HasModelPermission(BasePermission):
    """A write needs the Django permission that the view names for it in
    ``write_permissions = {action: "app.codename"}``. A write the view names no permission for is
    refused: a new endpoint is closed until it says who may use it."""

    def has_permission(self, request, view):
        if request.method in SAFE_METHODS or method_not_mapped(request, view):
            return True
        needed = getattr(view, "write_permissions", {}).get(getattr(view, "action", None))
        if needed is None:
            self.message = "This endpoint accepts no writes."
            return False
        if request.user.has_perm(needed):
            return True
        self.message = f"You need the permission '{needed}' for this request."
        return False
