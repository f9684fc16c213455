"""Worker pages (server-rendered, POST-redirect-GET). Thin: parse, call a service or selector,
render. GET never changes state; every form carries Django's CSRF token.

Entry points (what a platform links to):
- ``/w/s/<study token>/``: MTurk, Prolific or a plain link, by the study's platform;
- ``/w/l/<token>/``: a single-person link (``ParticipantLink``);
- ``/w/o/<token>/``: a shared link (``OpenLink``).
Then the task lives at ``/w/a/<assignment token>/`` (unguessable; the same URL resumes).
"""
from __future__ import annotations

import functools

from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.clickjacking import xframe_options_exempt
from django.views.decorators.http import require_GET, require_http_methods, require_POST

from annotations import selectors
from annotations.forms import AnswerForm, qualification_answers
from annotations.models import Assignment, Participant
from annotations.platforms import handoff
from annotations.services.answers import annotation_submit, assignment_submit
from annotations.services.assignment import assignment_consent, assignment_start
from annotations.services.errors import AnnotationError, InvalidAnswer
from annotations.services.participants import (
    open_link_join,
    participant_get_or_create,
    participant_link_redeem,
    participant_new_anonymous,
)
from annotations.services.qualification import qualification_submit
from annotations.services.release import assignment_return
from studies.models import Platform, Study

COOKIE_SALT = "annotations.worker"
COOKIE_MAX_AGE = 60 * 24 * 3600
FRAME_ANCESTORS = "frame-ancestors 'self' https://www.mturk.com https://workersandbox.mturk.com"


def worker_page(view):
    """Headers of every worker page: MTurk may frame it (nobody else), nothing is cached (a
    back button must not show an old form), and the task token never leaks as a referrer to
    another site (same-origin: the CSRF origin check still sees our own origin)."""

    @functools.wraps(view)
    def wrapped(request, *args, **kwargs):
        response = view(request, *args, **kwargs)
        response["Content-Security-Policy"] = FRAME_ANCESTORS
        response["Cache-Control"] = "no-store"
        response["Referrer-Policy"] = "same-origin"
        return response

    return xframe_options_exempt(wrapped)


def _message(request: HttpRequest, *, title: str, message: str, status: int = 200,
             assignment: Assignment | None = None) -> HttpResponse:
    return render(request, "annotations/message.html",
                  {"title": title, "message": message, "assignment": assignment}, status=status)


def _cookie_name(study_id: int) -> str:
    return f"rl_w{study_id}"


def _cookie_participant(request: HttpRequest, study_id: int) -> str:
    return request.get_signed_cookie(_cookie_name(study_id), default="", salt=COOKIE_SALT, max_age=COOKIE_MAX_AGE)


def _closed(request: HttpRequest) -> HttpResponse:
    return _message(request, title="Study closed",
                    message="This study is not accepting work at the moment. Thank you for your interest.",
                    status=403)


def _landing(request: HttpRequest, study: Study, *, preview: bool = False, error: str = "",
             status: int = 200) -> HttpResponse:
    return render(request, "annotations/landing.html", {
        "study": study, "preview": preview, "error": error, "action": request.get_full_path(),
    }, status=status)


def _start(request: HttpRequest, *, study: Study, participant: Participant, arrival: handoff.Arrival,
           completion_code: str = "", remember: bool = False) -> HttpResponse:
    try:
        assignment = assignment_start(
            study=study,
            participant=participant,
            platform_assignment_id=arrival.assignment_id,
            platform_task_id=arrival.task_id,
            return_url=arrival.return_url,
            completion_code=completion_code,
            consented=True,
        )
        response = redirect("annotations:assignment", token=assignment.token)
    except AnnotationError as error:
        response = _message(request, title="No task for you right now", message=error.message, status=error.status)
    if remember:
        response.set_signed_cookie(
            _cookie_name(study.pk), participant.external_id, salt=COOKIE_SALT, max_age=COOKIE_MAX_AGE,
            httponly=True, samesite="Lax", secure=request.is_secure(),
        )
    return response


def _resume(study_id: int, platform: str, external_id: str) -> HttpResponse | None:
    if not external_id:
        return None
    active = selectors.active_assignment_for(study_id=study_id, platform=platform, external_id=external_id)
    return redirect("annotations:assignment", token=active.token) if active else None


@worker_page
@require_http_methods(["GET", "POST"])
def entry(request: HttpRequest, study_token: str) -> HttpResponse:
    study_id = handoff.study_id_from_token(study_token)
    study = Study.objects.filter(pk=study_id).first() if study_id else None
    if study is None:
        raise Http404("No such study.")
    try:
        arrival = handoff.arrival_parse(platform=study.platform, params=request.GET)
    except handoff.ArrivalError as error:
        return _message(request, title="This link is incomplete", message=error.message, status=400)
    if study.status != Study.Status.OPEN:
        return _closed(request)
    if arrival.preview:
        if request.method == "POST":
            return _message(request, title="Preview", status=403,
                            message="Accept the HIT on Mechanical Turk first; a preview stores nothing.")
        return _landing(request, study, preview=True)
    link = arrival.platform == Platform.LINK
    external_id = _cookie_participant(request, study.pk) if link else arrival.worker_id
    if request.method == "GET":
        return _resume(study.pk, arrival.platform, external_id) or _landing(request, study)
    if not request.POST.get("consent"):
        return _landing(request, study, error="Please tick the box to give your consent, or close this page.",
                        status=400)
    if external_id:
        participant = participant_get_or_create(platform=arrival.platform, external_id=external_id)
    else:
        participant = participant_new_anonymous()
    code = handoff.study_completion_code(study) if arrival.platform == Platform.PROLIFIC else ""
    return _start(request, study=study, participant=participant, arrival=arrival, completion_code=code, remember=link)


@worker_page
@require_http_methods(["GET", "POST"])
def participant_link_entry(request: HttpRequest, token: str) -> HttpResponse:
    from annotations.models.platforms import ParticipantLink

    link = ParticipantLink.objects.select_related("study").filter(token=token).first() if len(token) <= 64 else None
    if link is None or link.revoked:
        raise Http404("No such link.")
    study = link.study
    if link.participant_id:
        latest = Assignment.objects.filter(study_id=study.pk, participant_id=link.participant_id).exclude(
            status__in=[Assignment.Status.EXPIRED, Assignment.Status.RETURNED]
        ).order_by("-created_at").only("token").first()
        if latest is not None:  # single use: the same link shows that task (or its code) again
            return redirect("annotations:assignment", token=latest.token)
    if study.status != Study.Status.OPEN:
        return _closed(request)
    if request.method == "GET":
        return _landing(request, study)
    if not request.POST.get("consent"):
        return _landing(request, study, error="Please tick the box to give your consent, or close this page.",
                        status=400)
    try:
        participant = participant_link_redeem(link=link)
    except AnnotationError as error:
        return _message(request, title="Link not available", message=error.message, status=error.status)
    return _start(request, study=study, participant=participant,
                  arrival=handoff.Arrival(platform=Platform.LINK), completion_code=link.completion_code)


@worker_page
@require_http_methods(["GET", "POST"])
def open_link_entry(request: HttpRequest, token: str) -> HttpResponse:
    from annotations.models.platforms import OpenLink

    link = OpenLink.objects.select_related("study").filter(token=token).first() if len(token) <= 64 else None
    if link is None:
        raise Http404("No such link.")
    study = link.study
    if study.status != Study.Status.OPEN or not link.active:
        return _closed(request)
    external_id = _cookie_participant(request, study.pk)
    if request.method == "GET":
        return _resume(study.pk, Platform.LINK, external_id) or _landing(request, study)
    if not request.POST.get("consent"):
        return _landing(request, study, error="Please tick the box to give your consent, or close this page.",
                        status=400)
    try:
        if external_id:
            participant = participant_get_or_create(platform=Platform.LINK, external_id=external_id)
        else:
            participant = open_link_join(link=link)
    except AnnotationError as error:
        return _message(request, title="Link not available", message=error.message, status=error.status)
    return _start(request, study=study, participant=participant,
                  arrival=handoff.Arrival(platform=Platform.LINK),
                  completion_code=link.completion_code, remember=True)


# --- the task -----------------------------------------------------------------------------------

def _assignment_or_404(token: str) -> Assignment:
    assignment = selectors.assignment_by_token(token)
    if assignment is None:
        raise Http404("No such task.")
    return assignment


def _render_page(request: HttpRequest, assignment: Assignment, *, error: str = "", status: int = 200) -> HttpResponse:
    page = selectors.assignment_page(assignment=assignment)
    context = {"page": page, "assignment": assignment, "study": assignment.study, "error": error}
    if page.state == "submitted":
        context["handback"] = handoff.handback_for(assignment)
    template = {
        "consent": "annotations/consent.html",
        "qualification": "annotations/qualification.html",
        "step": "annotations/step.html",
        "finish": "annotations/finish.html",
        "submitted": "annotations/done.html",
    }.get(page.state, "annotations/ended.html")
    return render(request, template, context, status=status)


def _refused(request: HttpRequest, assignment: Assignment, error: AnnotationError) -> HttpResponse:
    return _message(request, title="Not saved", message=error.message, status=error.status, assignment=assignment)


@worker_page
@require_GET
def assignment_view(request: HttpRequest, token: str) -> HttpResponse:
    return _render_page(request, _assignment_or_404(token))


@worker_page
@require_POST
def consent_view(request: HttpRequest, token: str) -> HttpResponse:
    assignment = _assignment_or_404(token)
    if not request.POST.get("consent"):
        return _render_page(request, assignment, error="Please tick the box to give your consent.", status=400)
    try:
        assignment_consent(assignment=assignment)
    except AnnotationError as error:
        return _refused(request, assignment, error)
    return redirect("annotations:assignment", token=token)


@worker_page
@require_POST
def qualification_view(request: HttpRequest, token: str) -> HttpResponse:
    assignment = _assignment_or_404(token)
    try:
        qualification_submit(assignment=assignment, answers=qualification_answers(request.POST))
    except InvalidAnswer as error:
        return _render_page(request, assignment, error=error.message, status=400)
    except AnnotationError as error:
        return _refused(request, assignment, error)
    return redirect("annotations:assignment", token=token)


@worker_page
@require_POST
def answer_view(request: HttpRequest, token: str) -> HttpResponse:
    form = AnswerForm(request.POST)
    if not form.is_valid():
        return _render_page(request, _assignment_or_404(token),
                            error="The answer form was incomplete; please answer again.", status=400)
    data = form.cleaned_data
    # The assignment and the claim in one query (the claim's assignment is normally this one).
    assignment, claim = selectors.claim_for_answer(token=token, claim_id=data["claim"])
    if assignment is None:
        raise Http404("No such task.")
    if claim is None:
        raise Http404("No such question.")
    shown_at = selectors.shown_at_from_token(data["shown"], claim_id=claim.pk, step=data["step"])
    try:
        annotation_submit(
            assignment=assignment, claim=claim, step=data["step"], answer=data["answer"],
            payload=form.payload(), shown_at=shown_at,
        )
    except InvalidAnswer as error:
        if claim.assignment_id != assignment.pk:
            return _refused(request, assignment, error)
        return _render_page(request, assignment, error=error.message, status=400)
    except AnnotationError as error:
        return _refused(request, assignment, error)
    return redirect("annotations:assignment", token=token)


@worker_page
@require_POST
def submit_view(request: HttpRequest, token: str) -> HttpResponse:
    assignment = _assignment_or_404(token)
    try:
        assignment_submit(assignment=assignment)
    except AnnotationError as error:
        return _refused(request, assignment, error)
    handback = handoff.handback_for(assignment)
    if handback.kind == "redirect":
        return redirect(handback.url)
    return redirect("annotations:assignment", token=token)


@worker_page
@require_POST
def leave_view(request: HttpRequest, token: str) -> HttpResponse:
    assignment = _assignment_or_404(token)
    assignment_return(assignment=assignment)
    return redirect("annotations:assignment", token=token)

