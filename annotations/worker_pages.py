"""What every worker page shares: its headers, the refusal of input no page can take, the
message page, the study cookie that says which task a browser holds, the browser key that
binds a landing page's consent form to the browser that loaded it, and what a worker is told of
the task's deadlines (``time_allowed``, ``task_deadline``)."""
from __future__ import annotations

import functools
import hashlib
import re
import secrets
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.utils import timezone
from django.views.decorators.clickjacking import xframe_options_exempt

from annotations.services.deadlines import (
    assignment_duration,
    first_answer_deadline,
    first_answer_window,
    full_deadline,
)
from annotations.services.steps import steps_for
from lab.middleware import unstorable_in_request
from studies.models import Study

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

    A request with a NUL character or a lone surrogate anywhere in its address or form is refused
    with a clear 400 before the view runs (``lab.middleware``): no id, token or answer can contain
    one."""

    @functools.wraps(view)
    def wrapped(request, *args, **kwargs):
        found = unstorable_in_request(request, kwargs)
        if found is not None:
            where, which = found
            response = message(
                request, title="Not accepted", status=400,
                message=f"The request was refused: {where} contains {which}, which is not allowed. Open the "
                        "link exactly as you received it, or remove that character and send the form again.")
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
    own platform assignment id or single-person link).

    The browser key (``rl_b``) is set again beside it, same value, new lifetime: whether this
    browser started the task the cookie names is read from it
    (``participants.task_started_in_browser``), so it must live at least as long as every study
    cookie relying on it. Set once at the first landing page, it would run out first in a study
    longer than ``COOKIE_MAX_AGE`` while the study cookie, set again at every task, stays: the
    browser would then be a new participant on its next link."""
    response.set_signed_cookie(
        _cookie_name(study_id), f"{participant_id}.{assignment_id}", salt=_cookie_salt(study_id),
        max_age=COOKIE_MAX_AGE, httponly=True, samesite="Lax", secure=request.is_secure(),
    )
    _refresh_browser_key(request, response)


# --- the browser key: which browser loaded a landing page -----------------------------------------

BROWSER_COOKIE = "rl_b"
# Never shorter than the study cookie's (``COOKIE_MAX_AGE``): ``remember_task`` sets it again with
# every study cookie, so the key outlives each study cookie that relies on it.
BROWSER_COOKIE_MAX_AGE = COOKIE_MAX_AGE
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
    """Set a browser key made by this request (``browser_key``) on ``response``."""
    if getattr(request, "_rl_browser_key_new", False):
        _set_browser_key(request, response, request._rl_browser_key)


def _refresh_browser_key(request: HttpRequest, response: HttpResponse) -> None:
    """Set this browser's key again (same value, full lifetime), or the one this request made; a
    browser that sent none gets none here (its landing page makes one: ``keep_browser_key``)."""
    key = getattr(request, "_rl_browser_key", None) or request.COOKIES.get(BROWSER_COOKIE, "")
    if _BROWSER_KEY.fullmatch(key):
        _set_browser_key(request, response, key)


def _set_browser_key(request: HttpRequest, response: HttpResponse, key: str) -> None:
    response.set_cookie(BROWSER_COOKIE, key, max_age=BROWSER_COOKIE_MAX_AGE, httponly=True,
                        samesite="Lax", secure=request.is_secure())


# --- the task's deadlines, as a worker is told them -----------------------------------------------
# A task must get its first answer within ``deadlines.first_answer_window`` of the consent and be
# finished within ``deadlines.assignment_duration`` of its start (``services.release``); past its
# deadline it goes back to the pool and cannot be finished, so every page before and during the
# task says which deadline holds. Pure: they read only what the page already has (the study, the
# assignment row's ``expires_at``), no query.

def _minutes_text(minutes: float) -> str:
    """``minutes`` in words, rounded down (a worker is never told they have more time than they do)."""
    whole = int(minutes)
    if whole < 1:
        return "less than a minute"
    if whole < 120:
        return f"{whole} minute{'s' if whole != 1 else ''}"
    hours, rest = divmod(whole, 60)
    return f"{hours} hours" + (f" {rest} minute{'s' if rest != 1 else ''}" if rest else "")


def time_allowed(study: Study, *, assignment=None, now: datetime | None = None, accepted_on: str = "") -> str:
    """What a worker about to consent is told of the time they will have: the first-answer window
    and the full duration. Of a task made before its worker consents (``assignment``, its consent
    page), the full duration already runs from its start, so they are told what is left of it.
    ``accepted_on``: the platform (its name) the worker came from, whose clock, and the app's,
    started when they accepted the task there (``deadlines.task_clock_start``); with ``assignment``,
    their task in progress that the consent moves to the platform's new assignment (returned and
    accepted again: ``services.entry.moves_to_new_platform_assignment``), what is left of its time."""
    first, full = first_answer_window(study), assignment_duration(study)
    if assignment is not None:
        full = max(timedelta(0), assignment.created_at + full - (now or timezone.now()))
        first = min(first, full)
    first_text, full_text = _minutes_text(first / timedelta(minutes=1)), _minutes_text(full / timedelta(minutes=1))
    if accepted_on and assignment is not None:  # a task in progress moved to a new platform assignment
        text = (f"You are going on with your task in progress, which keeps its time: it counts from when you first "
                f"accepted this task on {accepted_on} and opened it here, not from when you agree, and you have "
                f"{full_text} left to finish it.")
        soon = max(timedelta(0), assignment.expires_at - (now or timezone.now()))
        if soon + MORE_TIME_AT_LEAST <= full:  # no answer yet (or its qualification test due): an earlier deadline
            text += (f" Its next deadline comes first: you have {_minutes_text(soon / timedelta(minutes=1))} left "
                     "to give its first answer (or to send its qualification test).")
        return text + " A task that runs out of time goes back to the pool and can no longer be finished."
    if accepted_on:
        return (f"Your time counts from when you accepted this task on {accepted_on} and opened it here, not from "
                f"when you agree: you have {full_text} in all from then to finish, and after you agree "
                f"{first_text} to give your first answer (never past that). A task that runs out of time goes "
                "back to the pool and can no longer be finished.")
    return (f"After you agree you have {first_text} to give your first answer "
            f"and {full_text} in all to finish. A task that runs out of time "
            "goes back to the pool and can no longer be finished.")


@dataclass(frozen=True)
class Deadline:
    """When the task of a page must get its next move: ``at``, the assignment's ``expires_at`` in
    UTC. ``first_answer``: the task has no answer yet, and its first answer moves the deadline to
    the full duration; ``test``: the qualification test must be sent by then (passing it moves the
    deadline too); else the whole task must be finished by then."""

    at: datetime
    first_answer: bool
    test: bool
    seconds_left: int  # when the page was made (the page's script counts down from it)
    text: str  # "14:05 UTC", or "00:15 UTC on 6 December" when that is not today (UTC)

    @property
    def iso(self) -> str:
        """``at`` for ``<time datetime>``, to the second (rounded down, as ``text`` is)."""
        return self.at.replace(microsecond=0).isoformat().replace("+00:00", "Z")


def _no_answer_yet(page, kind: str) -> bool:
    """Whether the task of a step page (its study of ``kind``) has no answer stored: nothing
    completed and the question shown is at its first step."""
    step = page.step
    return page.n_done == 0 and step.step == steps_for(kind=kind, is_attention_check=step.is_attention)[0]


# How much later the first answer must move the deadline for the page to promise "more time":
# a task whose two windows are equal is stamped a few milliseconds apart (its deadline is read
# before its row is inserted), which no worker should be told is more time.
MORE_TIME_AT_LEAST = timedelta(minutes=1)


def task_deadline(page, *, now: datetime | None = None, study: Study | None = None,
                  test_passed: bool = False) -> Deadline | None:
    """The deadline a task page (``selectors.Page``) tells its worker, or None for a page that has
    none (consent, done, ended). The first-answer wording only while answering would move the
    deadline: no answer is stored yet and ``expires_at`` is short of the full duration from the
    start (a task whose test was passed, or whose consent came so late that both deadlines are one,
    must be finished by it, and is told so).

    A page without an assignment (the researcher's preview, ``views.preview``: pass ``study``) is
    told the deadline of a task of ``study`` started and consented to ``now``: the first-answer
    deadline until its first answer, or its passed test (``test_passed``: the page comes after the
    study's test), moves it to the full duration, as they move a worker's task."""
    if page.state not in ("step", "finish", "qualification"):
        return None
    now = (now or timezone.now()).astimezone(UTC)
    assignment = getattr(page, "assignment", None)
    if assignment is not None:
        study, started_at, expires_at = assignment.study, assignment.created_at, assignment.expires_at
    else:
        started_at = now
        waiting = page.state == "qualification" or (
            page.state == "step" and not test_passed and _no_answer_yet(page, study.kind))
        expires_at = (first_answer_deadline(study, started_at=now, consented_at=now) if waiting
                      else full_deadline(study, started_at=now))
    at = expires_at.astimezone(UTC)
    before_full = page.state != "finish" and (page.state == "qualification" or _no_answer_yet(page, study.kind)) and (
        expires_at < started_at + assignment_duration(study) - MORE_TIME_AT_LEAST)
    text = f"{at:%H:%M} UTC" + ("" if at.date() == now.date() else f" on {at.day} {at:%B}")
    return Deadline(at=at, first_answer=before_full and page.state == "step",
                    test=before_full and page.state == "qualification",
                    seconds_left=max(0, int((at - now).total_seconds())), text=text)
