"""What every worker page shares: its headers, the refusal of input no page can take, the
message page, the study cookie that says which task a browser holds, and the browser key that
binds a landing page's consent form to the browser that loaded it."""
from __future__ import annotations

import functools
import hashlib
import re
import secrets
from dataclasses import dataclass

from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.views.decorators.clickjacking import xframe_options_exempt

from lab.middleware import nul_in_request

COOKIE_SALT = "annotations.worker"
# A form sent by a worker page's own script (templates/jinja2/annotations/base.html) carries this
# header set to "1": the view then replies with the page the form leads to (200) instead of a
# redirect to it, which saves the browser, gunicorn and the database a whole request. Without the
# header (no JavaScript, or the script's request failed and the form was sent the plain way) the
# form does the same and the reply is the usual redirect.
INLINE_HEADER = "X-RL-Inline"
COOKIE_MAX_AGE = 60 * 24 * 3600
FRAME_ANCESTORS = "frame-ancestors 'self' https://www.mturk.com https://workersandbox.mturk.com"


def message(request: HttpRequest, *, title: str, message: str, status: int = 200, assignment=None) -> HttpResponse:
    return render(request, "annotations/message.html",
                  {"title": title, "message": message, "assignment": assignment}, status=status)


def wants_inline(request: HttpRequest) -> bool:
    """Whether ``request`` was sent by a worker page's script and takes the next page as its reply."""
    return request.method == "POST" and request.headers.get(INLINE_HEADER) == "1"


def located(response: HttpResponse, url: str) -> HttpResponse:
    """A page sent in place of a redirect to ``url``: ``Content-Location`` names the address it
    belongs to, and the page's script shows that address (``history.replaceState``), so a reload
    or a bookmark opens the page itself, not the form that led to it."""
    response["Content-Location"] = url
    return response


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


# --- the study cookie: which task this browser holds ---------------------------------------------

def _cookie_name(study_id: int) -> str:
    return f"rl_w{study_id}"


def _cookie_salt(study_id: int) -> str:
    return f"{COOKIE_SALT}:{study_id}"


@dataclass(frozen=True)
class Held:
    """What a browser proves in a study: the participant it last worked as, and the task the
    server handed it (its id, in a cookie signed with ``DJANGO_SECRET_KEY``: a browser cannot make
    one up, so it names only a task this browser was sent to)."""

    participant_id: int | None = None
    assignment_id: int | None = None


def browser_holds(request: HttpRequest, study_id: int) -> Held:
    """What the study's signed, study-bound cookie of this browser names (``Held()`` if none).
    A cookie of the earlier form (a participant id alone) names no task."""
    value = request.get_signed_cookie(_cookie_name(study_id), default="", salt=_cookie_salt(study_id),
                                      max_age=COOKIE_MAX_AGE)
    participant, _, task = value.partition(".")
    if not (participant.isascii() and participant.isdigit()):
        return Held()
    return Held(int(participant), int(task) if task.isascii() and task.isdigit() else None)


def remember_task(request: HttpRequest, response: HttpResponse, *, study_id: int, participant_id: int,
                  assignment_id: int) -> None:
    """Give this browser the proof that it holds task ``assignment_id``. Call only where the
    browser was entitled to the task (it started it, held it already, or came with the task's
    own platform assignment id or single-person link)."""
    response.set_signed_cookie(
        _cookie_name(study_id), f"{participant_id}.{assignment_id}", salt=_cookie_salt(study_id),
        max_age=COOKIE_MAX_AGE, httponly=True, samesite="Lax", secure=request.is_secure(),
    )


# --- the browser key: which browser loaded a landing page -----------------------------------------

BROWSER_COOKIE = "rl_b"
_BROWSER_KEY = re.compile(r"[A-Za-z0-9_-]{43}")


def browser_key(request: HttpRequest) -> str:
    """This browser's own random key (cookie ``rl_b``, made at its first landing page; set it on
    the response with ``keep_browser_key``). A landing page's consent nonce carries its digest, so
    the form is taken only from the browser that loaded the page."""
    key = getattr(request, "_rl_browser_key", None) or request.COOKIES.get(BROWSER_COOKIE, "")
    if not _BROWSER_KEY.fullmatch(key):
        key = secrets.token_urlsafe(32)
        request._rl_browser_key_new = True
    request._rl_browser_key = key
    return key


def browser_digest(request: HttpRequest) -> str:
    """The digest of this browser's key that a nonce carries (the key itself never is in a page)."""
    return hashlib.sha256(b"rl-browser\x00" + browser_key(request).encode()).hexdigest()[:32]


def keep_browser_key(request: HttpRequest, response: HttpResponse) -> None:
    if getattr(request, "_rl_browser_key_new", False):
        response.set_cookie(BROWSER_COOKIE, request._rl_browser_key, max_age=COOKIE_MAX_AGE, httponly=True,
                            samesite="Lax", secure=request.is_secure())
