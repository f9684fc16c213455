"""Which OpenAI-compatible endpoints the LM worker may call (server-side request forgery guard).

A researcher who may add a rationale source or question generator chooses its ``endpoint_url``,
and the worker POSTs to it and reports a failed reply's first 200 characters in the job's error,
which the researcher reads. Without a rule that is a way to make the server call its own
neighbours (the cloud metadata service at 169.254.169.254, a database on 127.0.0.1, hosts on
10.x) and read their answers. :func:`endpoint_refusal` is the rule; the sender
(``OpenAIBackend._send``) applies it before every request, so nothing is sent to a refused
endpoint:

- the URL must be http or https, carry no credentials (``user:pass@``), and have no query string
  or fragment (``?x=`` or ``#`` at the end would hide the ``/completions`` the backend appends);
- every address its host resolves to is checked: link-local (169.254.0.0/16, fe80::/10, the
  metadata address among them), multicast, reserved and unspecified (``0.0.0.0/8``, ``::``)
  addresses are never called; loopback, private (RFC 1918, fc00::/7), shared (100.64.0.0/10) and
  any other non-global address only when the URL's host is exactly one of the setting
  ``RL_LM_ENDPOINT_PRIVATE_HOSTS`` (default ``localhost,127.0.0.1,::1``: a vLLM or llama.cpp
  server on the worker's own machine).

Known limit: the check resolves the host name itself, and httpx resolves it again when it
connects, so a name whose DNS answer changes in between (DNS rebinding) can still reach an address
the check did not see; httpx offers no public way to pin its connection to the checked address. A
name that does not resolve at check time is let through: httpx then cannot connect to it either
(unless its answer changes, the same gap). An operator who needs a hard guarantee blocks the
metadata address and internal networks for the worker at the network level too.
"""
from __future__ import annotations

import ipaddress
import socket

import httpx
from django.conf import settings

SETTING = "RL_LM_ENDPOINT_PRIVATE_HOSTS"
# 0.0.0.0/8 is "this host" on Linux (0.1.2.3 reaches the loopback), yet only 0.0.0.0 counts as
# unspecified for ``ipaddress``.
_THIS_NETWORK = ipaddress.ip_network("0.0.0.0/8")


def endpoint_private_hosts() -> set[str]:
    """The hosts an endpoint may name although they resolve to a loopback or private address: the
    setting ``RL_LM_ENDPOINT_PRIVATE_HOSTS``, a list or a comma-separated string of host names or
    addresses, compared exactly (case, a trailing dot and IPv6 brackets aside)."""
    hosts = settings.RL_LM_ENDPOINT_PRIVATE_HOSTS
    if isinstance(hosts, str):
        hosts = hosts.split(",")
    return {_normal_host(h) for h in hosts if h and h.strip()}


def _normal_host(host: str) -> str:
    return host.strip().lower().strip("[]").rstrip(".")


def _addresses(host: str, port: int) -> list[ipaddress.IPv4Address | ipaddress.IPv6Address]:
    try:
        found = [ipaddress.ip_address(host)]
    except ValueError:
        try:
            infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
        except (socket.gaierror, UnicodeError, OSError):
            return []
        found = [ipaddress.ip_address(str(info[4][0]).split("%", 1)[0]) for info in infos]
    # ::ffff:169.254.169.254 reaches 169.254.169.254: judge the IPv4 address it maps.
    return [a.ipv4_mapped if isinstance(a, ipaddress.IPv6Address) and a.ipv4_mapped else a for a in found]


def _never(address) -> str:
    if address.is_link_local:
        return "link-local"
    if address.is_multicast:
        return "multicast"
    if address.is_unspecified or (address.version == 4 and address in _THIS_NETWORK):
        return "unspecified"
    if address.is_reserved and not address.is_loopback:  # ::1 lies in the reserved ::/8
        return "reserved"
    return ""


def endpoint_refusal(url: str) -> str:
    """Why the LM worker must not send a request to ``url``, or ``""`` when it may (the rule in
    this module's docstring). The URL is parsed by httpx, the library that sends, so both read the
    same host."""
    try:
        parsed = httpx.URL(url)
    except (httpx.InvalidURL, TypeError, ValueError):
        return "the endpoint URL cannot be parsed"
    if parsed.scheme not in {"http", "https"}:
        return f"the endpoint is not http or https ({parsed.scheme or 'no scheme'})"
    if parsed.userinfo:
        return "the endpoint URL carries a user name or password (user:pass@)"
    if parsed.query or parsed.fragment:
        return ("the endpoint URL has a query string or fragment ('?' or '#'), which would hide the "
                "path the backend appends")
    host = _normal_host(parsed.host or "")
    if not host:
        return "the endpoint URL has no host"
    port = parsed.port or (443 if parsed.scheme == "https" else 80)
    listed = host in endpoint_private_hosts()
    for address in _addresses(host, port):
        never = _never(address)
        if never:
            return (f"its host {host!r} resolves to {address}, a {never} address, which is never called "
                    f"(whatever {SETTING} lists)")
        if not address.is_global and not listed:
            return (f"its host {host!r} resolves to {address}, a loopback or private address, and is not one "
                    f"of the hosts in {SETTING}")
    return ""
