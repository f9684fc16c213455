"""The Jinja2 environment of the worker pages (``templates/jinja2/annotations/``).

Those pages are the hot path of the web process. Jinja2 compiles a template to Python once and
renders the step page in 0.70 ms against 2.07 ms with Django's engine (in-process); under load the
render is about a tenth of the web process's CPU (benchmarks/questionnaire/README.md).
The admin and the cockpit stay on Django templates (the first engine in ``TEMPLATES``).

The environment keeps what the pages relied on in Django's engine: a missing variable or
attribute renders as nothing (``ChainableUndefined``; the researcher preview passes fewer keys
than the task pages), output is escaped, a template's final newline is kept (an included template
ends where Django's did), ``url(name, *args, **kwargs)`` stands for ``{% url %}``, and
``pluralize`` is Django's own filter. ``csrf_input``, ``csrf_token`` and ``request`` come from
Django's Jinja2 backend; ``csrf_once`` (a context processor of that engine) makes a page mask the
CSRF token once however many forms it has (the backend's own value masks it anew at every use:
32 random characters, each from the system's random source).

Both are measured in the web process's CPU under load (py-spy, 50 workers: ``reverse`` 2.6%, the
masking 2.4%): ``url`` keeps what it reversed, keyed by everything ``reverse`` depends on here."""
from __future__ import annotations

import functools

from django.template.backends.utils import csrf_input
from django.template.defaultfilters import pluralize
from django.urls import get_script_prefix, get_urlconf, reverse
from jinja2 import ChainableUndefined, Environment


@functools.lru_cache(maxsize=8192)
def _reverse(prefix: str, urlconf, name: str, args: tuple, kwargs: tuple) -> str:
    return reverse(name, args=args or None, kwargs=dict(kwargs) or None)


def url(name: str, *args, **kwargs) -> str:
    """``reverse`` as a template function: ``{{ url('annotations:answer', assignment.token) }}``.
    A task's pages reverse the same few addresses again and again: each is reversed once per
    process (the script prefix and the URLconf are part of the key)."""
    return _reverse(get_script_prefix(), get_urlconf(), name, args, tuple(sorted(kwargs.items())))


class _CsrfInput:
    """The hidden CSRF field of one page, masked on its first use and reused by every form of the
    page (the token is the request's; the mask only varies it between responses)."""

    def __init__(self, request):
        self.request, self.html = request, None

    def __html__(self) -> str:
        if self.html is None:
            self.html = csrf_input(self.request)  # Django's own field
        return self.html

    __str__ = __html__


def csrf_once(request) -> dict:
    """Context processor of the Jinja2 engine: ``csrf_input`` masked once per page."""
    return {"csrf_input": _CsrfInput(request)}


def environment(**options) -> Environment:
    # Django's backend sets ``undefined`` to (Debug)Undefined; these pages need Django's behaviour.
    options["undefined"] = ChainableUndefined
    options.setdefault("autoescape", True)
    options.setdefault("keep_trailing_newline", True)
    env = Environment(**options)
    env.globals["url"] = url
    env.filters["pluralize"] = pluralize
    return env
