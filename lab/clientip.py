"""The address a request came from, as login throttling counts it (``AXES_CLIENT_IP_CALLABLE``).

With no trusted reverse proxy (``RL_TRUSTED_PROXIES`` = 0) it is the connection's address
(``REMOTE_ADDR``): nothing the client sends can change it. Behind N proxies that each append the
address they received from to ``X-Forwarded-For`` (nginx's ``$proxy_add_x_forwarded_for``), it is
the entry N places from the right; entries further left were written by the client and are
ignored. A value that is not an IP address falls back to the connection's."""
from __future__ import annotations

import ipaddress

from django.conf import settings
from django.http import HttpRequest


def client_ip(request: HttpRequest) -> str:
    remote = request.META.get("REMOTE_ADDR", "")
    hops = settings.RL_TRUSTED_PROXIES
    if hops <= 0:
        return remote
    forwarded = [part.strip() for part in request.META.get("HTTP_X_FORWARDED_FOR", "").split(",") if part.strip()]
    if len(forwarded) < hops:
        return remote
    candidate = forwarded[-hops]
    try:
        return str(ipaddress.ip_address(candidate))
    except ValueError:
        return remote
