"""No request that carries a character no text can store reaches a view.

No database text can store a NUL (PostgreSQL refuses it: a 500 wherever a value reaches a query,
such as an admin list filter) or a lone surrogate (not valid Unicode: no page can be encoded with
one, and a JSON column refuses it on PostgreSQL), and no id, token, name or answer of this app
contains one. A lone surrogate reaches a form through its declared encoding: Django decodes a
``multipart/form-data`` body (and the query string) in the charset the request names, and UTF-7
turns ``+2AA-`` into ``\ud800``. The middleware refuses such a request with a 400 that names where
the character was and which it is: JSON under ``/api/``, plain text elsewhere. A view that refuses
it itself, with a page of its own, says so with ``refuses_nul = True`` (the worker pages,
``annotations.worker_pages``). Uploaded files are not read here: the importers check what they parse."""
from __future__ import annotations

from django.contrib import messages
from django.core.exceptions import ValidationError
from django.http import HttpRequest, HttpResponseBadRequest, HttpResponseRedirect, JsonResponse

from lab.jsontext import NUL, UNSTORABLE_CHARACTERS

FORM_TYPES = ("application/x-www-form-urlencoded", "multipart/form-data")


def _which(text: str) -> str:
    """The first character of ``text`` that no text can store, in words."""
    if NUL in text:
        return "a NUL character (\\x00)"
    return "a lone surrogate (text that is not valid Unicode, such as a form sent in an encoding other than UTF-8 holds)"


def unstorable_in_request(request: HttpRequest, view_kwargs: dict | None = None) -> tuple[str, str] | None:
    """Where the request carries a character no text can store (``lab.jsontext.UNSTORABLE_CHARACTERS``:
    a NUL, a lone surrogate) in its address or its form, and which, in words; None when nowhere."""
    for text in (request.path, *(str(value) for value in (view_kwargs or {}).values())):
        if UNSTORABLE_CHARACTERS.search(text):
            return "the address", _which(text)
    sources = [("the address", request.GET)]
    if request.method == "POST" and request.content_type in FORM_TYPES:
        sources.append(("the form", request.POST))
    for where, data in sources:
        for name, values in data.lists():
            bad = [text for text in (name, *values) if UNSTORABLE_CHARACTERS.search(text)]
            if bad:
                shown = UNSTORABLE_CHARACTERS.sub("", name)
                return (f"the field “{shown}” of {where}" if shown else where), _which(bad[0])
    return None


class RefuseNulMiddleware:
    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        return self.get_response(request)

    def process_view(self, request, view_func, view_args, view_kwargs):
        if getattr(view_func, "refuses_nul", False):
            return None
        found = unstorable_in_request(request, view_kwargs)
        if found is None:
            return None
        where, which = found
        message = f"The request was refused: {where} contains {which}, which is not allowed."
        if request.path.startswith("/api/"):
            return JsonResponse({"detail": message}, status=400)
        return HttpResponseBadRequest(message, content_type="text/plain; charset=utf-8")


# The largest id a 64-bit integer column holds (BigAutoField, every model's id here).
MAX_ID = 2**63 - 1


class AdminSelectionMiddleware:
    """An admin action's selection (``_selected_action``) holds row ids; Django's admin filters
    with them as given, so ``abc``, ``1.5`` or an id past 64 bits was a 500. Such a selection sends
    the researcher back to the list with an error; nothing runs."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        return self.get_response(request)

    def process_view(self, request, view_func, view_args, view_kwargs):
        model_admin = getattr(view_func, "model_admin", None)
        if model_admin is None or request.method != "POST" or request.content_type not in FORM_TYPES:
            return None
        selected = request.POST.getlist("_selected_action")
        bad = [value for value in selected if not _is_id(model_admin.model._meta.pk, value)]
        if not bad:
            return None
        shown = ", ".join(repr(value[:40]) for value in bad[:5])
        messages.error(request, f"Nothing was done: the selection names {shown}, which is not a row of this list.")
        return HttpResponseRedirect(request.get_full_path())


def _is_id(pk_field, value: str) -> bool:
    try:
        python = pk_field.to_python(value)
    except (ValidationError, ValueError, TypeError):
        return False
    if isinstance(python, int):
        return str(python) == value.strip() and -MAX_ID - 1 <= python <= MAX_ID
    return True
