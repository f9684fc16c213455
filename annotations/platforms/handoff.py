"""How a worker arrives from a platform and how the end of a task hands them back.

This is the one place that knows the platforms' URL conventions; views and services ask it.

Arrival (query string of the entry URL ``/w/s/<study token>/``):

- MTurk ExternalQuestion: ``assignmentId``, ``hitId``, ``workerId``, ``turkSubmitTo``. While the
  worker only previews the HIT, ``assignmentId=ASSIGNMENT_ID_NOT_AVAILABLE`` and there is no
  ``workerId``: the page is read-only and nothing is stored.
- Prolific: ``PROLIFIC_PID``, ``STUDY_ID``, ``SESSION_ID``.
- Plain link: nothing; the browser gets a generated participant id in a signed cookie, so the
  same browser resumes. Single-person links (``/w/l/<token>/``) and open links
  (``/w/o/<token>/``) are the platforms' ``ParticipantLink`` / ``OpenLink`` rows.

Hand-back at the end:

- MTurk: the browser POSTs a form to ``{turkSubmitTo}/mturk/externalSubmit`` with
  ``assignmentId`` (plus ``completionCode``; MTurk wants at least one answer field).
- Prolific: a redirect to ``https://app.prolific.com/submissions/complete?cc=<code>``; the code is
  the study's (``study_completion_code``), the one configured when publishing.
- Link: the completion code on screen.
"""
from __future__ import annotations

import hashlib
import hmac
from dataclasses import dataclass, field
from urllib.parse import urlencode, urlsplit

from django.conf import settings
from django.core import signing
from django.urls import reverse

from studies.models import Platform

MTURK_PREVIEW_ID = "ASSIGNMENT_ID_NOT_AVAILABLE"
# Where MTurk may send workers back to; a turkSubmitTo elsewhere is refused (no open redirect).
MTURK_SUBMIT_HOSTS_DEFAULT = ("www.mturk.com", "workersandbox.mturk.com")
PROLIFIC_COMPLETE_URL = "https://app.prolific.com/submissions/complete"
_STUDY_SALT = "annotations.platforms.study"


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

def study_token(study_id: int) -> str:
    """A public, unguessable token for a study's entry URL (the id with a signature)."""
    return signing.Signer(salt=_STUDY_SALT).sign(str(study_id))


def study_id_from_token(token: str) -> int | None:
    try:
        return int(signing.Signer(salt=_STUDY_SALT).unsign(token))
    except (signing.BadSignature, ValueError):
        return None


def study_completion_code(study) -> str:
    """The study-wide completion code (Prolific checks one code per study).

    A code stored on the study's Prolific publication (``plan["completion_code"]``) wins;
    otherwise a stable code derived from the secret key and the study id, which the publisher
    must configure on Prolific."""
    try:
        from annotations.models.platforms import Publication

        publication = (
            Publication.objects.filter(study_id=study.pk, platform="prolific", dry_run=False)
            .order_by("-created_at")
            .first()
        )
        if publication and (publication.plan or {}).get("completion_code"):
            return str(publication.plan["completion_code"])
    except ImportError:  # pragma: no cover - the platforms module is optional
        pass
    digest = hmac.new(settings.SECRET_KEY.encode(), f"completion:{study.pk}".encode(), hashlib.sha256)
    return digest.hexdigest()[:8].upper()


def public_url(path: str) -> str:
    return f"{settings.RL_PUBLIC_URL}{path}"


def study_entry_url(study, *, platform: str | None = None) -> str:
    """The absolute URL a platform sends workers to. For Prolific, the query string carries
    Prolific's placeholders, as Prolific expects in the study URL."""
    url = public_url(reverse("annotations:entry", args=[study_token(study.pk)]))
    platform = platform or study.platform
    if platform == Platform.PROLIFIC:
        url += "?PROLIFIC_PID={{%PROLIFIC_PID%}}&STUDY_ID={{%STUDY_ID%}}&SESSION_ID={{%SESSION_ID%}}"
    return url


# --- arrival ------------------------------------------------------------------------------------

def _mturk_submit_hosts() -> tuple[str, ...]:
    return tuple(getattr(settings, "RL_MTURK_SUBMIT_HOSTS", MTURK_SUBMIT_HOSTS_DEFAULT))


def _clean(value: str | None, name: str, max_length: int = 200) -> str:
    value = (value or "").strip()
    if len(value) > max_length:
        raise ArrivalError(f"The parameter {name} is longer than {max_length} characters.")
    return value


def arrival_parse(*, platform: str, params) -> Arrival:
    """Read the platform's query parameters (a QueryDict or dict) for a study on ``platform``."""
    if platform == Platform.MTURK:
        assignment_id = _clean(params.get("assignmentId"), "assignmentId")
        if not assignment_id:
            raise ArrivalError("This task must be opened from Amazon Mechanical Turk (assignmentId is missing).")
        if assignment_id == MTURK_PREVIEW_ID:
            return Arrival(platform=platform, preview=True, task_id=_clean(params.get("hitId"), "hitId"))
        worker_id = _clean(params.get("workerId"), "workerId")
        submit_to = _clean(params.get("turkSubmitTo"), "turkSubmitTo", 300).rstrip("/")
        if not worker_id or not submit_to:
            raise ArrivalError("MTurk did not send workerId and turkSubmitTo: open the HIT again from MTurk.")
        parts = urlsplit(submit_to)
        if parts.scheme != "https" or parts.hostname not in _mturk_submit_hosts():
            raise ArrivalError("turkSubmitTo does not point to Amazon Mechanical Turk.")
        return Arrival(
            platform=platform,
            worker_id=worker_id,
            assignment_id=assignment_id,
            task_id=_clean(params.get("hitId"), "hitId"),
            return_url=submit_to,
        )
    if platform == Platform.PROLIFIC:
        pid = _clean(params.get("PROLIFIC_PID"), "PROLIFIC_PID")
        if not pid or pid.startswith("{{"):
            raise ArrivalError("This study must be opened from Prolific (PROLIFIC_PID is missing).")
        return Arrival(
            platform=platform,
            worker_id=pid,
            assignment_id=_clean(params.get("SESSION_ID"), "SESSION_ID"),
            task_id=_clean(params.get("STUDY_ID"), "STUDY_ID"),
        )
    return Arrival(platform=Platform.LINK)


# --- hand-back ----------------------------------------------------------------------------------

def handback_for(assignment) -> Handback:
    """How the finished page hands the worker back to the platform of ``assignment``."""
    platform = assignment.participant.platform
    code = assignment.completion_code
    if platform == Platform.MTURK and assignment.return_url:
        return Handback(
            kind="form_post",
            url=f"{assignment.return_url}/mturk/externalSubmit",
            fields={"assignmentId": assignment.platform_assignment_id, "completionCode": code},
            code=code,
        )
    if platform == Platform.PROLIFIC:
        return Handback(kind="redirect", url=f"{PROLIFIC_COMPLETE_URL}?{urlencode({'cc': code})}", code=code)
    return Handback(kind="code", code=code)
