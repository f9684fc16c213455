"""The project's 400 page (``handler400`` in ``config.urls``).

Django's own ``bad_request`` view is wrapped in ``requires_csrf_token``, which reads the form
again; when reading the form was what failed (a form posted as ``application/x-www-form-urlencoded;
charset=utf-16``, which Django refuses with ``BadRequest``), the handler raised the same error a
second time and the request ended in a 500. This page reads nothing of the request but its path:
JSON under ``/api/`` (like ``lab.middleware``), plain text elsewhere."""
from __future__ import annotations

from django.core.exceptions import BadRequest
from django.http import HttpRequest, HttpResponseBadRequest, JsonResponse


def bad_request(request: HttpRequest, exception: Exception | None = None):
    # Django's BadRequest carries a message written for the client ("must be UTF-8 encoded");
    # other 400s (SuspiciousOperation and its kind) may echo what was sent: say nothing of them.
    reason = str(exception) if type(exception) is BadRequest and str(exception) else ""
    message = "Bad request" + (f": {reason}" if reason else ".")
    if request.path.startswith("/api/"):
        return JsonResponse({"detail": message}, status=400)
    return HttpResponseBadRequest(message, content_type="text/plain; charset=utf-8")
