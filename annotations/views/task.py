"""The task pages under ``/w/a/<assignment token>/`` (server-rendered, POST-redirect-GET; a form
sent by the page's script is answered with the next page instead, ``worker_pages.wants_inline``). Thin:
parse, call a service or selector, render. GET never changes state; every form carries Django's
CSRF token. The token is unguessable and is the task's only key: whoever holds it (the browser
the entry page redirected) works on the task; the ways in are in ``annotations.views.entry``.
"""
from __future__ import annotations

from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_GET, require_POST

from annotations import selectors
from annotations.forms import AnswerForm, qualification_answers
from annotations.models import Assignment
from annotations.platforms import handoff
from annotations.services.answers import annotation_submit_with_task, assignment_submit
from annotations.services.assignment import assignment_consent
from annotations.services.errors import AnnotationError, AssignmentNotActive, InvalidAnswer
from annotations.services.qualification import qualification_submit
from annotations.services.release import assignment_return
from annotations.worker_pages import message, task_deadline, time_allowed, wants_inline, worker_page

# --- the task -----------------------------------------------------------------------------------

def _assignment_or_404(token: str) -> Assignment:
    assignment = selectors.assignment_by_token(token)
    if assignment is None:
        raise Http404("No such task.")
    return assignment


def task_page(request: HttpRequest, assignment: Assignment, *, error: str = "", status: int = 200,
              claims: selectors.TaskClaims | None = None) -> HttpResponse:
    """The task's page as its address shows it now (``selectors.assignment_page``; ``claims``: the
    task's claims as an answer just left them), with the deadline its worker is told (the time
    they will have on the consent page, when the task must get its next answer on the others)."""
    page = selectors.assignment_page(assignment=assignment, claims=claims)
    context = {"page": page, "assignment": assignment, "study": assignment.study, "error": error,
               "deadline": task_deadline(page)}
    if page.state == "submitted":
        context["handback"] = handoff.handback_for(assignment)
    elif page.state == "consent":
        context["time_allowed"] = time_allowed(assignment.study, assignment=assignment)
    template = {
        "consent": "annotations/consent.html",
        "qualification": "annotations/qualification.html",
        "step": "annotations/step.html",
        "finish": "annotations/finish.html",
        "submitted": "annotations/done.html",
    }.get(page.state, "annotations/ended.html")
    return render(request, template, context, status=status)


def _refused(request: HttpRequest, assignment: Assignment, error: AnnotationError) -> HttpResponse:
    """The refusal's message; for a task the researcher ended meanwhile (a block), its page, which
    says so and asks the worker to return it on their platform (never "already returned")."""
    if isinstance(error, AssignmentNotActive):
        current = selectors.assignment_by_token(assignment.token)
        if current is not None and selectors.assignment_page(assignment=current).state == "ended_by_researcher":
            return task_page(request, current, status=error.status)
    return message(request, title="Not saved", message=error.message, status=error.status, assignment=assignment)


@worker_page
@require_GET
def assignment_view(request: HttpRequest, token: str) -> HttpResponse:
    return task_page(request, _assignment_or_404(token))


@worker_page
@require_POST
def consent_view(request: HttpRequest, token: str) -> HttpResponse:
    assignment = _assignment_or_404(token)
    if not request.POST.get("consent"):
        return task_page(request, assignment, error="Please tick the box to give your consent.", status=400)
    try:
        assignment_consent(assignment=assignment)
    except AnnotationError as error:
        return _refused(request, assignment, error)
    return _next(request, assignment)


def _next(request: HttpRequest, assignment: Assignment, *, claims: selectors.TaskClaims | None = None) -> HttpResponse:
    """After a form of the task page: its next page, as the form's sender takes it."""
    if wants_inline(request):
        return task_page(request, assignment, claims=claims)
    return redirect("annotations:assignment", token=assignment.token)


@worker_page
@require_POST
def qualification_view(request: HttpRequest, token: str) -> HttpResponse:
    assignment = _assignment_or_404(token)
    try:
        qualification_submit(assignment=assignment, answers=qualification_answers(request.POST))
    except InvalidAnswer as error:
        return task_page(request, assignment, error=error.message, status=400)
    except AnnotationError as error:
        return _refused(request, assignment, error)
    return redirect("annotations:assignment", token=token)


@worker_page
@require_POST
def answer_view(request: HttpRequest, token: str) -> HttpResponse:
    form = AnswerForm(request.POST)
    if not form.is_valid():
        return task_page(request, _assignment_or_404(token),
                         error=f"The answer form was not valid ({form.problems()}); please answer again.", status=400)
    data = form.cleaned_data
    # The assignment and the claim in one query (the claim's assignment is normally this one).
    assignment, claim = selectors.claim_for_answer(token=token, claim_id=data["claim"])
    if assignment is None:
        raise Http404("No such task.")
    if claim is None or claim.assignment_id != assignment.pk:
        # Another task's question is answered as a missing one: nothing tells the two apart, so
        # no id can be probed (the service refuses a foreign claim in any case: ``ForeignClaim``).
        raise Http404("No such question.")
    try:
        submitted = annotation_submit_with_task(
            assignment=assignment, claim=claim, step=data["step"], answer=data["answer"],
            payload=form.payload(), shown_token=data["shown"],  # the page's: a new answer needs it
        )
    except InvalidAnswer as error:
        return task_page(request, assignment, error=error.message, status=400)
    except AnnotationError as error:
        return _refused(request, assignment, error)
    return _next(request, assignment, claims=submitted.task)


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
    try:
        assignment_return(assignment=assignment)
    except AnnotationError as error:  # the task is gone (``TaskEnded``): its worker withdrew meanwhile
        return _refused(request, assignment, error)
    return redirect("annotations:assignment", token=token)

