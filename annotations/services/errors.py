"""Domain errors of the questionnaire. Each carries a message a worker or researcher can act on;
views show it on a page (never a stack trace), tests match on the class."""
from __future__ import annotations

from annotations.models import Assignment


class AnnotationError(Exception):
    """Base class. ``status`` is the HTTP status a view answers with."""

    status = 400

    def __init__(self, message: str):
        super().__init__(message)
        self.message = message


class StudyNotOpen(AnnotationError):
    status = 403


class ParticipantBlocked(AnnotationError):
    status = 403


class NotQualified(AnnotationError):
    status = 403


class QualificationRequired(AnnotationError):
    """The task's qualification test was not passed yet: no answer is stored, nothing submits."""

    status = 403


class PlatformAssignmentDone(AnnotationError):
    """The platform assignment of this entry already has its local task, finished: ``assignment``
    is that task (its page is the done page, with its completion code and hand-back)."""

    status = 409

    def __init__(self, message: str, *, assignment):
        super().__init__(message)
        self.assignment = assignment


class PlatformAssignmentTaken(AnnotationError):
    """The platform assignment already has another local task in progress."""

    status = 409


class NoWorkAvailable(AnnotationError):
    status = 409


class ConsentChanged(AnnotationError):
    """The consent form agreed to another text than the study's consent now reads (its page was
    loaded before the text changed, or its hash was altered): nothing is taken, the page shows the
    study's consent as it reads now."""

    status = 409


class TaskInProgress(AnnotationError):
    """The worker has a task in progress in this study that this request may not open (see
    ``annotations.services.entry``)."""

    status = 409


class AssignmentNotActive(AnnotationError):
    """The assignment was submitted, returned, expired or reviewed: nothing more is stored."""

    status = 409


class AssignmentExpired(AssignmentNotActive):
    status = 410


class TaskEnded(AnnotationError, Assignment.DoesNotExist):
    """The task no longer exists: its worker withdrew from the study (``services.withdrawal``
    erased it) while a request of theirs was on its way, so nothing is stored. Raised by the task's
    row lock (``release.lock``); also an ``Assignment.DoesNotExist``, which the researcher's callers
    of that lock (a review, a bonus) catch with their own words."""

    status = 410


class ForeignClaim(AnnotationError):
    """The claim does not belong to this assignment."""

    status = 403


class StepOutOfOrder(AnnotationError):
    status = 409


class AnswerLocked(AnnotationError):
    """An answer for this step is already stored and differs from the new one."""

    status = 409


class InvalidAnswer(AnnotationError):
    status = 400


class AnswerNotTimed(InvalidAnswer):
    """A new answer from a worker's page without the page's signed record of when it showed that
    question and step (the form's ``shown`` field missing, altered, or another question's)."""


class AssignmentIncomplete(AnnotationError):
    status = 409


class UnitsBuildError(AnnotationError):
    pass
