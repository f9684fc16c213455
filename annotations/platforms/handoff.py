"""How a worker arrives from a platform and how the end of a task hands them back.

This is the one place that knows the platforms' URL conventions; views and services ask it.

Arrival (query string of the entry URL ``/w/s/<study token>/``):

- MTurk ExternalQuestion: ``assignmentId``, ``hitId``, ``workerId``, ``turkSubmitTo``. While the
  worker only previews the HIT, ``assignmentId=ASSIGNMENT_ID_NOT_AVAILABLE`` and there is no
  ``workerId``: the page is read-only and nothing is stored.
- Prolific: ``PROLIFIC_PID``, ``STUDY_ID``, ``SESSION_ID``.
- Plain link: nothing; the browser keeps its participant and the task it holds in a signed
  cookie, so the same browser resumes its task (and no other browser does). Single-person links (``/w/l/<token>/``) and open links
  (``/w/o/<token>/``) are the platforms' ``ParticipantLink`` / ``OpenLink`` rows.

``arrival_parse`` checks each id against the platform's documented format (below) and refuses
anything else, then that the platform's task named (MTurk ``hitId``, Prolific ``STUDY_ID``) is
one the study was published as; these ids are unauthenticated all the same (anyone can type them
into a URL), so ``annotations.services.entry`` decides who may open which task.

Hand-back at the end:

- MTurk: the browser POSTs a form to ``/mturk/externalSubmit`` on www.mturk.com or
  workersandbox.mturk.com, the one ``turkSubmitTo`` names (the address is never built from the
  parameter's text), with ``assignmentId`` (plus ``completionCode``; MTurk wants at least one
  answer field).
- Prolific: a redirect to ``https://app.prolific.com/submissions/complete?cc=<code>``; the code is
  the study's (``study_completion_code``), the one configured when publishing.
- Link: the completion code on screen.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from urllib.parse import urlencode

from django.conf import settings
from django.urls import reverse

from annotations.models.platforms import Publication
from annotations.platforms import mturk, prolific
from annotations.selectors.entry import study_for_entry
from annotations.selectors.platforms import study_platform_task_ids
from studies.models import Platform, Study
from studies.services.studies import study_for_previous_release_token, study_public_ids

MTURK_PREVIEW_ID = "ASSIGNMENT_ID_NOT_AVAILABLE"
PROLIFIC_COMPLETE_URL = "https://app.prolific.com/submissions/complete"


class ArrivalError(Exception):
    """The entry URL lacks what its platform must send. ``message`` says what is missing."""

    def __init__(self, message: str):
        super().__init__(message)
        self.message = message


@dataclass(frozen=True)
class Arrival:
    platform: str
    worker_id: str = ""
    assignment_id: str = ""
    task_id: str = ""
    return_url: str = ""
    preview: bool = False
    completion_code: str = ""


@dataclass(frozen=True)
class Handback:
    """What the finished page does: ``form_post`` (MTurk), ``redirect`` (Prolific) or ``code``."""

    kind: str
    url: str = ""
    fields: dict = field(default_factory=dict)
    code: str = ""


# --- study tokens -------------------------------------------------------------------------------
# Both are stored on the study (``Study.entry_token``, ``Study.completion_code``), made once when
# it is made and never derived from ``SECRET_KEY``: rotating the key or moving the installation
# keeps every entry URL and code already sent to a platform or shared. Studies made before they
# were stored keep the values once derived from the key (studies migration 0020).

def study_token(study_id: int) -> str:
    """The public, unguessable token of the study's entry URL (``/w/s/<token>/``)."""
    return study_public_ids(study=Study.objects.get(pk=study_id)).entry_token


def study_for_token(token: str) -> Study | None:
    """The study whose entry URL ``token`` is (None for any other token): ``study_for_entry``. A
    token no study stores may be the key-derived link the release before stored tokens gave a study
    it inserted while a deploy ran (``study_for_previous_release_token`` stores it then); only then,
    on a miss, is more than the one statement sent."""
    study = study_for_entry(entry_token=token)
    if study is None and ":" in token and study_for_previous_release_token(token) is not None:
        study = study_for_entry(entry_token=token)
    return study


def study_completion_code(study) -> str:
    """The study-wide completion code (Prolific checks one code per study).

    A code stored on the study's Prolific publication (``plan["completion_code"]``) wins;
    otherwise the study's own stored code (``Study.completion_code``), which the publisher must
    configure on Prolific."""
    publication = (
        Publication.objects.filter(study_id=study.pk, platform=Platform.PROLIFIC, dry_run=False)
        .order_by("-created_at")
        .first()
    )
    if publication and (publication.plan or {}).get("completion_code"):
        return str(publication.plan["completion_code"])
    return study_public_ids(study=study).completion_code


def public_url(path: str) -> str:
    return f"{settings.RL_PUBLIC_URL}{path}"


def study_entry_url(study, *, platform: str | None = None) -> str:
    """The absolute URL a platform sends workers to. For Prolific, the query string carries
    Prolific's placeholders, as Prolific expects in the study URL."""
    url = public_url(reverse("annotations:entry", args=[study_public_ids(study=study).entry_token]))
    platform = platform or study.platform
    if platform == Platform.PROLIFIC:
        url += "?PROLIFIC_PID={{%PROLIFIC_PID%}}&STUDY_ID={{%STUDY_ID%}}&SESSION_ID={{%SESSION_ID%}}"
    return url


# --- arrival ------------------------------------------------------------------------------------

# The platforms' documented id formats, owned by their modules (which check them again on every
# request): MTurk's ``EntityId`` (HITId, AssignmentId) and ``CustomerId`` (WorkerId); Prolific's
# 24-character hexadecimal object ids. Anything else is refused before it is stored or sent.
MTURK_ENTITY_ID = mturk.ENTITY_ID
MTURK_WORKER_ID = mturk.WORKER_ID
PROLIFIC_ID = prolific.PROLIFIC_ID
# Where MTurk sends a finished HIT back to, chosen by ``turkSubmitTo`` but never built from its
# text: the parameter only selects one of these fixed form actions.
MTURK_SUBMIT_URLS = {
    "https://www.mturk.com": "https://www.mturk.com/mturk/externalSubmit",
    "https://workersandbox.mturk.com": "https://workersandbox.mturk.com/mturk/externalSubmit",
}


def _param(params, name: str) -> str:
    """The parameter's value exactly as sent (an absent parameter is empty): the formats below
    decide, and nothing is trimmed or repaired first."""
    value = params.get(name)
    return value if isinstance(value, str) else ""


def _id(params, name: str, pattern: re.Pattern, *, what: str, required: bool = True) -> str:
    value = _param(params, name)
    if not value:
        if required:
            raise ArrivalError(f"The link lacks {name} ({what}): open the task again from the platform.")
        return ""
    if not pattern.fullmatch(value):
        raise ArrivalError(
            f"The parameter {name} is not a valid {what}. Open the task again from the platform, "
            "without changing its address."
        )
    return value


def _prolific_id(params, name: str, *, what: str) -> str:
    value = _param(params, name)
    if value.startswith("{{%"):
        raise ArrivalError(
            f"{name} is still Prolific's placeholder: open this study from Prolific, not from its settings page."
        )
    # Object ids are written in lowercase; an uppercase copy is the same id.
    return _id({name: value.lower()}, name, PROLIFIC_ID, what=what)


# What a platform task id that is not the study's own is refused with: the parameter, then why.
NOT_OWN_TASK = {
    Platform.MTURK: "hitId is not one of this study's HITs: open the HIT again from MTurk.",
    Platform.PROLIFIC: "STUDY_ID is not this study's Prolific study: open the study again from Prolific.",
}


def _own_task_id(*, study, platform: str, task_id: str) -> str:
    """``task_id`` (already in its platform's format) if ``study`` was published as it on
    ``platform`` (an MTurk HIT, a Prolific study; dry runs aside, closed ones included, so a task
    in progress still opens after a close): the one rule, ``study_platform_task_ids``, that
    decides too whose work money may move for. One indexed read of the study's publications, at
    the entry only: the task pages never ask again. Else ``ArrivalError`` naming the parameter."""
    if task_id not in study_platform_task_ids(study=study, platform=platform):
        raise ArrivalError(NOT_OWN_TASK[platform])
    return task_id


def arrival_parse(*, study, params) -> Arrival:
    """Validate the platform's query parameters (a QueryDict or dict) for ``study``'s platform.

    Every id must have its platform's documented format, and the platform's task it names (MTurk
    ``hitId``, Prolific ``STUDY_ID``) must be one this study was published as
    (``_own_task_id``); otherwise ``ArrivalError`` says which parameter is wrong. An MTurk
    preview (``assignmentId=ASSIGNMENT_ID_NOT_AVAILABLE``) stores nothing and is not looked up.
    The returned values are the validated ones: the only ones the app stores or sends."""
    platform = study.platform
    if platform == Platform.MTURK:
        if _param(params, "assignmentId") == MTURK_PREVIEW_ID:
            return Arrival(platform=platform, preview=True,
                           task_id=_id(params, "hitId", MTURK_ENTITY_ID, what="MTurk HIT id", required=False))
        assignment_id = _id(params, "assignmentId", MTURK_ENTITY_ID, what="MTurk assignment id")
        worker_id = _id(params, "workerId", MTURK_WORKER_ID, what="MTurk worker id")
        task_id = _id(params, "hitId", MTURK_ENTITY_ID, what="MTurk HIT id")
        submit_to = _param(params, "turkSubmitTo").rstrip("/")
        if submit_to not in MTURK_SUBMIT_URLS:
            raise ArrivalError("turkSubmitTo is not Amazon Mechanical Turk's address: open the HIT again from MTurk.")
        return Arrival(platform=platform, worker_id=worker_id, assignment_id=assignment_id,
                       task_id=_own_task_id(study=study, platform=platform, task_id=task_id), return_url=submit_to)
    if platform == Platform.PROLIFIC:
        worker_id = _prolific_id(params, "PROLIFIC_PID", what="Prolific participant id")
        task_id = _prolific_id(params, "STUDY_ID", what="Prolific study id")
        session_id = _prolific_id(params, "SESSION_ID", what="Prolific session id")
        return Arrival(platform=platform, worker_id=worker_id, assignment_id=session_id,
                       task_id=_own_task_id(study=study, platform=platform, task_id=task_id))
    return Arrival(platform=Platform.LINK)


# --- hand-back ----------------------------------------------------------------------------------

def handback_for(assignment) -> Handback:
    """How the finished page hands the worker back to the platform of ``assignment``. Every
    address is one of the fixed ones above; nothing of a URL a worker sent is used."""
    platform = assignment.participant.platform
    code = assignment.completion_code
    if platform == Platform.MTURK:
        action = MTURK_SUBMIT_URLS.get(assignment.return_url)
        if action is None:  # a row stored before turkSubmitTo was checked: no address to trust
            return Handback(kind="code", code=code)
        return Handback(
            kind="form_post",
            url=action,
            fields={"assignmentId": assignment.platform_assignment_id, "completionCode": code},
            code=code,
        )
    if platform == Platform.PROLIFIC:
        return Handback(kind="redirect", url=f"{PROLIFIC_COMPLETE_URL}?{urlencode({'cc': code})}", code=code)
    return Handback(kind="code", code=code)
