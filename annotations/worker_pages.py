"""What every worker page shares: its headers, the refusal of input no page can take, the
message page, and the study cookie that says which participant a browser is."""
from __future__ import annotations

import functools

from django.core import signing
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.views.decorators.clickjacking import xframe_options_exempt

from lab.middleware import nul_in_request

COOKIE_SALT = "annotations.worker"
COOKIE_MAX_AGE = 60 * 24 * 3600
FRAME_ANCESTORS = "frame-ancestors 'self' https://www.mturk.com https://workersandbox.mturk.com"


def message(request: HttpRequest, *, title: str, message: str, status: int = 200, assignment=None) -> HttpResponse:
    return render(request, "annotations/message.html",
                  {"title": title, "message": message, "assignment": assignment}, status=status)


def worker_page(view):
    """Headers of every worker page: MTurk may frame it (nobody else), nothing is cached (a
    back button must not show an old form), and the task token never leaks as a referrer to
    another site (same-origin: the CSRF origin check still sees our own origin).

    A request with a NUL character anywhere in its address or form is refused with a clear 400
    before the view runs: no id, token or answer can contain one."""

    @functools.wraps(view)
    def wrapped(request, *args, **kwargs):
        where = nul_in_request(request, kwargs)
        if where is not None:
            response = message(
                request, title="Not accepted", status=400,
                message=f"The request was refused: {where} contains a character that is not allowed (a NUL "
                        "byte). Open the link exactly as you received it, or remove that character and send "
                        "the form again.")
        else:
            response = view(request, *args, **kwargs)
        response["Content-Security-Policy"] = FRAME_ANCESTORS
        response["Cache-Control"] = "no-store"
        response["Referrer-Policy"] = "same-origin"
        return response

    wrapped.refuses_nul = True  # lab.middleware.RefuseNulMiddleware leaves it to this page
    return xframe_options_exempt(wrapped)


# --- the study cookie ---------------------------------------------------------------------------

def _cookie_name(study_id: int) -> str:
    return f"rl_w{study_id}"


def _cookie_salt(study_id: int) -> str:
    return f"{COOKIE_SALT}:{study_id}"


def cookie_participant_id(request: HttpRequest, study_id: int) -> int | None:
    """The participant this browser holds in the study (a signed, study-bound cookie), or None."""
    try:
        value = request.get_signed_cookie(_cookie_name(study_id), default="", salt=_cookie_salt(study_id),
                                          max_age=COOKIE_MAX_AGE)
    except signing.BadSignature:  # pragma: no cover - get_signed_cookie returns the default
        return None
    return int(value) if value.isdigit() else None


def remember_participant(request: HttpRequest, response: HttpResponse, *, study_id: int, participant_id: int) -> None:
    response.set_signed_cookie(
        _cookie_name(study_id), str(participant_id), salt=_cookie_salt(study_id), max_age=COOKIE_MAX_AGE,
        httponly=True, samesite="Lax", secure=request.is_secure(),
    )
