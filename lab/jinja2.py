"""The Jinja2 environment of the worker pages (``templates/jinja2/annotations/``).

Those pages are the hot path of the web process, and Django's template engine was about a quarter
of its CPU there; Jinja2 compiles a template to Python once and renders it several times faster.
The admin and the cockpit stay on Django templates (the first engine in ``TEMPLATES``).

The environment keeps what the pages relied on in Django's engine: a missing variable or
attribute renders as nothing (``ChainableUndefined``; the researcher preview passes fewer keys
than the task pages), output is escaped, a template's final newline is kept (an included template
ends where Django's did), ``url(name, *args, **kwargs)`` stands for ``{% url %}``, and
``pluralize`` is Django's own filter. ``csrf_input``, ``csrf_token`` and ``request`` come from
Django's Jinja2 backend."""
from __future__ import annotations

from django.template.defaultfilters import pluralize
from django.urls import reverse
from jinja2 import ChainableUndefined, Environment


def url(name: str, *args, **kwargs) -> str:
    """``reverse`` as a template function: ``{{ url('annotations:answer', assignment.token) }}``."""
    return reverse(name, args=args or None, kwargs=kwargs or None)


def environment(**options) -> Environment:
    # Django's backend sets ``undefined`` to (Debug)Undefined; these pages need Django's behaviour.
    options["undefined"] = ChainableUndefined
    options.setdefault("autoescape", True)
    options.setdefault("keep_trailing_newline", True)
    env = Environment(**options)
    env.globals["url"] = url
    env.filters["pluralize"] = pluralize
    return env
