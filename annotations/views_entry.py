"""The ways in (server-rendered; GET never changes state; every form carries Django's CSRF token).

- ``/w/s/<study token>/``: MTurk, Prolific or a plain link, by the study's platform;
- ``/w/l/<token>/``: a single-person link (``ParticipantLink``);
- ``/w/o/<token>/``: a shared link (``OpenLink``).

Each shows the landing page (consent) with a one-time nonce; its POST takes the consent once
(``services.entry.consent_receipt_take``) and redirects to the task at ``/w/a/<assignment
token>/``. Who may open a task in progress is decided by ``services.entry.may_resume``.
"""
from __future__ import annotations

import secrets
from collections.abc import Callable

from django.core import signing
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_http_methods

from annotations import selectors_entry
from annotations.models import Assignment, OpenLink, Participant, ParticipantLink
from annotations.platforms import handoff
from annotations.selectors_cost import questions_per_task
from annotations.services.entry import (
    PlatformRefs,
    assignment_enter,
    consent_receipt_take,
    may_resume,
    task_in_progress,
)
from annotations.services.errors import AnnotationError
from annotations.services.participants import (
    InvalidIdentifier,
    open_link_join,
    participant_get_or_create,
    participant_identified,
    participant_link_redeem,
    participant_new_anonymous,
    platform_assignment_bind,
)
from annotations.worker_pages import cookie_participant_id, message, remember_participant, worker_page
from studies.models import Platform, Study

NONCE_SALT = "annotations.entry.nonce"
NONCE_MAX_AGE = 24 * 3600
CONSENT_MISSING = "Please tick the box to give your consent, or close this page."


# --- the landing page and its one-time nonce ----------------------------------------------------

def _nonce(page: str) -> str:
    """A one-time form nonce bound to the landing page ``page`` (the entry and, for a platform,
    the worker and assignment ids in its URL). Made on GET without storing anything."""
    return signing.dumps([page, secrets.token_hex(16)], salt=NONCE_SALT, compress=False)


def _nonce_key(request: HttpRequest, page: str) -> str | None:
    """The key of the POSTed nonce if it was made for ``page`` and is fresh, else None."""
    try:
        made_for, key = signing.loads(request.POST.get("nonce", ""), salt=NONCE_SALT, max_age=NONCE_MAX_AGE)
    except (signing.BadSignature, ValueError, TypeError):
        return None
    return key if made_for == page and isinstance(key, str) and len(key) == 32 else None


def _landing(request: HttpRequest, study: Study, *, page: str, preview: bool = False, error: str = "",
             identifier: bool = False, status: int = 200) -> HttpResponse:
    return render(request, "annotations/landing.html", {
        "study": study, "preview": preview, "error": error, "action": request.get_full_path(),
        "nonce": _nonce(page), "ask_identifier": identifier,
        "questions": questions_per_task(study=study),  # as the task's pages count them ("Question 1 of N")
    }, status=status)


def _closed(request: HttpRequest) -> HttpResponse:
    return message(request, title="Study closed", status=403,
                   message="This study is not accepting work at the moment. Thank you for your interest.")


def _to_task(request: HttpRequest, assignment: Assignment, *, study: Study, participant_id: int) -> HttpResponse:
    response = redirect("annotations:assignment", token=assignment.token)
    remember_participant(request, response, study_id=study.pk, participant_id=participant_id)
    return response


def _refused(request: HttpRequest, error: AnnotationError) -> HttpResponse:
    return message(request, title="No task for you right now", message=error.message, status=error.status)


def _consent(request: HttpRequest, *, study: Study, page: str, participant: Callable[[], Participant],
             trusted: Callable[[Participant], bool], refs: PlatformRefs | None = None,
             completion_code: str = "", identifier: bool = False) -> HttpResponse:
    """The landing page's POST, for every way in: take the consent once, then resume or start."""
    if not request.POST.get("consent"):
        return _landing(request, study, page=page, error=CONSENT_MISSING, identifier=identifier, status=400)
    key = _nonce_key(request, page)
    if key is None:
        return _landing(request, study, page=page, identifier=identifier, status=400,
                        error="This page was open too long or was not loaded from this study: please tick the "
                              "box and start again.")
    try:
        receipt, fresh = consent_receipt_take(key=key, study=study, participant=participant)
        if not fresh and receipt.assignment_id:  # the same form again: the same task
            return _to_task(request, receipt.assignment, study=study, participant_id=receipt.participant_id)
        assignment = assignment_enter(
            study=study, participant=receipt.participant, refs=refs or PlatformRefs(), completion_code=completion_code,
            trusted=not fresh or trusted(receipt.participant), receipt=receipt,
        )
    except InvalidIdentifier as error:
        return _landing(request, study, page=page, error=error.message, identifier=identifier, status=400)
    except AnnotationError as error:
        return _refused(request, error)
    return _to_task(request, assignment, study=study, participant_id=receipt.participant_id)


# --- /w/s/<study token>/ --------------------------------------------------------------------------

@worker_page
@require_http_methods(["GET", "POST"])
def entry(request: HttpRequest, study_token: str) -> HttpResponse:
    study_id = handoff.study_id_from_token(study_token)
    study = Study.objects.filter(pk=study_id).first() if study_id else None
    if study is None:
        raise Http404("No such study.")
    try:
        arrival = handoff.arrival_parse(study=study, params=request.GET)
    except handoff.ArrivalError as error:
        return message(request, title="This link cannot be used", message=error.message, status=400)
    if study.status != Study.Status.OPEN:
        return _closed(request)
    if arrival.preview:
        if request.method == "POST":
            return message(request, title="Preview", status=403,
                           message="Accept the HIT on Mechanical Turk first; a preview stores nothing.")
        return _landing(request, study, page="preview", preview=True)
    if arrival.platform == Platform.LINK:
        return _anonymous_entry(request, study=study, page=f"s:{study.pk}")
    return _platform_entry(request, study=study, arrival=arrival)


def _platform_entry(request: HttpRequest, *, study: Study, arrival: handoff.Arrival) -> HttpResponse:
    """MTurk or Prolific: the worker id and assignment id come from the platform's URL (validated,
    but unauthenticated: see ``services.entry``)."""
    page = f"s:{study.pk}:{arrival.platform}:{arrival.worker_id}:{arrival.assignment_id}"
    refs = PlatformRefs(assignment_id=arrival.assignment_id, task_id=arrival.task_id, return_url=arrival.return_url)
    held = cookie_participant_id(request, study.pk)
    known = selectors_entry.participant_by_platform_id(platform=arrival.platform, external_id=arrival.worker_id)
    owner = selectors_entry.platform_assignment_owner(platform=arrival.platform,
                                                      platform_assignment_id=arrival.assignment_id)
    if owner is not None and (known is None or owner != known.pk):
        return message(request, title="This task belongs to another worker", status=403,
                       message="This platform assignment was opened by another worker account, so it cannot be "
                               "opened with yours. Open the task again from the platform.")
    if request.method == "GET":
        active = selectors_entry.active_assignment(study=study, participant=known)
        if active is not None:
            trusted = held == known.pk
            if trusted and arrival.assignment_id != active.platform_assignment_id:
                # The platform gave this worker a new assignment (returned and accepted again):
                # consenting again moves the task to it (a POST, not this GET).
                return _landing(request, study, page=page)
            if not may_resume(active=active, refs=refs, trusted=trusted):
                return _refused(request, task_in_progress(active))
            return _to_task(request, active, study=study, participant_id=known.pk)
        return _landing(request, study, page=page)

    def participant() -> Participant:
        worker = participant_get_or_create(platform=arrival.platform, external_id=arrival.worker_id)
        platform_assignment_bind(study=study, participant=worker, platform_assignment_id=arrival.assignment_id)
        return worker

    code = handoff.study_completion_code(study) if arrival.platform == Platform.PROLIFIC else ""
    return _consent(request, study=study, page=page, participant=participant, refs=refs, completion_code=code,
                    trusted=lambda worker: held == worker.pk)


def _anonymous_entry(request: HttpRequest, *, study: Study, page: str, link: OpenLink | None = None) -> HttpResponse:
    """A plain study link or an open link: the browser's cookie, or a typed participant identifier,
    or a new anonymous participant."""
    held = cookie_participant_id(request, study.pk)
    holder = Participant.objects.filter(pk=held, platform=Platform.LINK).first() if held else None
    if request.method == "GET":
        active = selectors_entry.active_assignment(study=study, participant=holder)
        if active is not None:
            return _to_task(request, active, study=study, participant_id=holder.pk)
        return _landing(request, study, page=page, identifier=True)
    identifier = request.POST.get("identifier", "").strip()

    def participant() -> Participant:
        if identifier:
            person = participant_identified(identifier=identifier)
        else:
            person = holder or participant_new_anonymous()
        if link is not None:
            open_link_join(link=link, participant=person)
        return person

    return _consent(request, study=study, page=page, participant=participant, identifier=True,
                    completion_code=link.completion_code if link else "",
                    trusted=lambda person: holder is not None and holder.pk == person.pk)


# --- /w/o/<token>/ and /w/l/<token>/ -------------------------------------------------------------

@worker_page
@require_http_methods(["GET", "POST"])
def open_link_entry(request: HttpRequest, token: str) -> HttpResponse:
    link = selectors_entry.link_by_token(OpenLink, token)
    if link is None:
        raise Http404("No such link.")
    if link.study.status != Study.Status.OPEN or not link.active:
        return _closed(request)
    return _anonymous_entry(request, study=link.study, page=f"o:{link.pk}", link=link)


@worker_page
@require_http_methods(["GET", "POST"])
def participant_link_entry(request: HttpRequest, token: str) -> HttpResponse:
    """A single-person link: the link is its holder's credential, so it opens the holder's task in
    progress from any browser; a finished task (and its completion code) only from the browser
    that did it."""
    link = selectors_entry.link_by_token(ParticipantLink, token)
    if link is None:
        raise Http404("No such link.")
    if link.revoked:
        return message(request, title="Link withdrawn", status=410,
                       message="This link has been withdrawn by the researcher. Thank you for your interest.")
    study = link.study
    if link.participant_id:
        active = selectors_entry.active_assignment(study=study, participant=link.participant)
        if active is not None:
            return _to_task(request, active, study=study, participant_id=link.participant_id)
        finished = selectors_entry.latest_assignment(study=study, participant_id=link.participant_id)
        if finished is not None and finished.status != Assignment.Status.ACTIVE:
            if cookie_participant_id(request, study.pk) == link.participant_id:
                return redirect("annotations:assignment", token=finished.token)
            return message(request, title="This link was already used", status=403,
                           message="The task of this link is finished. Its completion code was shown at the end "
                                   "of the task, in the browser where it was done.")
    if study.status != Study.Status.OPEN:
        return _closed(request)
    page = f"l:{link.pk}"
    if request.method == "GET":
        return _landing(request, study, page=page)
    return _consent(request, study=study, page=page, participant=lambda: participant_link_redeem(link=link),
                    completion_code=link.completion_code, trusted=lambda person: True)
