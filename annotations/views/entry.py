"""The ways in (server-rendered; GET never changes state; every form carries Django's CSRF token).

- ``/w/s/<study token>/``: MTurk, Prolific or a plain link, by the study's platform;
- ``/w/l/<token>/``: a single-person link (``ParticipantLink``);
- ``/w/o/<token>/``: a shared link (``OpenLink``).

Each shows the landing page (consent) with a one-time nonce bound to the browser that loaded it
(``worker_pages.browser_key``) and the SHA-256 of the consent text it shows (what the form agrees
to, recorded on the consent's receipt); its POST takes the consent once (``services.entry.consent_take``)
and redirects to the task at ``/w/a/<assignment token>/``, setting the study cookie that proves
this browser holds that task (``worker_pages.remember_task``). Who may open a task in progress is
decided by ``services.entry.may_resume``; on Prolific, a task in progress the entry may not
resume is checked with Prolific before the refusal (``services.impostor.impostor_task_end``), on the
landing page's GET here and in the consent's POST (``services.entry.consent_take``).

A closed study (or a closed open link) refuses only what would start work: the landing page and
its consent. A task in progress still opens for whoever may resume it, and a finished task's done
page (completion code, hand-back) still shows, as before the close: closing stops recruiting,
work already started can still be submitted (``services.platforms.close.study_close``).
The plain link of a link study that has single-person links (made at any time, withdrawn or not:
``selectors.entry.plain_link_starts_tasks``) is refused the same way, with its own page: the
study takes part by personal link only, and the plain link's tasks already started go on.
"""
from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from urllib.parse import urlencode

from django.core import signing
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils import timezone
from django.utils.encoding import escape_uri_path
from django.views.decorators.http import require_http_methods

from annotations.models import Assignment, OpenLink, Participant, ParticipantLink
from annotations.platforms import handoff
from annotations.selectors import entry as selectors_entry
from annotations.selectors import task_claims
from annotations.selectors.cost import questions_per_task
from annotations.services.deadlines import assignment_duration, platform_clock_start, platform_time_run_out
from annotations.services.entry import (
    PlatformRefs,
    consent_given,
    consent_take,
    consent_text_sha256,
    finished_task_of_browser,
    link_task_done_in_browser,
    may_resume,
    moved_task,
    moved_task_started_at,
    moves_to_new_platform_assignment,
    task_in_progress,
)
from annotations.services.errors import (
    AnnotationError,
    ConsentChanged,
    NoWorkAvailable,
    PlatformAssignmentDone,
)
from annotations.services.impostor import impostor_task_end
from annotations.services.participants import (
    InvalidIdentifier,
    consent_key,
    open_link_check,
    participant_get_or_create,
    participant_holding_browser,
    participant_identified_in_browser,
    participant_link_redeem,
    participant_new_anonymous,
    participant_of_browser,
    platform_assignment_bind,
)
from annotations.views.task import task_page
from annotations.worker_pages import (
    browser_digest,
    browser_holds,
    keep_browser_key,
    located,
    message,
    remember_task,
    time_allowed,
    wants_inline,
    worker_page,
)
from lab.clientip import client_ip
from studies.models import Platform, Study

NONCE_SALT = "annotations.entry.nonce"
NONCE_MAX_AGE = 24 * 3600
CONSENT_MISSING = "Please tick the box to give your consent, or close this page."
SHA256_HEX = re.compile(r"[0-9a-f]{64}")


# --- the landing page and its one-time nonce ----------------------------------------------------

@dataclass(frozen=True)
class _PostedNonce:
    key: str
    landed_at: datetime | None  # when its landing page was first served; None on a nonce made before it was


def _nonce(request: HttpRequest, page: str) -> str:
    """A one-time form nonce bound to the landing page ``page`` (the entry and, for a platform,
    the worker and assignment ids in its URL) and to this browser (the digest of its
    ``browser_key``). Made on GET without storing anything. Its key, which the consent's receipt
    records, names this browser too (``services.participants.consent_key``). It carries, signed,
    the time the landing page was served (``timezone.now``, whole seconds rounded down), or, for
    the page shown again after its form was refused, the time its first showing carried: a
    platform task's clock counts from it (``_posted_nonce``)."""
    browser = browser_digest(request)
    posted = _posted_nonce(request, page) if request.method == "POST" else None
    landed = posted.landed_at if posted is not None and posted.landed_at is not None else timezone.now()
    return signing.dumps([page, consent_key(browser=browser), browser, int(landed.timestamp())],
                         salt=NONCE_SALT, compress=False)


def _posted_nonce(request: HttpRequest, page: str) -> _PostedNonce | None:
    """The POSTed nonce if it was made for ``page`` in this browser and is fresh, else None: a
    nonce replayed from another browser is not taken. Its landing time is read from the signed
    value only (a nonce made before it was recorded has none)."""
    try:
        made_for, key, browser, *landed = signing.loads(request.POST.get("nonce", ""), salt=NONCE_SALT,
                                                        max_age=NONCE_MAX_AGE)
    except (signing.BadSignature, ValueError, TypeError):
        return None
    if made_for != page or browser != browser_digest(request) or not (isinstance(key, str) and len(key) == 32):
        return None
    seconds = landed[0] if len(landed) == 1 else None
    if not isinstance(seconds, int) or isinstance(seconds, bool):
        return _PostedNonce(key=key, landed_at=None)
    return _PostedNonce(key=key, landed_at=datetime.fromtimestamp(seconds, tz=UTC))


def _nonce_key(request: HttpRequest, page: str) -> str | None:
    """The key of the POSTed nonce (``_posted_nonce``), else None."""
    posted = _posted_nonce(request, page)
    return posted.key if posted is not None else None


def _platform_clock(arrival: handoff.Arrival | None) -> bool:
    """Whether a task started through ``arrival`` runs on a platform's clock too (MTurk, Prolific:
    it started when the worker accepted there), not the app's alone (plain, open and single-person
    links)."""
    return arrival is not None and arrival.platform in (Platform.MTURK, Platform.PROLIFIC)


def _return_line(arrival: handoff.Arrival | None) -> str:
    """The one owner of "return the place": a worker who came from a platform (MTurk, Prolific) and
    gets no task here is asked to return it there, so it is not held unpaid until it times out.
    Links hold no platform place: nothing."""
    return f"Please return the task on {Platform(arrival.platform).label}." if _platform_clock(arrival) else ""


def _with_return_line(text: str, arrival: handoff.Arrival | None) -> str:
    line = _return_line(arrival)
    return f"{text} {line}" if line else text


def _platform_time_over(request: HttpRequest, *, study: Study, arrival: handoff.Arrival) -> HttpResponse:
    platform = Platform(arrival.platform).label
    minutes = int(assignment_duration(study).total_seconds() // 60)
    return message(request, title="Your time for this task has run out", status=403,
                   message=f"The time for this task counts from when you accepted it on {platform} and opened "
                           f"it here ({minutes} minutes in all), and too little of it is left to do the task "
                           f"(about {study.estimated_minutes_per_task:g} minutes), so no task was started here. "
                           f"{_return_line(arrival)}")


def _consent_sha256(request: HttpRequest) -> str | None:
    """The POSTed hash of the consent text the landing page showed (``consent_sha256``) if it has
    its format, 64 lowercase hexadecimal digits, else None. Whether it is the study's consent is
    the service's to decide (``services.entry.consent_take``)."""
    value = request.POST.get("consent_sha256", "")
    return value if SHA256_HEX.fullmatch(value) else None


def _arrival_params(arrival: handoff.Arrival) -> dict[str, str]:
    """The query parameters of a platform's entry as ``handoff.arrival_parse`` validated them (its
    values, under the names it reads): what the landing page's form sends back, to be parsed again.
    A plain link's arrival has none."""
    if arrival.platform == Platform.MTURK and arrival.preview:
        return {"assignmentId": handoff.MTURK_PREVIEW_ID, **({"hitId": arrival.task_id} if arrival.task_id else {})}
    if arrival.platform == Platform.MTURK:
        return {"assignmentId": arrival.assignment_id, "hitId": arrival.task_id, "workerId": arrival.worker_id,
                "turkSubmitTo": arrival.return_url}
    if arrival.platform == Platform.PROLIFIC:
        return {"PROLIFIC_PID": arrival.worker_id, "STUDY_ID": arrival.task_id, "SESSION_ID": arrival.assignment_id}
    return {}


def _form_action(request: HttpRequest, arrival: handoff.Arrival | None) -> str:
    """The landing page's form action: this page's path, with only the arrival parameters the entry
    validated (``_arrival_params``), never the rest of the query string (echoed, a 500 KB parameter
    made a 500 KB page). Links (single-person, open) take no parameters: their path alone."""
    params = _arrival_params(arrival) if arrival is not None else {}
    path = escape_uri_path(request.path)
    return f"{path}?{urlencode(params)}" if params else path


def _landing(request: HttpRequest, study: Study, *, page: str, preview: bool = False, error: str = "",
             identifier: bool = False, status: int = 200, arrival: handoff.Arrival | None = None,
             moved: Assignment | None = None, participant_id: int | None = None) -> HttpResponse:
    """The landing page and its consent form. ``moved``: the task in progress its consent will resume
    and move to the arrival's new platform assignment (``moves_to_new_platform_assignment``): the
    time stated is what is left of it, and its questions are its own. ``participant_id``: the worker
    its consent will start a task for, where the entry knows them already (a returning worker): the
    questions stated are those their task will ask, without the attention checks they answered
    before (``selectors.cost.questions_per_task``); None, a worker not known yet, is told all of them."""
    # as the task's pages count them ("Question 1 of N")
    questions = (len(task_claims(moved.pk).rows) if moved is not None
                 else questions_per_task(study=study, participant_id=participant_id))
    response = render(request, "annotations/landing.html", {
        "study": study, "preview": preview, "error": error, "action": _form_action(request, arrival),
        "nonce": _nonce(request, page), "ask_identifier": identifier,
        "consent_sha256": consent_text_sha256(study),  # of the consent text this page shows
        "questions": questions,
        # how long a worker will have once they agree (on a platform, from when they accepted there)
        "time_allowed": time_allowed(study, assignment=moved, accepted_on=Platform(arrival.platform).label
                                     if _platform_clock(arrival) else ""),
    }, status=status)
    keep_browser_key(request, response)
    return response


def _closed(request: HttpRequest, *, arrival: handoff.Arrival | None = None) -> HttpResponse:
    """A closed study's refusal; a worker who came from a platform is asked to return the place."""
    return message(request, title="Study closed", status=403, message=_with_return_line(
        "This study is not accepting work at the moment. Thank you for your interest.", arrival))


def _personal_links_only(request: HttpRequest) -> HttpResponse:
    """The plain study link of a link study that has single-person links: it starts no task
    (``selectors.entry.plain_link_starts_tasks``)."""
    return message(request, title="This study takes part by personal link only", status=403,
                   message="This general study link no longer starts tasks: the researcher now invites each "
                           "participant with a personal (single-person) link. If you were sent one, please open "
                           "that link instead. Thank you for your interest.")


def _closed_consent(request: HttpRequest, *, study: Study, page: str,
                    refuse: Callable[[HttpRequest], HttpResponse] = _closed) -> HttpResponse:
    """A consent form sent to a closed study (or link): refused (``refuse``'s page), unless it is a
    retry of a form that already gave a task before the close (its response was lost): that task,
    as a retry gets while the study is open (``services.entry.consent_given``)."""
    key = _nonce_key(request, page) if request.POST.get("consent") else None
    given = consent_given(key=key, study=study) if key else None
    return refuse(request) if given is None else _to_task(request, given, study=study)


def _to_task(request: HttpRequest, assignment: Assignment, *, study: Study) -> HttpResponse:
    """Send this browser to ``assignment``, which it is entitled to, with the cookie proving it:
    a redirect, or the task's page itself for a consent form sent by the landing page's script
    (``wants_inline``: one request fewer for every worker who starts)."""
    if wants_inline(request):
        response = located(task_page(request, assignment), reverse("annotations:assignment", args=[assignment.token]))
    else:
        response = redirect("annotations:assignment", token=assignment.token)
    remember_task(request, response, study_id=study.pk, participant_id=assignment.participant_id,
                  assignment_id=assignment.pk)
    return response


def _refused(request: HttpRequest, error: AnnotationError, *, arrival: handoff.Arrival | None = None) -> HttpResponse:
    """A task refused. No work for this worker (``NoWorkAvailable``): one who came from a platform
    is asked to return the place, which would otherwise stay held, unpaid, until it times out."""
    text = _with_return_line(error.message, arrival) if isinstance(error, NoWorkAvailable) else error.message
    return message(request, title="No task for you right now", message=text, status=error.status)


def _consent(request: HttpRequest, *, study: Study, page: str, participant: Callable[[], Participant],
             held_task_id: int | None, refs: PlatformRefs | None = None,
             completion_code: str = "", identifier: bool = False, link: ParticipantLink | None = None,
             open_link: OpenLink | None = None, arrival: handoff.Arrival | None = None,
             first_started_at: datetime | None = None, moved: Assignment | None = None,
             worker: Callable[[], int | None] = lambda: None) -> HttpResponse:
    """The landing page's POST, for every way in: take the consent once, then resume or start.
    ``held_task_id`` is the task this browser's study cookie proves it holds; ``open_link``, the
    open link the worker came through (a new participant takes one of its places with the task);
    ``arrival``, a platform's validated entry (the landing page shown again sends it back);
    ``first_started_at``, the start of the first local task of its platform assignment, if it had
    one (``selectors.entry.platform_assignment_first_start``); ``moved``, the task in progress the
    consent will move to the arrival's new platform assignment (``services.entry.moved_task``), whose
    clock the check then counts from; ``worker``, the id of the worker the entry knows the consent is
    for, if any (asked only when the page is shown again). The landing page shown again after a
    refused form says what its first showing said (``_landing``: the moved task's time left, the
    worker's own questions)."""

    def again(*, error: str, status: int) -> HttpResponse:
        return _landing(request, study, page=page, error=error, identifier=identifier, status=status,
                        arrival=arrival, moved=moved, participant_id=worker())

    if not request.POST.get("consent"):
        return again(error=CONSENT_MISSING, status=400)
    posted = _posted_nonce(request, page)
    if posted is None:
        return again(status=400, error="This page was open too long or was not loaded from this study: please "
                                       "tick the box and start again.")
    key = posted.key
    # A platform task's clock started when the worker accepted it there: the app's counts from the
    # landing page's signed time (served at or after the accept), or from the first task of the same
    # platform assignment (expired or returned since: the platform's clock did not restart), and a
    # page with less than a task's estimated time left starts none. The new task's clock starts then.
    # A task in progress that the consent moves to a new platform assignment counts from its own start.
    landed_at = (platform_clock_start(landed_at=posted.landed_at, first_started_at=first_started_at,
                                      resumed_started_at=moved_task_started_at(study=study, task=moved))
                 if _platform_clock(arrival) else None)
    if landed_at is not None and platform_time_run_out(study, landed_at=landed_at, now=timezone.now()):
        given = consent_given(key=key, study=study)  # a retry of a form that gave its task: that task
        return _platform_time_over(request, study=study, arrival=arrival) if given is None else (
            _to_task(request, given, study=study))
    consent_sha256 = _consent_sha256(request)
    if consent_sha256 is None:
        return again(status=400, error="This form did not say which consent text it agrees to (consent_sha256 "
                                       "must be the 64 lowercase hexadecimal digits the page gave): please read "
                                       "the consent, tick the box and start again.")
    try:
        assignment = consent_take(key=key, study=study, consent_sha256=consent_sha256,
                                  participant=participant, refs=refs or PlatformRefs(), held_task_id=held_task_id,
                                  completion_code=completion_code, link=link, open_link=open_link,
                                  landed_at=landed_at, client=client_ip(request))
    except (InvalidIdentifier, ConsentChanged) as error:  # the landing page again, as it reads now
        return again(error=error.message, status=error.status)
    except PlatformAssignmentDone as error:  # this platform assignment's task is finished: its done page
        return _to_task(request, error.assignment, study=study)
    except AnnotationError as error:
        return _refused(request, error, arrival=arrival)
    return _to_task(request, assignment, study=study)


# --- /w/s/<study token>/ --------------------------------------------------------------------------

@worker_page
@require_http_methods(["GET", "POST"])
def entry(request: HttpRequest, study_token: str) -> HttpResponse:
    study = handoff.study_for_token(study_token)
    if study is None:
        raise Http404("No such study.")
    try:
        arrival = handoff.arrival_parse(study=study, params=request.GET)
    except handoff.ArrivalError as error:
        return message(request, title="This link cannot be used", message=error.message, status=400)
    closed = study.status != Study.Status.OPEN
    if arrival.preview:
        if closed:
            return _closed(request)
        if request.method == "POST":
            return message(request, title="Preview", status=403,
                           message="Accept the HIT on Mechanical Turk first; a preview stores nothing.")
        return _landing(request, study, page="preview", preview=True, arrival=arrival)
    if arrival.platform == Platform.LINK:
        if not closed and not selectors_entry.plain_link_starts_tasks(study=study):
            # Single-person links were made (even if all are withdrawn since): the plain link is
            # closed to new work as a closed study is, with its own page; tasks it started go on.
            return _anonymous_entry(request, study=study, page=f"s:{study.pk}", closed=True,
                                    refuse=_personal_links_only)
        return _anonymous_entry(request, study=study, page=f"s:{study.pk}", closed=closed)
    return _platform_entry(request, study=study, arrival=arrival, closed=closed)


def _platform_entry(request: HttpRequest, *, study: Study, arrival: handoff.Arrival, closed: bool) -> HttpResponse:
    """MTurk or Prolific: the worker id and assignment id come from the platform's URL (validated,
    but unauthenticated: see ``services.entry``). In a ``closed`` study the done page and the task
    in progress still open as they do in an open one (in MTurk's frame, where cookies may be
    withheld, the assignment id is the way back); only the landing page and its consent are refused."""
    page = f"s:{study.pk}:{arrival.platform}:{arrival.worker_id}:{arrival.assignment_id}"
    refs = PlatformRefs(assignment_id=arrival.assignment_id, task_id=arrival.task_id, return_url=arrival.return_url)
    holds = browser_holds(request, study.pk)
    held = holds.assignment_id
    # The binding first: a worker's participant row is committed no later than its binding, so a
    # binding seen here has its participant seen below (read the other way round, a simultaneous
    # first entry of the same worker could commit both in between and look like another worker).
    owner = selectors_entry.platform_assignment_owner(platform=arrival.platform,
                                                      platform_assignment_id=arrival.assignment_id)
    # A consent reads with the worker the task the browser's cookie names (``moved_task``), if any.
    known = selectors_entry.participant_by_platform_id(
        platform=arrival.platform, external_id=arrival.worker_id, study=study,
        held_task_id=held if request.method == "POST" and not closed else None)
    # The worker whose own question count the landing page states (without the attention checks they
    # answered before): only to the browser that proves it worked as them (its signed study cookie).
    # The worker id in the URL is anyone's to type; told to them, the count would say whether and how
    # far that worker took part. Any other browser is told a new worker's count.
    proven = known.pk if known is not None and holds.participant_id == known.pk else None
    if owner is not None and (known is None or owner != known.pk):
        return message(request, title="This task belongs to another worker", status=403,
                       message="This platform assignment was opened by another worker account, so it cannot be "
                               "opened with yours. Open the task again from the platform.")
    if request.method == "GET":
        active = selectors_entry.active_assignment(study=study, participant=known)
        if known is not None and (active is None or active.platform_assignment_id != arrival.assignment_id):
            done = selectors_entry.task_of_platform_assignment(study=study, platform_assignment_id=arrival.assignment_id)
            if done is not None and done.status != Assignment.Status.ACTIVE:  # one task per platform assignment
                return _to_task(request, done, study=study)
        if active is not None:
            if not closed and moves_to_new_platform_assignment(active=active, held_task_id=held,
                                                               platform_assignment_id=arrival.assignment_id):
                # The platform gave this worker a new assignment (returned and accepted again):
                # consenting again in the browser that holds the task moves it (a POST, not this GET),
                # with its deadlines: the page states what is left of its time.
                return _landing(request, study, page=page, arrival=arrival, moved=active)
            if may_resume(active=active, refs=refs, held_task_id=held):
                return _to_task(request, active, study=study)
            # Not this entry's task: refused, unless Prolific shows that someone else started it with
            # this worker's id (then it is ended, and the entry goes on as if there were none).
            if not impostor_task_end(study=study, participant=known, task=active,
                                     platform_assignment_id=arrival.assignment_id, client=client_ip(request)):
                return _refused(request, task_in_progress(active))
        return _closed(request, arrival=arrival) if closed else _landing(
            request, study, page=page, arrival=arrival, participant_id=proven)
    if closed:
        return _closed_consent(request, study=study, page=page,
                               refuse=lambda request: _closed(request, arrival=arrival))

    def participant() -> Participant:
        worker = participant_get_or_create(platform=arrival.platform, external_id=arrival.worker_id)
        platform_assignment_bind(study=study, participant=worker, platform_assignment_id=arrival.assignment_id)
        return worker

    code = handoff.study_completion_code(study) if arrival.platform == Platform.PROLIFIC else ""
    # A platform assignment seen before (its binding, made before its first task) may have had a
    # task that expired or was returned: its clock started then. A first arrival has no binding yet
    # and sends no statement for it.
    first_started_at = (selectors_entry.platform_assignment_first_start(
        study=study, platform_assignment_id=arrival.assignment_id) if owner is not None else None)
    # A task in progress this browser holds, which the consent would move to this new platform
    # assignment, keeps its deadlines: the time check counts from its start (read only when the
    # browser's cookie names a task of this worker).
    moved = moved_task(participant=known, held_task_id=held, platform_assignment_id=arrival.assignment_id)
    return _consent(request, study=study, page=page, participant=participant, refs=refs, completion_code=code,
                    held_task_id=held, arrival=arrival, first_started_at=first_started_at, moved=moved,
                    worker=lambda: proven)


def _anonymous_entry(request: HttpRequest, *, study: Study, page: str, closed: bool,
                     link: OpenLink | None = None,
                     refuse: Callable[[HttpRequest], HttpResponse] = _closed) -> HttpResponse:
    """A plain study link or an open link: the participant of the browser's cookie (not of a task it
    was only handed through its single-person link: ``participant_holding_browser``), or a typed
    participant identifier (refused while the cookie's participant has a task in progress here or
    failed the study's test: ``participant_identified_in_browser``), or a new anonymous
    participant. A task in progress opens only in the browser that holds it (the cookie names the task, not only the participant). When ``closed``
    (the study, or the open link), that task still opens, and the browser whose cookie names a
    finished task of the study gets its done page instead of a landing page; nothing else (the
    page ``refuse`` makes: the study is closed, or its plain link takes no new workers)."""
    held = browser_holds(request, study.pk)
    # Not the participant of a task this browser was only handed through its single-person link.
    holder = participant_holding_browser(study=study, participant_id=held.participant_id,
                                         task_id=held.assignment_id, browser=browser_digest(request))
    if request.method == "GET":
        active = selectors_entry.active_assignment(study=study, participant=holder)
        if active is not None:
            if not may_resume(active=active, refs=PlatformRefs(), held_task_id=held.assignment_id):
                return _refused(request, task_in_progress(active))
            return _to_task(request, active, study=study)
        if closed:
            finished = finished_task_of_browser(study=study, participant_id=held.participant_id,
                                                task_id=held.assignment_id)
            return refuse(request) if finished is None else redirect("annotations:assignment", token=finished.token)
        return _landing(request, study, page=page, identifier=True,
                        participant_id=holder.pk if holder is not None else None)
    if closed:
        return _closed_consent(request, study=study, page=page, refuse=refuse)
    identifier = request.POST.get("identifier", "").strip()

    def participant() -> Participant:
        # A typed identifier is refused while the participant this browser proves holds a task
        # here, or failed the study's test (one browser, one participant at a time).
        person = (participant_identified_in_browser(study=study, identifier=identifier,
                                                    held_participant_id=held.participant_id,
                                                    held_task_id=held.assignment_id)
                  if identifier else holder)
        if link is not None:  # a closed or full link keeps no one it refuses (the place is taken with the task)
            open_link_check(link=link, participant=person or Participant())
        return person or participant_new_anonymous()

    # The worker a consent without a typed identifier is for: this browser's (a typed one is known
    # only once the consent reads it).
    return _consent(request, study=study, page=page, participant=participant, identifier=True, open_link=link,
                    completion_code=link.completion_code if link else "", held_task_id=held.assignment_id,
                    worker=lambda: holder.pk if holder is not None and not identifier else None)


# --- /w/o/<token>/ and /w/l/<token>/ -------------------------------------------------------------

@worker_page
@require_http_methods(["GET", "POST"])
def open_link_entry(request: HttpRequest, token: str) -> HttpResponse:
    link = selectors_entry.link_by_token(OpenLink, token)
    if link is None:
        raise Http404("No such link.")
    # A closed link (or study) still opens its holders' tasks in progress and done pages.
    closed = link.study.status != Study.Status.OPEN or not link.active
    return _anonymous_entry(request, study=link.study, page=f"o:{link.pk}", closed=closed, link=link)


@worker_page
@require_http_methods(["GET", "POST"])
def participant_link_entry(request: HttpRequest, token: str) -> HttpResponse:
    """A single-person link: the link is its holder's credential, so it opens its task in progress
    (the one started through it) from any browser; a finished task (and its completion code) only
    from the browser that did it. A browser that worked in the study before is recognised at the
    link's first use (``participant_link_redeem``)."""
    link = selectors_entry.link_by_token(ParticipantLink, token)
    if link is None:
        raise Http404("No such link.")
    if link.revoked:
        return message(request, title="Link withdrawn", status=410,
                       message="This link has been withdrawn by the researcher. Thank you for your interest.")
    study = link.study
    if link.participant_id:
        active = selectors_entry.link_active_task(link=link)
        if active is not None:
            return _to_task(request, active, study=study)
        finished = selectors_entry.latest_assignment(study=study, participant_id=link.participant_id, link=link)
        if finished is not None and finished.status != Assignment.Status.ACTIVE:
            held = browser_holds(request, study.pk)
            # The browser that did it, or one that started a later task of the link's participant
            # itself (it went on to another of their links), not one handed that task through its
            # link: the done page with this link's code.
            if link_task_done_in_browser(finished=finished, held_participant_id=held.participant_id,
                                         held_task_id=held.assignment_id, browser=browser_digest(request)):
                return redirect("annotations:assignment", token=finished.token)
            return message(request, title="This link was already used", status=403,
                           message="The task of this link is finished. Its completion code was shown at the end "
                                   "of the task, in the browser where it was done.")
    if study.status != Study.Status.OPEN:
        return _closed(request)
    page = f"l:{link.pk}"
    # (The link's task in progress was opened above, from any browser: the link is its credential.)
    # The browser is the cookie's participant only for a task it started itself, not one it was
    # handed through that task's link (``participant_of_browser``).
    held = browser_holds(request, study.pk)

    def worker() -> int | None:
        # The worker its consent is for: the link's, or, at its first use, the one this browser proves
        # it worked as in the study (``participant_link_redeem`` decides the same; no read without a cookie).
        if link.participant_id is not None:
            return link.participant_id
        proven = participant_of_browser(study=study, participant_id=held.participant_id,
                                        task_id=held.assignment_id, browser=browser_digest(request))
        return proven.pk if proven is not None else None

    if request.method == "GET":
        return _landing(request, study, page=page, participant_id=worker())
    return _consent(request, study=study, page=page, completion_code=link.completion_code, held_task_id=None,
                    worker=worker, link=link, participant=lambda: participant_link_redeem(
                        link=link, held_participant_id=held.participant_id, held_task_id=held.assignment_id,
                        browser=browser_digest(request)))
