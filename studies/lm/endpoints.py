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

The request goes to an address the check saw: :func:`endpoint_check` resolves the host once and
returns the addresses it judged, the sender hands them to :class:`PinnedTransport` with the request,
and the transport connects to one of them, never resolving the name again (DNS rebinding, a name
whose answer changes between the check and the connection, cannot reach an unchecked address). The
request still names the URL's host: the ``Host`` header, and for https the TLS server name (SNI) and
the certificate check are the host name's, not the address's. A name that does not resolve is not
refused by the rule, but nothing can be sent to it: the transport raises :class:`HostDoesNotResolve`
(a connection error, retried like one).

Known limit: when the environment names a proxy for the endpoint's scheme (``HTTP_PROXY``,
``HTTPS_PROXY``, ``ALL_PROXY``; :func:`environment_proxied`), the worker keeps httpx's own proxy
handling and does not pin: the proxy (or httpx, for a ``NO_PROXY`` host) resolves the name again,
so DNS rebinding can still reach an address the check did not see, and the check judges the
worker's view of DNS, not the proxy's. An operator who needs a hard guarantee blocks the metadata
address and internal networks for the worker (and its proxy) at the network level too.
"""
from __future__ import annotations

import ipaddress
import socket
import urllib.request

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
    return endpoint_check(url)[0]


def endpoint_check(url: str) -> tuple[str, tuple[str, ...]]:
    """:func:`endpoint_refusal` and the addresses it judged: ``(refusal, addresses)``. With no
    refusal, ``addresses`` are the ones a request to ``url`` may connect to (hand them to
    :class:`PinnedTransport` as the request extension :data:`CHECKED_ADDRESSES`); empty when the
    host does not resolve."""
    try:
        parsed = httpx.URL(url)
    except (httpx.InvalidURL, TypeError, ValueError):
        return "the endpoint URL cannot be parsed", ()
    if parsed.scheme not in {"http", "https"}:
        return f"the endpoint is not http or https ({parsed.scheme or 'no scheme'})", ()
    if parsed.userinfo:
        return "the endpoint URL carries a user name or password (user:pass@)", ()
    if parsed.query or parsed.fragment:
        return ("the endpoint URL has a query string or fragment ('?' or '#'), which would hide the "
                "path the backend appends"), ()
    host = _normal_host(parsed.host or "")
    if not host:
        return "the endpoint URL has no host", ()
    port = parsed.port or (443 if parsed.scheme == "https" else 80)
    listed = host in endpoint_private_hosts()
    addresses = _addresses(host, port)
    for address in addresses:
        never = _never(address)
        if never:
            return (f"its host {host!r} resolves to {address}, a {never} address, which is never called "
                    f"(whatever {SETTING} lists)"), ()
        if not address.is_global and not listed:
            return (f"its host {host!r} resolves to {address}, a loopback or private address, and is not one "
                    f"of the hosts in {SETTING}"), ()
    return "", tuple(dict.fromkeys(str(a) for a in addresses))


def environment_proxied(url: str) -> bool:
    """Whether httpx, trusting the environment as the worker's client does, may send a request for
    ``url`` through a proxy: ``HTTP_PROXY``/``HTTPS_PROXY`` for its scheme or ``ALL_PROXY`` is set
    (read with ``urllib.request.getproxies``, as httpx reads them) and ``NO_PROXY`` is not ``*``.
    Such a client is left to httpx's proxy handling, unpinned (the module docstring's known limit)."""
    proxies = urllib.request.getproxies()
    try:
        scheme = httpx.URL(url).scheme
    except (httpx.InvalidURL, TypeError, ValueError):
        scheme = ""
    if not (proxies.get(scheme) or proxies.get("all")):
        return False
    return "*" not in {h.strip() for h in proxies.get("no", "").split(",")}


# The request extension that carries the addresses :func:`endpoint_check` judged to the transport.
CHECKED_ADDRESSES = "rl_checked_addresses"


class EndpointRefused(Exception):
    """:class:`PinnedTransport` got a request nobody checked, and the rule refuses its URL."""


class HostDoesNotResolve(httpx.ConnectError):
    """The endpoint's host has no address: nothing can be sent (a DNS failure or a wrong name)."""


class PinnedTransport(httpx.BaseTransport):
    """An ``httpx.HTTPTransport`` (same defaults as the one ``httpx.Client`` builds) that connects
    to the addresses the request's :data:`CHECKED_ADDRESSES` extension names (checked with the
    URL by :func:`endpoint_check`) instead of resolving the host again; a request without them is
    checked here. The request keeps its URL's host in the ``Host`` header and, for https, as the
    TLS server name and the name the certificate must match. Addresses are tried in order, the
    next on a connection error, as the system's own connect would. One transport per endpoint
    host: its connection pool is keyed by address, so a connection opened (and its certificate
    checked) for one host name must not serve another."""

    def __init__(self, **kwargs):
        self._inner = httpx.HTTPTransport(**kwargs)

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        addresses = request.extensions.get(CHECKED_ADDRESSES)
        if addresses is None:
            refusal, addresses = endpoint_check(str(request.url))
            if refusal:
                raise EndpointRefused(refusal)
        host = request.url.raw_host.decode("ascii")
        if not addresses:
            raise HostDoesNotResolve(f"its host {_normal_host(host)!r} does not resolve", request=request)
        extensions = {k: v for k, v in request.extensions.items() if k != CHECKED_ADDRESSES}
        if request.url.scheme == "https":
            extensions.setdefault("sni_hostname", host)
        failed: httpx.ConnectError | httpx.ConnectTimeout | None = None
        for address in addresses:
            pinned = httpx.Request(request.method, request.url.copy_with(host=address), headers=request.headers,
                                   stream=request.stream, extensions=extensions)
            try:
                return self._inner.handle_request(pinned)
            except (httpx.ConnectError, httpx.ConnectTimeout) as exc:  # the next address, as a plain connect does
                failed = exc
        raise failed

    def close(self) -> None:
        self._inner.close()
